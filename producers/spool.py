"""Delivery that survives broker outages and restarts: a disk spool in front of Kafka.

:class:`SpoolingPublisher` writes every record (an event, or a dead letter)
to the end of a local :class:`Spool` first, then hands records from the
spool's head to an idempotent confluent-kafka producer, at most
``max_inflight`` at a time, and moves the spool's committed cursor forward
only over records whose delivery report said "delivered". So:

- **broker unreachable**: the few records already handed wait inside the
  producer (it retries them, idempotently, for ``message_timeout_s``); every
  later record waits on disk, in order, and goes out when the broker is back;
- **a delivery fails** (its timeout ran out, the producer hit a fatal error):
  the record stays in the spool and is handed again, oldest first, after a
  back-off; nothing behind the cursor is lost;
- **the publisher process restarts**: the new one resends what the old one
  had not seen acknowledged;
- **the spool is full** (``max_bytes``): its oldest segment is evicted; the
  records lost that way are counted in ``dropped`` -- only then is anything
  dropped.

A record is handed to the producer again only after its delivery failed or
after a restart, never while it may still be delivered; and the producer is
idempotent, so a broker restart does not duplicate records. (The remaining
gap is the one every Kafka producer has: a record written by the broker
whose acknowledgement was lost *and* whose timeout ran out is sent twice.
Event ids are deterministic, so downstream can tell.)

The spool is a directory of JSON Lines segments (``000000000001.jsonl``...,
at most ``segment_bytes`` each, one record per line) and ``cursor.json``
(the first record not yet acknowledged).

With a :class:`~producers.batching.Batching`, the events of one :meth:`SpoolingPublisher.publish`
call go several to a record (runs of one source, :mod:`producers.batching`): what a node observed
together travels together, and nothing waits for more. The counters (``sent``, ``spooled``,
``dropped`` and their metrics) count events either way; :meth:`SpoolingPublisher.backlog` counts
records.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from confluent_kafka import KafkaError, Message, Producer

from producers import metrics
from producers.batching import Batcher, Batching
from producers.delivery import event_key
from producers.node.state import load_state, save_state
from streams.cells import DEFAULT_CELL
from streams.decisions import DeadLetter
from streams.events import Event
from streams.topics import topic_name

__all__ = ["ReconnectLogThrottle", "Spool", "SpoolEntry", "SpoolingPublisher"]

log = logging.getLogger("faultline.producer.spool")


class ReconnectLogThrottle(logging.Filter):
    """Lets one librdkafka connection failure a minute through per connection.

    While a broker is away librdkafka logs every reconnect attempt (several a
    second, at error level); the publisher already says once that Kafka is
    unreachable and again when it answers, so the rest only buries that line.
    """

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every_s = every_s
        self._clock = clock
        self._last: dict[tuple[str, str], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not (isinstance(args, tuple) and len(args) == 3 and args[0] == "FAIL"):
            return True  # not a connection failure (confluent-kafka logs "%s [%s] %s": facility, client, text)
        key = (str(args[1]), str(args[2]).split("]", 1)[0])  # the client and its broker thread
        now = self._clock()
        if now - self._last.get(key, -self.every_s) < self.every_s:
            return False
        self._last[key] = now
        return True


_KAFKA_LOG = logging.getLogger("faultline.producer.kafka")
_KAFKA_LOG.addFilter(ReconnectLogThrottle())

_SEGMENT_SUFFIX = ".jsonl"
_CURSOR = "cursor.json"
_DEAD_LETTER_SOURCE = "deadletter"
# Errors a record cannot recover from by being sent again.
_PERMANENT = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE, KafkaError.INVALID_MSG})


# --- the disk spool ------------------------------------------------------------------


@dataclass(frozen=True)
class SpoolEntry:
    """One record read from the spool: its segment, the offset just after it, its line."""

    segment: int
    end: int
    line: bytes


class Spool:
    """Append-only JSON Lines segments with a committed cursor and a size bound.

    ``append`` writes at the tail; ``read`` returns records after the read
    pointer (from the cursor on at start); ``commit`` says everything before
    a position is done (finished segments are deleted); ``evict_oldest`` drops
    the oldest segment when the spool is over ``max_bytes``.
    """

    def __init__(self, directory: Path, max_bytes: int = 256 << 20, segment_bytes: int = 4 << 20) -> None:
        if segment_bytes * 2 > max_bytes:
            raise ValueError("spool: segment_bytes must be at most half of max_bytes")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self._sizes = {self._number(p): p.stat().st_size for p in self.directory.glob(f"*{_SEGMENT_SUFFIX}")}
        saved = load_state(self.directory / _CURSOR) or {}
        head = min(self._sizes, default=1)
        segment, offset = int(saved.get("segment", head)), int(saved.get("offset", 0))
        self._cursor = (segment, offset) if segment in self._sizes else (head, 0)
        if not self._sizes:
            self._sizes[self._cursor[0]] = 0
            self._path(self._cursor[0]).touch()
        self._repair_tail()
        self._writer: BinaryIO = open(self._path(self.tail), "ab")
        self._read_at = self._cursor
        self._reader: BinaryIO | None = None
        self.unread = self._count_from(*self._cursor)

    @property
    def tail(self) -> int:
        return max(self._sizes)

    @property
    def head(self) -> int:
        return min(self._sizes)

    def _path(self, segment: int) -> Path:
        return self.directory / f"{segment:012d}{_SEGMENT_SUFFIX}"

    @staticmethod
    def _number(path: Path) -> int:
        return int(path.name[: -len(_SEGMENT_SUFFIX)])

    def _repair_tail(self) -> None:
        """Cut a partial last line (a crash in mid-write) off the tail segment."""
        path = self._path(self.tail)
        data = path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            log.warning("spool: dropping a partial record at the end of %s", path.name)
            with open(path, "r+b") as fh:
                fh.truncate(keep)
            self._sizes[self.tail] = keep

    def _count_from(self, segment: int, offset: int) -> int:
        count = 0
        for number in sorted(n for n in self._sizes if n >= segment):
            with open(self._path(number), "rb") as fh:
                fh.seek(offset if number == segment else 0)
                count += sum(1 for _ in fh)
        return count

    def size_bytes(self) -> int:
        """Bytes not yet committed."""
        return sum(self._sizes.values()) - self._cursor[1]

    def append(self, lines: list[bytes]) -> None:
        """Add records (each one line, ending in a newline) at the tail."""
        if self._sizes[self.tail] >= self.segment_bytes:
            self._rotate()
        self._writer.write(b"".join(lines))
        self._writer.flush()
        self._sizes[self.tail] = self._writer.tell()
        self.unread += len(lines)

    def _rotate(self) -> None:
        self._writer.close()
        number = self.tail + 1
        self._sizes[number] = 0
        self._writer = open(self._path(number), "ab")

    def read(self, max_records: int) -> list[SpoolEntry]:
        """Up to ``max_records`` records after the read pointer, which moves past them."""
        entries: list[SpoolEntry] = []
        while len(entries) < max_records and self.unread > 0:
            segment, offset = self._read_at
            if self._reader is None:
                self._reader = open(self._path(segment), "rb")
                self._reader.seek(offset)
            line = self._reader.readline()
            if line:
                offset += len(line)
                entries.append(SpoolEntry(segment, offset, line))
                self._read_at = (segment, offset)
                self.unread -= 1
            elif segment < self.tail:
                self._reader.close()
                self._reader = None
                self._read_at = (min(n for n in self._sizes if n > segment), 0)
            else:
                break
        return entries

    def commit(self, segment: int, offset: int) -> None:
        """Every record before ``(segment, offset)`` is done; delete the segments it finished."""
        if (segment, offset) <= self._cursor or segment not in self._sizes:
            return
        self._cursor = (segment, offset)
        for number in [n for n in self._sizes if n < segment]:
            self._delete(number)
        save_state(self.directory / _CURSOR, {"segment": segment, "offset": offset})

    def evict_oldest(self) -> tuple[int, list[bytes]] | None:
        """Drop the oldest segment if the spool is over its bound: ``(segment, its unread lines)``."""
        if self.size_bytes() <= self.max_bytes:
            return None
        if len(self._sizes) == 1:
            self._rotate()
        oldest = self.head
        unread = self._unread_lines(oldest)
        self.unread -= len(unread)
        if self._read_at[0] == oldest:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            self._read_at = (oldest + 1, 0)
        self._delete(oldest)
        self._cursor = max(self._cursor, (self.head, 0))
        save_state(self.directory / _CURSOR, {"segment": self._cursor[0], "offset": self._cursor[1]})
        return oldest, unread

    def _unread_lines(self, segment: int) -> list[bytes]:
        if self._read_at[0] > segment:
            return []
        with open(self._path(segment), "rb") as fh:
            fh.seek(self._read_at[1] if self._read_at[0] == segment else 0)
            return fh.readlines()

    def _delete(self, segment: int) -> None:
        self._path(segment).unlink(missing_ok=True)
        del self._sizes[segment]

    def close(self) -> None:
        self._writer.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None


# --- the publisher -------------------------------------------------------------------


@dataclass(eq=False)
class _Handed:
    """A record handed to the producer, until its delivery is known."""

    entry: SpoolEntry
    topic: str
    key: bytes
    value: bytes
    source: str
    events: int = 1
    state: str = "inflight"  # inflight | acked | failed
    evicted: bool = False


def _record_line(topic: str, key: bytes, value: bytes, source: str, events: int = 1) -> bytes:
    record: dict[str, Any] = {"topic": topic, "key": key.decode(), "source": source, "value": value.decode()}
    if events != 1:
        record["events"] = events  # a batch record (lines without it, older ones too, hold one)
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def _source_of(line: bytes) -> tuple[str, int]:
    """The source of a spooled record and how many events it holds."""
    try:
        record = json.loads(line)
        return str(record["source"]), int(record.get("events", 1))
    except (ValueError, KeyError, TypeError, AttributeError):
        return "unknown", 1


class SpoolingPublisher:
    """Publishes events and dead letters through a :class:`Spool` (see the module docstring).

    Call :meth:`pump` regularly (the agent does, about twice a second): it
    collects delivery reports, hands waiting records to the producer and
    retries failed ones. ``clock`` (monotonic seconds) paces the retries.
    """

    def __init__(
        self,
        kafka_conf: dict[str, Any],
        namespace: str,
        spool_dir: Path,
        max_bytes: int = 256 << 20,
        segment_bytes: int = 4 << 20,
        max_inflight: int = 1000,
        message_timeout_s: float = 300.0,
        retry_backoff_s: tuple[float, float] = (1.0, 30.0),
        clock: Callable[[], float] = time.monotonic,
        cell: str = DEFAULT_CELL,
        batching: Batching | None = None,
    ) -> None:
        self._conf = {
            **kafka_conf,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "message.max.bytes": 1_048_576,
            "message.timeout.ms": int(message_timeout_s * 1000),
            "reconnect.backoff.max.ms": 2000,
            "error_cb": self._on_error,
            "logger": _KAFKA_LOG,
        }
        self._producer = Producer(self._conf)
        self._events_topic = topic_name(namespace, "events")
        self._dead_topic = topic_name(namespace, "deadletters")
        self._event_key = event_key(cell)
        self._batching = batching
        self.spool = Spool(spool_dir, max_bytes, segment_bytes)
        self.max_inflight = max_inflight
        self._backoff_min, self._backoff_max = retry_backoff_s
        self._backoff = self._backoff_min
        self._retry_at = 0.0
        self._clock = clock
        self._window: deque[_Handed] = deque()  # in spool order
        self._retry: list[_Handed] = []
        self._inflight = 0
        self._fatal = False
        self._broker_down = False
        self.sent = self.spooled = self.dropped = 0

    # --- input ---------------------------------------------------------------------

    def publish(self, events: Iterable[Event]) -> None:
        """Spool ``events`` (keyed by the publisher's cell; batched: this call's, several to a record)
        and hand what the window allows."""
        if self._batching is None:
            lines = [_record_line(self._events_topic, self._event_key, e.model_dump_json().encode(), e.source)
                     for e in events]
        else:
            batcher = Batcher(self._batching)
            packed = [p for e in events for p in batcher.add(e)] + batcher.flush()
            lines = [_record_line(self._events_topic, self._event_key, p.value, p.source, p.events) for p in packed]
        self._append(lines)

    def dead_letter(self, dl: DeadLetter) -> None:
        """Spool a dead letter (keyed by stage) like an event."""
        self._append([_record_line(self._dead_topic, dl.stage.encode(), dl.model_dump_json().encode(),
                                   _DEAD_LETTER_SOURCE)])

    def _append(self, lines: list[bytes]) -> None:
        if not lines:
            return
        self.spool.append(lines)
        self._evict_past_bound()
        self.pump()
        waiting = min(len(lines), self.spool.unread)  # the newest records wait behind older ones
        for line in lines[len(lines) - waiting :]:
            source, events = _source_of(line)
            metrics.SPOOLED.labels(source).inc(events)
            self.spooled += events

    # --- delivery ------------------------------------------------------------------

    def pump(self) -> None:
        """Collect delivery reports, then hand retries (after the back-off) and new records."""
        self._producer.poll(0)
        if self._fatal:
            self._replace_producer()
        if self._retry and self._clock() >= self._retry_at:
            self._resend()
        if not self._retry:
            self._hand_new()
        self._commit()
        metrics.SPOOL_BACKLOG.set(self.spool.size_bytes())

    def _hand_new(self) -> None:
        room = self.max_inflight - self._inflight
        for entry in self.spool.read(room) if room > 0 else []:
            try:
                record = json.loads(entry.line)
                handed = _Handed(entry, record["topic"], record["key"].encode(), record["value"].encode(),
                                 record["source"], int(record.get("events", 1)))
            except (ValueError, KeyError, TypeError, AttributeError):
                log.error("spool: dropping an unreadable record in segment %d", entry.segment)
                self._drop("unknown")
                continue
            self._window.append(handed)
            if not self._produce(handed):
                break

    def _resend(self) -> None:
        self._retry.sort(key=lambda h: (h.entry.segment, h.entry.end))
        while self._retry and self._inflight < self.max_inflight:
            handed = self._retry.pop(0)
            handed.state = "inflight"
            if not self._produce(handed):
                break

    def _produce(self, handed: _Handed) -> bool:
        """Hand one record to the producer; False (record queued for retry) if its queue is full."""
        def report(err: KafkaError | None, msg: Message) -> None:
            self._on_delivery(handed, err, msg)

        try:
            self._producer.produce(handed.topic, value=handed.value, key=handed.key, on_delivery=report)
        except BufferError:
            handed.state = "failed"
            self._retry.append(handed)
            return False
        self._inflight += 1
        return True

    def _on_delivery(self, handed: _Handed, err: KafkaError | None, _msg: Message) -> None:
        self._inflight -= 1
        if err is None:
            handed.state = "acked"
            self.sent += handed.events
            metrics.SENT.labels(handed.source).inc(handed.events)
            self._backoff = self._backoff_min
            if self._broker_down:
                log.info("Kafka answers again; sending the spool")
                self._broker_down = False
        elif handed.evicted or err.code() in _PERMANENT:
            if not handed.evicted:
                log.error("Kafka rejected a %s record for good: %s", handed.source, err)
            handed.state = "acked"  # done with it: let the cursor pass
            self._drop(handed.source, handed.events)
        else:
            handed.state = "failed"
            self._retry.append(handed)
            self._retry_at = self._clock() + self._backoff
            self._backoff = min(self._backoff * 2, self._backoff_max)
            self._fatal = self._fatal or err.fatal()

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            log.error("Kafka producer fatal error: %s; starting a new producer", err)
            self._fatal = True
        elif err.code() == KafkaError._ALL_BROKERS_DOWN and not self._broker_down:
            log.warning("Kafka unreachable (%s); spooling to %s", err, self.spool.directory)
            self._broker_down = True

    def _replace_producer(self) -> None:
        """After a fatal error the producer is dead: fail what it holds and start a fresh one."""
        self._producer.purge()
        self._producer.poll(0)
        self._producer = Producer(self._conf)
        self._fatal = False

    def _commit(self) -> None:
        """Move the spool's cursor over the acknowledged head of the window."""
        last: _Handed | None = None
        while self._window and self._window[0].state == "acked":
            last = self._window.popleft()
        if last is not None and not last.evicted:
            self.spool.commit(last.entry.segment, last.entry.end)

    # --- bound ---------------------------------------------------------------------

    def _evict_past_bound(self) -> None:
        while (evicted := self.spool.evict_oldest()) is not None:
            segment, unread = evicted
            for line in unread:
                self._drop(*_source_of(line))
            for handed in self._window:
                if handed.entry.segment == segment:
                    handed.evicted = True
            for handed in [h for h in self._retry if h.evicted]:
                self._retry.remove(handed)
                handed.state = "acked"
                self._drop(handed.source, handed.events)
            log.warning("spool over %d bytes: dropped segment %d (%d records never sent)",
                        self.spool.max_bytes, segment, len(unread))

    def _drop(self, source: str, events: int = 1) -> None:
        self.dropped += events
        metrics.DROPPED.labels(source).inc(events)

    # --- end -----------------------------------------------------------------------

    def backlog(self) -> int:
        """Records not yet acknowledged (waiting on disk, in flight or awaiting a retry)."""
        return self.spool.unread + len([h for h in self._window if h.state != "acked"])

    def flush(self, timeout_s: float) -> bool:
        """Pump until nothing is waiting or ``timeout_s`` passed; True if everything was delivered."""
        deadline = self._clock() + timeout_s
        while self.backlog() and self._clock() < deadline:
            self.pump()
            self._producer.poll(min(0.2, max(deadline - self._clock(), 0)))
        self.pump()
        return self.backlog() == 0

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what can be within ``timeout_s`` (a second when the broker is known to be away);
        the rest stays spooled for the next start."""
        self.flush(min(timeout_s, 1.0) if self._broker_down else timeout_s)
        self._producer.purge()
        self._producer.poll(0)
        self._commit()
        self.spool.close()
