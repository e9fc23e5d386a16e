"""Kafka → archive: consume a namespace's topics into the ClickHouse archive.

One consumer reads the ``events``, ``incidents``, ``commands``,
``command-results`` and ``deadletters`` topics of a namespace, decodes every
record with its topic's model and writes batches (by size or age) to the
:class:`~sinks.archive.store.Archive`. A batch is written first and its offsets
committed (synchronously) after, so a crash between the two only re-delivers
records the archive already holds, and the archive's writes are idempotent.
When the archive fails, the sink backs off (bounded exponential), commits
nothing and writes the same batch again -- unless the error is one retrying
cannot fix (a value the column cannot hold: :mod:`sinks.archive_errors`); then
the records that fail alone become dead letters and the rest are written. A
record that does not decode becomes a row in the archive's ``deadletters``
table, with the reason; neither ever stops the sink. So does a record (or an
event) over the cap readers take: :data:`streams.bounds.MAX_EVENT_BYTES` on ``events``,
:data:`streams.bounds.MAX_RECORD_BYTES` on every topic faultline publishes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from prometheus_client import Counter

from common import metrics as stage_metrics
from common.heap import streaming_gc
from sinks.archive.store import Archive
from sinks.archive_batch import DEAD_LETTERS, Batch, decode, write_events_isolating
from sinks.archive_errors import write_isolating
from streams.decisions import DeadLetter
from streams.health import StageHeartbeat
from streams.topics import topic_name

__all__ = ["SUFFIXES", "ArchiveSink", "ROWS_WRITTEN", "BATCHES_WRITTEN", "DEAD_LETTERS", "WRITE_RETRIES"]

log = logging.getLogger(__name__)

# Module-level, so created once per process however many sinks run in it.
ROWS_WRITTEN = Counter("faultline_archive_rows_written", "Rows written to the archive", ["table"])
BATCHES_WRITTEN = Counter("faultline_archive_batches", "Batches written to the archive and committed")
WRITE_RETRIES = Counter("faultline_archive_write_retries", "Failed archive writes, retried after a back-off")

# Topic suffix -> (archive table, Archive method writing it), in the order a batch is written.
_ROUTES: dict[str, tuple[str, str]] = {
    "events": ("events", "write_events"),
    "incidents": ("incident_versions", "write_incidents"),
    "commands": ("commands", "write_commands"),
    "command-results": ("command_results", "write_results"),
    "deadletters": ("deadletters", "write_deadletters"),
    "heartbeats": ("stage_heartbeats", "write_heartbeats"),  # stages' own (streams/health.py), for status
}
SUFFIXES: tuple[str, ...] = tuple(_ROUTES)

_LAG_EVERY_S = 5.0  # how often run() refreshes the consumer-lag gauge
_BACKOFF_FIRST_S = 0.1
_BACKOFF_MAX_S = 5.0
_DRAIN_BATCH = 5000
_DRAIN_WAIT_S = 0.2
# Consumer settings that the admin client (end offsets) shares.
_CONNECTION_SETTINGS = ("bootstrap.", "client.", "security.", "sasl.", "ssl.", "socket.")


class ArchiveSink:
    """Consumes one namespace's topics into an :class:`Archive` (which the caller owns)."""

    def __init__(
        self,
        archive: Archive,
        bootstrap: str,
        namespace: str,
        *,
        group_id: str | None = None,
        consumer_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.archive = archive
        self.topics = {topic_name(namespace, suffix): suffix for suffix in SUFFIXES}
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id or f"{namespace}.archive",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # Notice topics created after the sink started within seconds, not minutes.
            "topic.metadata.refresh.interval.ms": 10_000,
            # A sink killed without leaving its group holds its partitions until its session expires: its
            # successor (a restart, or a second sink) waits this long, not librdkafka's default 45 s.
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 2_000,
            # A fetch for partitions with nothing new waits this long at the broker, and a partition assigned
            # meanwhile waits for it: librdkafka's 500 ms held up the first records of every drain.
            "fetch.wait.max.ms": 100,
        }
        config.update(consumer_config or {})
        self._consumer = Consumer(config)
        self._admin = AdminClient({k: v for k, v in config.items() if k.startswith(_CONNECTION_SETTINGS)})
        self._consumer.subscribe(list(self.topics))
        self._closed = False
        self._next_lag = 0.0  # when run() next refreshes the consumer-lag gauge
        self._early: list[Message] = []  # consumed by join(), archived by the next poll

    def close(self) -> None:
        """Leave the consumer group (the archive stays open); idempotent."""
        if not self._closed:
            self._closed = True
            self._consumer.close()

    def __enter__(self) -> ArchiveSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- loops ------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, max_batch: int = 5000, max_wait_s: float = 0.5) -> None:
        """Consume and archive until ``stop`` is set (forever without one).

        A batch still buffered at stop is written and committed; one the archive
        refuses until stop is dropped uncommitted, to be re-delivered later.
        """
        stop = stop or threading.Event()

        def back_off(delay: float) -> bool:
            self._report_lag_now_and_then()  # the lag grows while the archive is away: alerts must see it
            return stop.wait(delay)

        batch = Batch()
        with streaming_gc():  # a batch's records all live until it is written (common/heap.py)
            while not stop.is_set():
                self._poll(batch, max_batch, max_wait_s)
                if batch.due(max_batch, max_wait_s):
                    self._flush(batch, back_off)
                    batch = Batch()
                self._report_lag_now_and_then()
            if batch.size:
                self._flush(batch, back_off)

    def _report_lag_now_and_then(self) -> None:
        """:meth:`_report_lag`, at most every few seconds."""
        if time.monotonic() >= self._next_lag:
            self._report_lag()
            self._next_lag = time.monotonic() + _LAG_EVERY_S

    def _report_lag(self) -> None:
        """Records between the sink's position and each partition's end (Prometheus gauge)."""
        try:
            ends = self.end_offsets(timeout_s=2)
            parts = [TopicPartition(t, p) for t, ps in ends.items() for p in ps]
            positions = {(tp.topic, tp.partition): tp.offset for tp in self._consumer.position(parts)}
        except KafkaException as exc:
            log.debug("archive sink: lag not measured: %s", exc)
            return
        stage_metrics.set_consumer_lag("sink", {
            (t, p): end - positions[(t, p)] if positions.get((t, p), -1) >= 0 else end
            for t, ps in ends.items() for p, end in ps.items()})

    def drain(self, until: dict[str, dict[int, int]] | None = None, timeout_s: float = 60) -> int:
        """Archive until every partition reaches ``until`` (default: the end offsets now).

        ``until`` maps topic -> partition -> offset to reach (exclusive, as high
        watermarks are). Returns the rows written; raises :class:`TimeoutError`
        when ``timeout_s`` passes first.
        """
        deadline = time.monotonic() + timeout_s
        targets = until if until is not None else self.end_offsets()
        pending = {(t, p): end for t, parts in targets.items() for p, end in parts.items() if end > 0}

        def wait_or_give_up(delay: float) -> bool:
            time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
            return time.monotonic() >= deadline

        with streaming_gc():  # a batch's records all live until it is written (common/heap.py)
            return self._drain(pending, deadline, timeout_s, wait_or_give_up)

    def _drain(self, pending: dict[tuple[str, int], int], deadline: float, timeout_s: float,
               wait_or_give_up: Callable[[float], bool]) -> int:
        written = 0
        batch = Batch()
        while True:
            if batch.size == 0 and not self._early:
                self._forget_reached(pending)
                if not pending:
                    return written
            if time.monotonic() >= deadline:
                raise TimeoutError(f"archive drain: partitions not reached in {timeout_s}s: {sorted(pending)}")
            self._poll(batch, _DRAIN_BATCH, _DRAIN_WAIT_S)
            if batch.due(_DRAIN_BATCH, _DRAIN_WAIT_S):
                rows = self._flush(batch, wait_or_give_up)
                if rows is None:
                    raise TimeoutError(f"archive drain: archive still failing after {timeout_s}s")
                written += rows
                batch = Batch()

    def end_offsets(self, timeout_s: float = 10) -> dict[str, dict[int, int]]:
        """Where every partition of the sink's (existing) topics ends now.

        That is the last stable offset: the high watermark, short of any open
        transaction, which a read-committed consumer cannot pass yet. Asked on
        an admin connection of its own, so the consumer's long-poll fetches do
        not delay it.
        """
        meta = self._admin.list_topics(timeout=timeout_s).topics
        request = {
            TopicPartition(topic, partition): OffsetSpec.latest()
            for topic in self.topics
            if topic in meta and meta[topic].error is None
            for partition in meta[topic].partitions
        }
        if not request:
            return {}
        answers = self._admin.list_offsets(
            request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s
        )
        ends: dict[str, dict[int, int]] = {}
        for tp, answer in answers.items():
            ends.setdefault(tp.topic, {})[tp.partition] = answer.result(timeout=timeout_s).offset
        return ends

    # --- steps ------------------------------------------------------------------------------

    def join(self, timeout_s: float = 30.0) -> bool:
        """Join the consumer group now (else the first poll of a drain or run waits for it); whether it got
        partitions within ``timeout_s``. Anything consumed meanwhile is archived by the next poll."""
        deadline = time.monotonic() + timeout_s
        while not self._consumer.assignment() and time.monotonic() < deadline:
            self._early += self._consumer.consume(num_messages=1000, timeout=0.1)
        return bool(self._consumer.assignment())

    def _poll(self, batch: Batch, max_batch: int, max_wait_s: float) -> None:
        """Add what has arrived to the batch; only when nothing has, wait for the next record, up to the batch's
        remaining time (or ``max_wait_s``).

        The consumer's ``consume`` returns early only once it has all the records asked for: asked for a
        batch's worth with a timeout, it sat out the whole timeout whenever fewer were fetched (0.6-0.9 s of a
        3-6 s drain in the bench: README "Benchmarks").
        """
        early, self._early = self._early, []
        msgs = early or self._consumer.consume(num_messages=max(1, max_batch - batch.size), timeout=0)
        if not msgs:
            wait = max_wait_s if batch.size == 0 else batch.opened + max_wait_s - time.monotonic()
            msgs = self._consumer.consume(num_messages=1, timeout=max(0.0, wait))
        for msg in msgs:
            err = msg.error()
            if err is None:
                stage_metrics.RECORDS_IN.labels("sink", str(msg.topic())).inc()
                batch.add(decode(msg, self.topics[str(msg.topic())]), msg)
            elif err.fatal():
                raise KafkaException(err)
            elif err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                log.debug("archive sink: %s", err)
            else:
                log.warning("archive sink: consumer error: %s", err)

    def _flush(self, batch: Batch, wait: Callable[[float], bool]) -> int | None:
        """Write the batch (retrying), then commit its offsets; None if ``wait`` gave up."""
        delay = _BACKOFF_FIRST_S
        failures = 0
        while True:
            try:
                rows = self._write(batch)
                break
            except Exception as exc:
                WRITE_RETRIES.inc()
                failures += 1
                # The whole traceback once per outage; then one line per retry.
                log.warning("archive write failed (%s: %.300s); retrying in %.1fs, offsets not committed meanwhile."
                            " Check that ClickHouse is up and its disk has room.", type(exc).__name__, exc, delay,
                            exc_info=failures == 1)
                if wait(delay):
                    return None
                delay = min(delay * 2, _BACKOFF_MAX_S)
        if failures:
            log.warning("archive writes succeed again after %d failed attempts; catching up", failures)
        try:
            self._consumer.commit(offsets=self._commit_offsets(batch), asynchronous=False)
        except KafkaException as exc:
            # Archived already: a re-delivery after this is harmless (idempotent writes).
            log.warning("archive sink: offset commit failed (%s); the records are archived and will come again,"
                        " which the archive absorbs (rows replaced by id)", exc)
        BATCHES_WRITTEN.inc()
        return rows

    def _commit_offsets(self, batch: Batch) -> list[TopicPartition]:
        """The batch's next offsets, moved past any transaction markers the consumer skipped.

        Every record consumed so far is in the batch, so the consumer's position
        is durable too; committing it keeps the group's lag at zero on topics
        written in transactions.
        """
        parts = [TopicPartition(t, p) for t, p in batch.offsets]
        positions = {(tp.topic, tp.partition): tp.offset for tp in self._consumer.position(parts)}
        return [TopicPartition(t, p, max(o, positions.get((t, p), -1))) for (t, p), o in batch.offsets.items()]

    def _write(self, batch: Batch) -> int:
        """Write every table of the batch; records the archive refuses for good become dead letters.

        Only what retrying cannot fix is set aside (:mod:`sinks.archive_errors`); any other error is
        raised, and the caller retries the batch.
        """
        rows = 0
        refused: list[DeadLetter] = []
        topics = {suffix: topic for topic, suffix in self.topics.items()}
        for suffix, (table, method) in _ROUTES.items():
            records = batch.records.get(suffix)
            if records:
                isolating = write_events_isolating if suffix == "events" else write_isolating
                written, letters = isolating(getattr(self.archive, method), records,  # type: ignore[arg-type]
                                             f"archive-sink:{topics[suffix]}")
                refused += letters
                ROWS_WRITTEN.labels(table=table).inc(written)
                stage_metrics.RECORDS_OUT.labels("sink", table).inc(written)
                rows += written
        for beat in (b for b in batch.records.get("heartbeats", ()) if isinstance(b, StageHeartbeat)):
            stage_metrics.observe_heartbeat(beat.stage, beat.instance, beat.at, beat.interval_s)  # StageSilent's
        if refused:
            DEAD_LETTERS.inc(len(refused))
            stage_metrics.DEAD_LETTERS.labels("sink").inc(len(refused))
            log.warning("archive sink: %d records the archive refuses for good set aside as dead letters (first: "
                        "%s)", len(refused), refused[0].reason[:300])
            rows += self.archive.write_deadletters(refused)
        return rows

    def _forget_reached(self, pending: dict[tuple[str, int], int]) -> None:
        """Drop the partitions whose consumed (or committed) position reached the target."""
        if not pending:
            return
        parts = [TopicPartition(t, p) for t, p in pending]
        positions = {(tp.topic, tp.partition): tp.offset for tp in self._consumer.position(parts)}
        unknown = [tp for tp in parts if positions.get((tp.topic, tp.partition), -1) < 0]
        if unknown:
            try:
                committed = self._consumer.committed(unknown, timeout=10)
            except KafkaException as exc:
                # Joining a group whose last member died waits out its session, and the
                # coordinator answers nothing else on that connection meanwhile: ask again later.
                log.debug("archive sink: committed offsets not known yet: %s", exc)
                committed = []
            for tp in committed:
                positions[(tp.topic, tp.partition)] = tp.offset
        for key, end in list(pending.items()):
            if positions.get(key, -1) >= end:
                del pending[key]
