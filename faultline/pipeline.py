"""Run the stages together on one machine: for `faultline replay` and `faultline demo`.

Capture lines → producer-side parsing → Kafka (events) → the Faust correlator
worker (a real `faultline worker` process) → incidents/commands topics → the
ClickHouse archive sink. Each run gets a topic namespace of its own, so it can
run beside a live pipeline on the same broker.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import metrics
from common.heap import streaming_gc
from common.kafka_admin import (
    create_namespace_topics,
    delete_namespace_topics,
)
from common.kafka_reader import read_topic
from common.settings import Settings
from faultline.outcome import collate
from producers import metrics as producer_metrics
from producers.batching import Batching
from producers.capture.fast_nvml import parse_for_publishing
from producers.capture.reader import OversizedLine, read_capture_lines
from producers.capture.screen import CaptureScreen, Refused
from producers.delivery import EventPublisher
from streams.decisions import Command, Incident, StreamEnd
from streams.events import EndOfCapture, Event
from streams.topics import scratch_namespace, topic_name

__all__ = ["Run", "CorrelatorWorker", "replay", "replay_batching"]

log = logging.getLogger("faultline.pipeline")


class CorrelatorWorker:
    """A `faultline worker` process (the Faust app) for one namespace.

    Workers of one namespace form one consumer group and share the events partitions; give each
    a ``name`` of its own when several run from one data dir, so each logs to its own file.
    """

    def __init__(self, settings: Settings, bootstrap: str, namespace: str, name: str | None = None,
                 log_level: str = "warn") -> None:
        # These settings, not whatever FAULTLINE_* this process inherited; secrets by environment.
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for key, value in settings.child_env().items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        # A replay's or demo's own namespace, thrown away after: development mode (keys are used when set).
        env.update(FAULTLINE_KAFKA=bootstrap, FAULTLINE_NAMESPACE=namespace, FAULTLINE_DEV_MODE="true")
        logdir = settings.data_dir / "logs"
        logdir.mkdir(parents=True, exist_ok=True)
        self.log_path = logdir / f"worker-{namespace}{f'-{name}' if name else ''}.log"
        self._start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log = self.log_path.open("ab")  # a restarted worker appends to its namespace's log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "correlators.app", "worker", "-l", log_level, "--without-web"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        """What this worker (not an earlier one of the same namespace) has logged."""
        with self.log_path.open("rb") as f:
            f.seek(self._start)
            return f.read().decode(errors="replace")

    def crashed(self) -> bool:
        """Faust logs an agent's crash and keeps the process up; we treat it as fatal."""
        return "Crashed reason=" in self.log_text()

    def terminate(self) -> None:
        """Ask the worker to shut down (SIGTERM) without waiting; :meth:`stop` then waits."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # faust can hang in shutdown; it holds no state we need
                self.proc.wait(5)
        self._log.close()

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])


@dataclass
class Run:
    namespace: str
    lines: int = 0
    events: int = 0
    bad: int = 0
    incidents: list[Incident] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    archived_rows: int = 0
    archive_namespace: str = ""  # where its rows are in the archive (``faultline report --namespace``)

    def contract(self) -> dict[str, list[dict[str, Any]]]:
        return collate(self.incidents, self.commands)


def replay_batching(settings: Settings) -> Batching | None:
    """How a replay packs its events into records (``FAULTLINE_REPLAY_BATCH_*``; None: one per record)."""
    if settings.replay_batch_events <= 1:
        return None
    return Batching(max_events=settings.replay_batch_events, window_s=settings.replay_batch_window_ms / 1000)


def publish_capture(pub: EventPublisher, lines: Iterable[bytes | OversizedLine],
                    on_line: Callable[[int], None] | None = None) -> tuple[int, int, int, datetime | None]:
    """Screen and publish every line (:mod:`producers.capture.screen`): a good line's events go to
    the events topic; a bad line (too long, a duplicate, unparsable, a time far from its neighbours')
    becomes one dead letter naming its line number and why, and counts in
    ``faultline_dead_letters_total{stage="producer"}`` and ``faultline_capture_bad_lines_total{kind}``.
    Returns (lines, events, bad lines, the newest event time)."""
    n = events = bad = 0
    last: datetime | None = None
    for verdict in CaptureScreen(parse=parse_for_publishing).screen(lines):  # events only published: records
        n = verdict.line
        if isinstance(verdict, Refused):
            bad += 1
            metrics.DEAD_LETTERS.labels("producer").inc()
            producer_metrics.BAD_LINES.labels(verdict.error.kind).inc()
            pub.dead_letter(verdict.dead_letter("producer", datetime.now(UTC)))
            continue
        pub.publish(verdict.events)
        events += len(verdict.events)
        for e in verdict.events:
            last = e.ts if last is None or e.ts > last else last
        if on_line:
            on_line(n)
    return n, events, bad, last


class _ReplayArchive:
    """A replay's archive: one store and one sink, draining on a thread while the worker judges.

    The events are all on their topic once published: they are archived while the worker (its own
    process) finishes judging; :meth:`finish` then waits for that and archives the decisions.
    """

    def __init__(self, settings: Settings, conf: dict[str, Any], namespace: str, archive_namespace: str | None
                 ) -> None:
        from sinks.archive.store import Archive
        from sinks.archive_sink import ArchiveSink

        self._store = Archive.open(settings.archive_url, archive_namespace or namespace, live=settings.namespace)
        try:
            self._sink = ArchiveSink(self._store, conf["bootstrap.servers"], namespace, consumer_config=conf)
        except BaseException:
            self._store.close()
            raise
        self._rows: list[int] = []
        self._error: list[BaseException] = []
        self._thread = threading.Thread(target=self._drain_early, daemon=True, name="replay-archive")
        self._thread.start()

    def _drain_early(self) -> None:
        try:
            self._rows.append(self._sink.drain(timeout_s=120))
        except BaseException as exc:  # raised in finish()
            self._error.append(exc)

    def finish(self) -> int:
        """Every row of the namespace archived (the early drain's and the rest); how many."""
        self._thread.join()
        if self._error:
            raise self._error[0]
        return self._rows[0] + self._sink.drain(timeout_s=120)

    def close(self) -> None:
        self._thread.join()  # it reads the topics: done before they go
        try:
            self._sink.close()
        finally:
            self._store.close()


def end_marker(lines: int, last: datetime | None) -> Event:
    return Event(id=f"end-of-capture-{uuid.uuid4().hex}", ts=last or datetime.now(UTC), source="replay",
                 body=EndOfCapture(lines=lines))


def wait_for_end(conf: dict[str, Any], namespace: str, worker: CorrelatorWorker, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    topic = topic_name(namespace, "control")
    while time.monotonic() < deadline:
        if not worker.alive() or worker.crashed():
            raise RuntimeError(f"the correlator worker failed; its log ends:\n{worker.tail()}")
        for raw in read_topic(conf, topic, timeout=10):
            StreamEnd.model_validate_json(raw)
            return
        time.sleep(0.3)
    raise TimeoutError(f"the correlator did not finish within {timeout:.0f}s; log {worker.log_path}:\n{worker.tail()}")


def collect(conf: dict[str, Any], namespace: str) -> tuple[list[Incident], list[Command]]:
    incidents = [Incident.model_validate_json(v) for v in read_topic(conf, topic_name(namespace, "incidents"))]
    commands = [Command.model_validate_json(v) for v in read_topic(conf, topic_name(namespace, "commands"))]
    return incidents, commands


def archive(settings: Settings, conf: dict[str, Any], namespace: str, archive_namespace: str | None = None) -> int:
    """Drain the namespace's topics into the archive, under ``archive_namespace`` (default: the
    namespace itself: a replay's or demo's rows stay out of the live namespace's)."""
    from sinks.archive.store import Archive
    from sinks.archive_sink import ArchiveSink

    store = Archive.open(settings.archive_url, archive_namespace or namespace, live=settings.namespace)
    try:
        sink = ArchiveSink(store, conf["bootstrap.servers"], namespace, consumer_config=conf)
        try:
            return sink.drain(timeout_s=120)
        finally:
            sink.close()
    finally:
        store.close()


def replay(capture: Path, settings: Settings, keep_topics: bool = False,
           on_line: Callable[[int], None] | None = None, archive_namespace: str | None = None) -> Run:
    """Run a capture through the real pipeline; return what it decided (also archived, in the
    archive namespace of the run's own name unless ``archive_namespace`` names another).

    The policy, the archive and the broker are checked first (:func:`faultline.preflight.preflight`):
    nothing is published unless every stage can do its part.
    """
    from faultline.preflight import preflight

    with streaming_gc():  # parsing and archiving are bursts of short-lived models (common/heap.py)
        return _replay(capture, settings, keep_topics, on_line, archive_namespace, preflight(settings))


def _replay(capture: Path, settings: Settings, keep_topics: bool, on_line: Callable[[int], None] | None,
            archive_namespace: str | None, bootstrap: str) -> Run:
    conf = settings.kafka_config(bootstrap)
    run = Run(namespace=scratch_namespace(settings.namespace, "replay", uuid.uuid4().hex[:10]))
    create_namespace_topics(conf, run.namespace, partitions=1)  # one partition: decisions keep their order
    worker = CorrelatorWorker(settings, bootstrap, run.namespace)
    archived: _ReplayArchive | None = None
    try:
        pub = EventPublisher(conf, run.namespace, settings.cell, replay_batching(settings))
        with capture.open("rb") as f:
            run.lines, run.events, run.bad, last = publish_capture(pub, read_capture_lines(f), on_line)
        pub.publish([end_marker(run.lines, last)])
        pub.flush()
        archived = _ReplayArchive(settings, conf, run.namespace, archive_namespace)  # while the worker judges
        wait_for_end(conf, run.namespace, worker, timeout=120 + run.lines / 500)
        worker.terminate()  # it is done: let it shut down while the decisions are read
        run.incidents, run.commands = collect(conf, run.namespace)
        run.archived_rows = archived.finish()
        run.archive_namespace = archive_namespace or run.namespace
    finally:
        worker.stop()
        if archived is not None:
            archived.close()
        if not keep_topics:
            delete_namespace_topics(conf, run.namespace)
    return run
