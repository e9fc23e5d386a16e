"""A stage's own heartbeat on the ``heartbeats`` topic, published every interval on a thread of its own.

The rule (:mod:`streams.health`): every running stage says it is alive every ``interval_s``, with
its version, its development mode and its lag as it measured it itself (``lag``: a callable, read at
each beat; :func:`common.metrics.stage_lag` for a stage that sets its consumer lag). A stage silent
past three intervals is shown down by `faultline status` and fires ``StageSilent``.

A heartbeat never stops or slows its stage: a failed publish is logged and the next beat tries
again; the thread is a daemon, and :meth:`HeartbeatPublisher.stop` flushes the last beat briefly.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaException, Producer

from streams.health import HEARTBEAT_EVERY_S, StageHeartbeat, StageKind, heartbeat_key
from streams.topics import topic_name

__all__ = ["HeartbeatPublisher", "default_instance"]

log = logging.getLogger(__name__)


def default_instance(name: str | None = None) -> str:
    """Which instance this is: ``name@host`` (an executor's name), else the host. Stable across restarts,
    so a restarted stage takes its own row back instead of leaving a dead one beside a new one."""
    host = socket.gethostname()
    return f"{name}@{host}" if name else host


class HeartbeatPublisher:
    """Publishes one stage instance's :class:`StageHeartbeat` every ``interval_s`` until stopped."""

    def __init__(self, conf: Mapping[str, Any], namespace: str, stage: StageKind, *, version: str, dev_mode: bool,
                 instance: str | None = None, interval_s: float = HEARTBEAT_EVERY_S,
                 lag: Callable[[], int | None] = lambda: None,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.topic = topic_name(namespace, "heartbeats")
        self.stage, self.instance = stage, instance or default_instance()
        self.version, self.dev_mode, self.interval_s = version, dev_mode, interval_s
        self._lag, self._clock = lag, clock
        self.started_at = clock()
        self._producer = Producer({**conf, "linger.ms": 0})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{stage}", daemon=True)

    def beat(self) -> StageHeartbeat:
        """The heartbeat as of now."""
        return StageHeartbeat(stage=self.stage, instance=self.instance, version=self.version, dev_mode=self.dev_mode,
                              interval_s=self.interval_s, lag=self._lag(), started_at=self.started_at,
                              at=self._clock())

    def publish(self) -> None:
        """Send one heartbeat now (asynchronously); a failure is logged, never raised."""
        beat = self.beat()
        try:
            self._producer.produce(self.topic, key=heartbeat_key(beat).encode(), value=beat.model_dump_json().encode())
            self._producer.poll(0)
        except (KafkaException, BufferError) as exc:
            log.warning("heartbeat of %s %s not sent: %s", self.stage, self.instance, exc)

    def _run(self) -> None:
        while True:
            self.publish()
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> HeartbeatPublisher:
        self._thread.start()
        return self

    def stop(self, flush_s: float = 2.0) -> None:
        """Stop beating and deliver what is in flight (at most ``flush_s``)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(flush_s)
        self._producer.flush(flush_s)

    def __enter__(self) -> HeartbeatPublisher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
