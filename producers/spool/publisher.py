"""The spooling publisher: records go to the disk spool first, then from its head to Kafka.

:class:`SpoolingPublisher` writes every record (an event, or a dead letter) to the end of a
:class:`~producers.spool.disk.Spool` -- on disk when :meth:`~SpoolingPublisher.publish`
returns -- then hands records from the spool's head to an idempotent confluent-kafka producer
(``acks=all``), at most ``max_inflight`` at a time, and moves the spool's committed cursor
forward only over records whose delivery report said "delivered". So:

- **broker unreachable**: the few records already handed wait inside the producer (it retries
  them, idempotently, for ``message_timeout_s``); every later record waits on disk, in order,
  and goes out when the broker is back;
- **a delivery fails** (its timeout ran out, the producer hit a fatal error): the record stays
  in the spool and is handed again, oldest first, after a back-off; nothing behind the cursor
  is lost;
- **the publisher process dies** (kill -9, a power cut): the next one finds every record it was
  given on disk (:mod:`producers.spool.disk`), first reads back which of the records after the
  cursor its predecessor had delivered without recording it (:mod:`producers.spool.readback`),
  and sends only the others;
- **the spool is full** (``max_bytes``), **or its disk is** (``ENOSPC``): its oldest segment is
  evicted (:mod:`producers.spool.disk`); only when nothing older is left are new records
  refused. Every event lost is counted in ``dropped`` and by source, kind and reason
  (:mod:`producers.spool.losses`), and once a delivery succeeds again one dead letter of stage
  ``spool`` says what was lost. Appends succeed again as soon as there is room: no step by anyone.

A record is handed to the producer again only after its delivery failed, never while it may
still be delivered; and the producer is idempotent, so a broker restart or a leader change does
not duplicate records. (The remaining gap is the one every Kafka producer has: a record written
by the broker whose acknowledgement was lost *and* whose timeout ran out is sent twice. Event
ids are deterministic, so downstream can tell.)

With a :class:`~producers.batching.Batching`, the events of one :meth:`SpoolingPublisher.publish`
call go several to a record (runs of one source, :mod:`producers.batching`): what a node observed
together travels together, and nothing waits for more. The counters (``sent``, ``spooled``,
``dropped``, ``already_delivered`` and their metrics) count events either way;
:meth:`SpoolingPublisher.backlog` counts records. A batch record is spooled, read back after a
crash (:mod:`producers.spool.readback` compares whole record values) and dropped as one.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from producers import metrics
from producers.batching import Batcher, Batching
from producers.delivery import event_key
from producers.spool.disk import Spool, SpoolEntry
from producers.spool.kafka_log import KAFKA_LOG
from producers.spool.losses import Losses, LossReason
from producers.spool.readback import ReadBack, record_digest
from producers.spool.records import parse_line, record_line
from streams.cells import DEFAULT_CELL
from streams.decisions import DeadLetter
from streams.events import Event
from streams.topics import topic_name

__all__ = ["SpoolingPublisher"]

log = logging.getLogger("faultline.producer.spool")

_DEAD_LETTER_SOURCE = "deadletter"
# Errors a record cannot recover from by being sent again.
_PERMANENT = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE, KafkaError.INVALID_MSG})


@dataclass(eq=False)
class _Handed:
    """A record handed to the producer, until its delivery is known."""

    entry: SpoolEntry
    topic: str
    key: bytes
    value: bytes
    source: str
    events: int = 1  # events in the record (a batch record holds several)
    first_handed_ms: int = 0
    state: str = "inflight"  # inflight | acked | failed
    evicted: LossReason | None = None  # why its segment was evicted (None: it was not)


def _wall_ms() -> int:
    return int(time.time() * 1000)


class SpoolingPublisher:
    """Publishes events and dead letters through a :class:`Spool` (see the module docstring).

    Call :meth:`pump` regularly (the agent does, about twice a second): it collects delivery
    reports, hands waiting records to the producer and retries failed ones. ``clock``
    (monotonic seconds) paces the retries. ``readback_max_records`` bounds the read-back after
    a crash (:class:`~producers.spool.readback.ReadBack`).
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
        readback_max_records: int = 500_000,
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
            "logger": KAFKA_LOG,
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
        self.sent = self.spooled = self.dropped = self.already_delivered = 0
        self.losses = Losses()
        self._report_due = False
        self._full_logged_at = -60.0
        # Until the cursor passes the records spooled before this start, a copy of one of them from an
        # earlier process may be in Kafka from as early as the recorded time: the cursor keeps saying so.
        self._floor: tuple[int, tuple[int, int]] | None = None
        if self.spool.handed_since is not None:
            self._floor = (self.spool.handed_since, (self.spool.tail, self.spool.size_of(self.spool.tail)))
        self.readback = self._start_readback(kafka_conf, readback_max_records)

    def _start_readback(self, kafka_conf: dict[str, Any], max_records: int) -> ReadBack | None:
        """The read-back of what a previous process delivered, when records after the cursor may be in Kafka."""
        if self.spool.unread == 0 or (self.spool.handed_since_known and self.spool.handed_since is None):
            return None  # nothing spooled, or nothing of it handed on yet: nothing can be in Kafka twice
        if not self.spool.handed_since_known:
            log.warning("spool: %d records after the cursor and no record of when they were first handed on "
                        "(a spool from an earlier version): sending them all; consumers drop repeated ids",
                        self.spool.unread)
            return None
        assert self.spool.handed_since is not None
        readback = ReadBack(kafka_conf, {self._events_topic: frozenset({self._event_key}), self._dead_topic: None},
                            self.spool.handed_since, max_records)
        readback.start()
        log.info("spool: %d records after the cursor; reading back what was delivered since %s before "
                 "sending them", self.spool.unread, time.strftime("%H:%M:%S", time.gmtime(readback.since_ms / 1000)))
        return readback

    # --- input ---------------------------------------------------------------------

    def publish(self, events: Iterable[Event]) -> None:
        """Spool ``events`` (keyed by the publisher's cell; batched: this call's, several to a record);
        on disk when this returns."""
        if self._batching is None:
            lines = [record_line(self._events_topic, self._event_key, e.model_dump_json().encode(), e.source)
                     for e in events]
        else:
            batcher = Batcher(self._batching)
            packed = [p for e in events for p in batcher.add(e)] + batcher.flush()
            lines = [record_line(self._events_topic, self._event_key, p.value, p.source, p.events) for p in packed]
        self._append(lines)

    def dead_letter(self, dl: DeadLetter) -> None:
        """Spool a dead letter (keyed by stage) like an event."""
        self._append([record_line(self._dead_topic, dl.stage.encode(), dl.model_dump_json().encode(),
                                   _DEAD_LETTER_SOURCE)])

    def _append(self, lines: list[bytes]) -> None:
        if not lines:
            return
        done = self.spool.append(lines)
        if done.evicted or not done.stored:
            metrics.SPOOL_DISK_FULL.inc()
            if self._clock() - self._full_logged_at >= 60:
                self._full_logged_at = self._clock()
                log.error("spool: the disk of %s is full: evicting the oldest records (counted as dropped)",
                          self.spool.directory)
        for segment, unread in done.evicted:
            self._evicted(segment, unread, "disk_full")
        if not done.stored:
            for line in lines:
                self._drop_line(line, "refused")
        self._evict_past_bound()
        self.pump()
        waiting = min(len(lines), self.spool.unread) if done.stored else 0  # the newest wait behind older ones
        for line in lines[len(lines) - waiting :]:
            source, events = parse_line(line)[::2]
            metrics.SPOOLED.labels(source).inc(events)
            self.spooled += events

    # --- delivery ------------------------------------------------------------------

    def pump(self) -> None:
        """Collect delivery reports, then hand retries (after the back-off) and new records."""
        self._producer.poll(0)
        if self._report_due:
            self._report_due = False
            if (report := self.losses.report()) is not None:
                self.dead_letter(report)
        if self._fatal:
            self._replace_producer()
        if self._retry and self._clock() >= self._retry_at:
            self._resend()
        if not self._retry and (self.readback is None or self.readback.done.is_set()):
            self._hand_new()
        self._commit()
        metrics.SPOOL_BACKLOG.set(self.spool.size_bytes())

    def _hand_new(self) -> None:
        room = self.max_inflight - self._inflight
        for entry in self.spool.read(room) if room > 0 else []:
            try:
                if not entry.ok:
                    raise ValueError("checksum")
                record = json.loads(entry.line)
                handed = _Handed(entry, record["topic"], record["key"].encode(), record["value"].encode(),
                                 record["source"], int(record.get("events", 1)))
            except (ValueError, KeyError, TypeError, AttributeError):
                log.error("spool: dropping an unreadable record in segment %d", entry.segment)
                self._window.append(_Handed(entry, "", b"", b"", "unknown", state="acked"))
                self._drop("unknown", b"", 1, "unreadable")
                continue
            self._window.append(handed)
            if self._delivered_before(handed):
                continue
            handed.first_handed_ms = _wall_ms()
            self.spool.mark_handed(handed.first_handed_ms)
            if not self._produce(handed):
                break

    def _delivered_before(self, handed: _Handed) -> bool:
        """Whether the read-back found this record in Kafka already (a predecessor delivered it)."""
        if self.readback is None or not self.readback.found:
            return False
        if record_digest(handed.topic, handed.key, handed.value) not in self.readback.found:
            return False
        handed.state = "acked"
        self.already_delivered += handed.events
        metrics.ALREADY_DELIVERED.labels(handed.source).inc(handed.events)
        return True

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
            self._report_due = self._report_due or bool(self.losses.pending)
            if self._broker_down:
                log.info("Kafka answers again; sending the spool")
                self._broker_down = False
        elif handed.evicted or err.code() in _PERMANENT:
            if not handed.evicted:
                log.error("Kafka rejected a %s record for good: %s", handed.source, err)
            handed.state = "acked"  # done with it: let the cursor pass
            self._drop(handed.source, handed.value, handed.events, handed.evicted or "rejected")
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
        """Move the spool's cursor over the acknowledged head of the window (saved now and then)."""
        last: _Handed | None = None
        while self._window and self._window[0].state == "acked":
            last = self._window.popleft()
        if last is not None and not last.evicted:
            self.spool.commit(last.entry.segment, last.entry.end, self._handed_since())
        self.spool.save()

    def _handed_since(self) -> int | None:
        """When the oldest copy in Kafka of a record after the cursor may have been produced (None: none can be)."""
        since = min((h.first_handed_ms for h in self._window if h.first_handed_ms), default=None)
        if self._floor is not None:
            if self.spool.cursor < self._floor[1]:
                return self._floor[0] if since is None else min(since, self._floor[0])
            self._floor = None
            if self.readback is not None:
                self.readback.found.clear()  # every record it could match is behind the cursor now
        return since

    # --- bound ---------------------------------------------------------------------

    def _evict_past_bound(self) -> None:
        while (evicted := self.spool.evict_oldest()) is not None:
            self._evicted(*evicted, "over_bound")

    def _evicted(self, segment: int, unread: list[bytes], reason: LossReason) -> None:
        """Account for an evicted segment: its unread records, and those of it handed on or awaiting a retry."""
        for line in unread:
            self._drop_line(line, reason)
        for handed in self._window:
            if handed.entry.segment == segment:
                handed.evicted = reason
        for handed in [h for h in self._retry if h.evicted]:
            self._retry.remove(handed)
            handed.state = "acked"
            self._drop(handed.source, handed.value, handed.events, reason)
        log.warning("spool %s: dropped segment %d (%d records never sent)",
                    "disk full" if reason == "disk_full" else f"over {self.spool.max_bytes} bytes", segment, len(unread))

    def _drop_line(self, line: bytes, reason: LossReason) -> None:
        self._drop(*parse_line(line), reason)

    def _drop(self, source: str, value: bytes, events: int, reason: LossReason) -> None:
        self.dropped += events
        metrics.DROPPED.labels(source).inc(events)
        self.losses.add(source, value, events, reason)

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
        if self.readback is not None:
            self.readback.close()
        self.spool.close()
