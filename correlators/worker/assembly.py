"""One correlator worker's collaborators, built from its settings and what the Faust side gives it.

:mod:`correlators.app` owns Faust (the app, topics, the ``emitted`` table, the agent and timers) and
hands over plain callables (:mod:`correlators.worker.ports`); everything here is built once, at
start, in this order: the partition states held; the publisher; the snapshot reader and taker
(when ``FAULTLINE_SNAPSHOT_EVERY_EVENTS`` > 0); the takeover; the live clock (when
``FAULTLINE_LIVE_CLOCK``, which adopts assigned partitions ahead of their records); the record
judge; the delivery watch. The confluent-kafka edges (the rebuild's log
reads, the snapshot topic, committed offsets) are bound to their topics here too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from common import metrics as m
from common.kafka_reader import TopicReader
from common.settings import Settings
from correlators.engine import Correlator
from correlators.operator_trust import OperatorTrust
from correlators.partitions import PartitionState, WorkerState
from correlators.policy import load_policy
from correlators.rebuild import rebuild
from correlators.snapshot_topic import (
    SnapshotWriter,
    ensure_snapshot_topic,
    events_log_range,
    read_latest_snapshot,
    snapshot_topic_name,
)
from correlators.snapshots import (
    MAX_SNAPSHOT_BYTES,
    SnapshotSchedule,
    capture_engines,
    open_snapshot,
    policy_fingerprint,
    seal,
)
from correlators.worker.delivery_watch import DeliveryWatch
from correlators.worker.judge import RecordJudge
from correlators.worker.live import LiveClock, set_gauges
from correlators.worker.ports import Ack, OffsetTable, Send
from correlators.worker.publisher import Publisher
from correlators.worker.snapshot_taker import Captured, SnapshotTaker
from correlators.worker.takeover import SnapshotLoader, Takeover
from streams.topics import is_replay_namespace

__all__ = ["Worker"]

log = logging.getLogger("faultline.correlator")

#: After a failed adoption, the partition is tried again this much later (the tick runs every 50 ms).
ADOPT_RETRY_S = 5.0


class Worker:
    """Every collaborator of one worker (see the module docstring); the Faust adapter calls these."""

    def __init__(self, settings: Settings, conf: dict[str, Any], *, app_id: str, events_topic: str,
                 partitions: int, send: Send, emitted: OffsetTable, ack: Ack,
                 position: Callable[[int], Awaitable[int | None]], seek: Callable[[int, int], Awaitable[None]],
                 ready: Callable[[], bool]) -> None:
        policy = load_policy(settings.policy)
        self.held = WorkerState()
        self.publisher = Publisher(send, emitted, namespace=settings.namespace, keys=settings.signing(),
                                   ttl=timedelta(seconds=settings.command_ttl_s), live_clock=settings.live_clock,
                                   cluster=settings.cluster)
        loader, self.snapshots = None, None
        if settings.snapshot_every_events > 0:
            loader, self.snapshots = self._snapshots(settings, conf, app_id, events_topic, partitions, policy)

        operators = OperatorTrust(settings.operators(), settings.namespace, settings.cluster)
        replay = is_replay_namespace(settings.namespace)  # where a capture may end (correlators/capture_end.py)

        def new_state(part: int) -> PartitionState:
            return PartitionState(part, lambda: Correlator(policy, operators=operators, replay=replay), settings.cell)

        def rebuild_from_log(state: PartitionState, upto: int, after: int) -> Any:
            return rebuild(state, conf, events_topic, app_id, upto, after)

        def committed(parts: list[int]) -> dict[int, int]:
            with TopicReader(conf, events_topic, app_id) as reader:
                return reader.committed_offsets(parts)

        self.takeover = Takeover(self.held, new_state, self.publisher, rebuild_from_log, ack, load_snapshot=loader,
                                 committed=committed)
        self._assigned: set[int] = set()
        self.events_topic = events_topic
        self._ready = ready
        self._adopt_after: dict[int, float] = {}  # partition -> monotonic time of its next attempt
        self.live = LiveClock(self.held, self.publisher, adopt=self._adopt_unheld) if settings.live_clock else None
        self.judge = RecordJudge(self.held, self.takeover, self.publisher, self.snapshots, topic=events_topic,
                                 operators=operators, namespace=settings.namespace)
        self.watch = DeliveryWatch(self.held, idle_for=self.judge.idle_for, ready=ready, position=position,
                                   seek=seek, committed=committed)

    def _snapshots(self, settings: Settings, conf: dict[str, Any], app_id: str, events_topic: str,
                   partitions: int, policy: Any) -> tuple[SnapshotLoader, SnapshotTaker]:
        """The snapshot topic (made to exist), its reader for takeovers and the taker."""
        topic = snapshot_topic_name(app_id)
        ensure_snapshot_topic(conf, topic, partitions)
        writer = SnapshotWriter(conf, topic)
        key = settings.snapshot_key.get_secret_value().encode() if settings.snapshot_key else None
        fingerprint = policy_fingerprint(policy)
        loader = SnapshotLoader(lambda part: read_latest_snapshot(conf, topic, part, app_id),
                                lambda blob, part: open_snapshot(blob, part, fingerprint, key),
                                lambda part: events_log_range(conf, events_topic, part, app_id), topic)

        def capture(state: PartitionState) -> Captured:
            position, cells, body = capture_engines(state)
            return Captured(state.partition, position, cells, body)

        def sealed(c: Captured) -> bytes:
            return seal(c.partition, c.position, c.cells, c.body, fingerprint, key)

        pool = ThreadPoolExecutor(1, thread_name_prefix="snapshots")  # one at a time: written in order
        taker = SnapshotTaker(SnapshotSchedule(settings.snapshot_every_events, settings.snapshot_every_s), capture,
                              sealed, writer.send, pool.submit, max_bytes=MAX_SNAPSHOT_BYTES,
                              ticks_in_flight=lambda: self.live is not None and self.live.in_flight)
        return loader, taker

    def on_assigned(self, partitions: set[int]) -> None:
        """The consumer's events partitions now."""
        self._assigned = set(partitions)
        self.judge.on_assigned(partitions)
        self.watch.on_assigned(partitions)

    async def _adopt_unheld(self) -> None:
        """With the live clock: every assigned partition without a state taken over now (not mid-rebalance)."""
        for part in sorted(self._assigned - set(self.held.partitions)):
            if not self._ready():
                return
            if time.monotonic() < self._adopt_after.get(part, 0.0):
                continue
            try:
                await self.takeover.adopt(part)
            except Exception as exc:  # the agent's own takeover raises; here a later tick tries again
                self._adopt_after[part] = time.monotonic() + ADOPT_RETRY_S
                log.warning("could not take partition %d over ahead of its records (%r); trying again in %.0fs",
                            part, exc, ADOPT_RETRY_S)
                continue
            if part not in self._assigned:  # revoked meanwhile
                self.held.release(part)

    def set_gauges(self, highwater: Callable[[int], int | None] | None = None) -> None:
        """The incident gauges; with ``highwater`` (the consumer's end of each events partition), the lag this
        worker's heartbeat carries: per assigned partition, the records past the last one judged here (all of
        them for a partition it holds no state for yet)."""
        set_gauges(self.held)
        if highwater is None:
            return
        lags: dict[tuple[str, int], int] = {}
        for part in sorted(self._assigned):
            try:
                end = highwater(part)
            except Exception:  # noqa: BLE001 -- revoked meanwhile (aiokafka asserts): unknown this round
                continue
            if end is None or end < 0:
                continue  # not fetched yet: unknown, not zero
            done = self.held.get(part).position + 1 if part in self.held.partitions else 0
            lags[(self.events_topic, part)] = max(0, end - done)
        m.set_consumer_lag("correlator", lags)
