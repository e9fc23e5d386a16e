"""Reading Kafka with confluent-kafka: partitions read to their end, or followed as they grow.

Every stage reads Kafka this way when it is not a member of a consumer group:
``faultline`` reading a replay's topics (:func:`read_topic`), the executor
runner following ``approvals`` and ``command-results``, the correlator reading
its snapshots and rebuilding a partition from the events log. A
:class:`TopicReader` assigns partitions (it never joins its group and never
commits), so ``group`` only names it to the broker (and to its ACLs).

The order of things in a read to the end (:meth:`TopicReader.batches`):

1. **Where it stops** is fixed when the read starts: each partition's high
   watermark then (:meth:`TopicReader.ends`), or an offset the caller names.
   Records written later are not waited for.
2. **Poll** a batch. Records go to the caller; every error goes to one place,
   :class:`ReadErrors`:

   * fatal (librdkafka says this client cannot go on, ``err.fatal()``):
     :class:`~confluent_kafka.KafkaException` at once;
   * anything else is transient (a broker away, a leader moving, a topic not
     there yet): logged once per episode (WARNING, then DEBUG until a record
     comes), and the reader backs off before it polls again
     (:class:`Backoff`, 0.2 s doubling to 5 s; a record resets it).
3. **Done** when every partition's *position* is at or past its end -- the
   position, not the last record's offset: a compacted or transactional log
   may end in offsets that hold no record.
4. **Bounded**: no progress (no record, no position moving) for ``stall_s``
   raises :class:`TimeoutError` naming the partitions still short. Every call
   to the broker (metadata, watermarks, committed offsets) is bounded by it
   too. A long log may take long; a stalled one does not.

Following (:meth:`TopicReader.follow`) is step 2 alone, and never sleeps for
its backoff: while it is backing off it returns at once, so a caller's own
loop (which waits on something else meanwhile) keeps its pace.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from common.kafka_logging import with_logger

__all__ = ["Backoff", "KafkaConsumerLike", "ReadErrors", "TopicReader", "read_topic"]

log = logging.getLogger("faultline.kafka")

_BATCH = 1000  # records per consume() call
_POLL_S = 0.5  # longest single wait for records while reading to the end


@dataclass(frozen=True)
class Backoff:
    """How long to wait after consecutive failures: ``first_s`` doubling up to ``max_s``.

    The one retry policy for talking to the broker (reads here, the executor's result publishing).
    """

    first_s: float = 0.2
    max_s: float = 5.0

    def after(self, failures: int) -> float:
        """The wait after ``failures`` (>= 1) failures in a row."""
        return min(self.first_s * 2.0 ** max(failures - 1, 0), self.max_s)


class KafkaConsumerLike(Protocol):
    """The part of :class:`confluent_kafka.Consumer` a reader uses (a fake in tests)."""

    def assign(self, partitions: list[TopicPartition]) -> None: ...
    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Message]: ...
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...
    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = ...,
                              cached: bool = ...) -> tuple[int, int] | None: ...
    def committed(self, partitions: list[TopicPartition], timeout: float = ...) -> list[TopicPartition]: ...
    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...
    def close(self) -> None: ...


class ReadErrors:
    """The one place a reader's Kafka errors go: fatal ones raise, transient ones are logged per episode.

    An episode is a run of errors with no record in between: its first error of each code is
    logged at WARNING (a person may need to act: a broker down, an ACL missing), the rest at DEBUG,
    so a broker away for minutes does not flood the log. ``quiet`` codes are logged at DEBUG only.
    """

    def __init__(self, what: str, quiet: frozenset[int] = frozenset()) -> None:
        self.what = what
        self.quiet = quiet
        self.failures = 0  # errors since the last record
        self._seen: set[int] = set()

    def handle(self, err: KafkaError) -> None:
        """Raise ``err`` when it is fatal; otherwise log it and count one failure."""
        if err.fatal():
            raise KafkaException(err)
        self.failures += 1
        code = err.code()
        first = code not in self._seen and code not in self.quiet
        self._seen.add(code)
        log.log(logging.WARNING if first else logging.DEBUG, "%s: %s (transient: retrying)", self.what, err)

    def recovered(self) -> None:
        """A record came: the episode is over."""
        self.failures = 0
        self._seen.clear()


class TopicReader:
    """Reads partitions of one topic by assignment: no group membership, no commits (see the module doc)."""

    def __init__(self, conf: Mapping[str, Any], topic: str, group: str, *, stall_s: float = 30.0,
                 backoff: Backoff = Backoff(), extra: Mapping[str, Any] | None = None,
                 consumer: KafkaConsumerLike | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.topic = topic
        self.stall_s = stall_s
        self.errors = ReadErrors(f"reading {topic}")
        self._backoff = backoff
        self._clock = clock
        self._sleep = sleep
        self._resume_at = 0.0  # no poll before this (clock) time: backing off
        self._consumer: KafkaConsumerLike = consumer if consumer is not None else Consumer(
            {**with_logger(conf), "group.id": group, "enable.auto.commit": False, "enable.partition.eof": False,
             **(extra or {})})
        self._assigned: list[int] = []
        self._closed = False

    # --- where things are (each one bounded by stall_s) -----------------------------------------

    def partitions(self) -> list[int]:
        """The topic's partitions; none when the topic does not exist."""
        meta = self._consumer.list_topics(self.topic, timeout=self.stall_s).topics.get(self.topic)
        if meta is None or meta.error is not None:
            return []
        return sorted(meta.partitions)

    def watermarks(self, partition: int) -> tuple[int, int]:
        """(low, high) of ``partition``: the first offset retained, and the next offset to be written."""
        got = self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=self.stall_s)
        if got is None:
            raise TimeoutError(f"{self.topic}[{partition}]: no watermarks from the broker in {self.stall_s:.0f}s")
        return int(got[0]), int(got[1])

    def ends(self, partitions: list[int] | None = None) -> dict[int, int]:
        """Partition -> high watermark now, for the partitions that hold records (all when None)."""
        ends = {}
        for p in self.partitions() if partitions is None else partitions:
            low, high = self.watermarks(p)
            if high > low:
                ends[p] = high
        return ends

    def committed(self, partition: int) -> int:
        """The group's committed offset on ``partition`` (negative: none), read without joining the group."""
        return self.committed_offsets([partition])[partition]

    def committed_offsets(self, partitions: list[int]) -> dict[int, int]:
        """Partition -> the group's committed offset (negative: none), in one request."""
        got = self._consumer.committed([TopicPartition(self.topic, p) for p in partitions], timeout=self.stall_s)
        return {tp.partition: int(tp.offset) for tp in got}

    # --- reading ---------------------------------------------------------------------------------

    def assign(self, starts: Mapping[int, int]) -> None:
        """Read ``partition`` from ``offset`` (an offset, or ``OFFSET_BEGINNING``) for each item."""
        self._assigned = sorted(starts)
        self._consumer.assign([TopicPartition(self.topic, p, o) for p, o in sorted(starts.items())])

    def batches(self, ends: Mapping[int, int]) -> Iterator[list[Message]]:
        """Every batch of records polled until each assigned partition of ``ends`` is at its end.

        A batch may hold records at or past a partition's end (callers that read a range skip
        them); it is never empty. Raises :class:`TimeoutError` after ``stall_s`` without progress.
        """
        short = dict(ends)
        positions = self._positions(short)
        progress_at = self._clock()
        while True:
            short = {p: end for p, end in short.items() if positions.get(p, -1) < end}
            if not short:
                return
            idle = self._clock() - progress_at
            if idle >= self.stall_s:
                raise TimeoutError(f"reading {self.topic}: partitions {sorted(short)} short of their end "
                                   f"(positions {[positions.get(p) for p in sorted(short)]}, ends "
                                   f"{[short[p] for p in sorted(short)]}): no progress for {self.stall_s:.0f}s")
            records = self._poll(min(_POLL_S, self.stall_s - idle), wait_out_backoff=True, at_most=_left(short, positions))
            moved = self._positions(short)
            if records or moved != positions:
                progress_at = self._clock()
            positions = moved
            if records:
                yield records

    def read_to(self, ends: Mapping[int, int], on_record: Callable[[Message], None]) -> int:
        """Hand every record up to ``ends`` (and any polled with them) to ``on_record``; how many."""
        handled = 0
        for batch in self.batches(ends):
            for msg in batch:
                on_record(msg)
            handled += len(batch)
        return handled

    def catch_up(self, on_record: Callable[[Message], None]) -> int:
        """Hand every record up to the assigned partitions' current end to ``on_record``; how many."""
        return self.read_to(self.ends(self._assigned), on_record)

    def follow(self, on_record: Callable[[Message], None], wait_s: float = 0.0) -> int:
        """Hand what has arrived (waiting up to ``wait_s``) to ``on_record``; how many records that was."""
        records = self._poll(wait_s, wait_out_backoff=False)
        for msg in records:
            on_record(msg)
        return len(records)

    def close(self) -> None:
        """Close the consumer; idempotent."""
        if not self._closed:
            self._closed = True
            self._consumer.close()

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- the one poll ----------------------------------------------------------------------------

    def _poll(self, wait_s: float, *, wait_out_backoff: bool, at_most: int = _BATCH) -> list[Message]:
        """One consume() of up to ``at_most`` records: the records; errors to :attr:`errors`; backs off after an
        error-only poll."""
        now = self._clock()
        if now < self._resume_at:
            if not wait_out_backoff:
                return []
            pause = min(self._resume_at - now, wait_s)
            self._sleep(pause)
            wait_s -= pause
            if self._clock() < self._resume_at:
                return []
        records, failed = [], False
        for msg in self._consumer.consume(num_messages=at_most, timeout=max(wait_s, 0.0)):
            err = msg.error()
            if err is None:
                records.append(msg)
            elif err.code() != KafkaError._PARTITION_EOF:
                self.errors.handle(err)
                failed = True
        if records:
            self.errors.recovered()
            self._resume_at = 0.0
        elif failed:
            self._resume_at = self._clock() + self._backoff.after(self.errors.failures)
        return records

    def _positions(self, partitions: Mapping[int, int]) -> dict[int, int]:
        """Partition -> the offset of the next record to read (negative: no position yet)."""
        if not partitions:
            return {}
        return {tp.partition: tp.offset
                for tp in self._consumer.position([TopicPartition(self.topic, p) for p in partitions])}


def _left(ends: Mapping[int, int], positions: Mapping[int, int]) -> int:
    """At most how many records remain before ``ends`` (1 to :data:`_BATCH`): what a read to the end asks one
    consume() for. consume() returns early only once it has all it asked for; asked for a whole batch on a
    topic holding fewer records, it waited out its full timeout (half a second per topic a replay read)."""
    left = sum(end - max(positions.get(p, 0), 0) for p, end in ends.items())
    return max(1, min(_BATCH, left))


def read_topic(conf: dict[str, Any], topic: str, timeout: float = 30.0) -> Iterator[bytes]:
    """Every record value now on ``topic``, from the beginning to the high watermark (in order per partition).

    A topic that does not exist holds nothing. ``timeout`` bounds each broker call and any stretch
    without progress (:class:`TimeoutError`).
    """
    with TopicReader(conf, topic, f"faultline-reader-{time.monotonic_ns()}", stall_s=timeout) as reader:
        ends = reader.ends()
        reader.assign({p: OFFSET_BEGINNING for p in ends})
        for batch in reader.batches(ends):
            for msg in batch:
                value = msg.value()
                if value is not None:
                    yield value
