"""After a crash: which spooled records did the previous process deliver without recording it?

A publisher killed between the broker's acknowledgement of a record and the save of its
spool cursor leaves that record after the cursor, though it is in Kafka. Sent again, it would
be a second copy (same id: consumers drop it, but "each record once on the topic" would no
longer hold). So a restarted publisher first reads its topics back from the time its
predecessor began handing over the records after the cursor (the spool keeps that time,
:attr:`producers.spool.disk.Spool.handed_since`), and remembers every record it finds there
under one of its own keys (events are keyed by cell, dead letters by stage). Every copy a
previous process produced carries a Kafka timestamp no earlier than that time (its produce
time), and "the earliest offset whose timestamp is at or after T" is at or before every such
copy whatever other producers' clocks say, so the scan misses none.

The scan runs on a thread of its own, so the agent keeps spooling meanwhile, and the publisher
hands nothing over until it is done. It retries while the broker is away. It gives up -- and the
records are sent again, repeats that consumers drop by id -- when the agent may not read its
topics (no READ grant) or when more than ``max_records`` records were written since that time
(an agent that crashed in the middle of a long outage of its own network: scanning hours of a
busy partition would cost more than the repeats).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

__all__ = ["READBACK_SLACK_MS", "ReadBack", "record_digest"]

log = logging.getLogger("faultline.producer.spool")

#: Read from this much before the recorded time: a wall clock stepped back by NTP meanwhile.
READBACK_SLACK_MS = 30_000
_STALL_S = 30.0
# The caller's settings a consumer shares (where the broker is, how to log in), not its producer's.
_CONNECTION_SETTINGS = ("bootstrap.", "client.", "security.", "sasl.", "ssl.", "socket.")


def record_digest(topic: str, key: bytes, value: bytes) -> bytes:
    """The identity of one record: its topic, key and value, exactly."""
    h = hashlib.blake2b(digest_size=16)
    for part in (topic.encode(), key, value):
        h.update(len(part).to_bytes(4, "big"))
        h.update(part)
    return h.digest()


class _GiveUp(Exception):
    pass


class ReadBack:
    """Scans the topics of ``keys`` from ``since_ms`` to their ends now, on a thread; :attr:`found` (the
    digests of the records under those keys) when :attr:`done`."""

    def __init__(self, conf: dict[str, Any], keys: Mapping[str, frozenset[bytes] | None], since_ms: int,
                 max_records: int = 500_000, retry_s: tuple[float, float] = (1.0, 30.0)) -> None:
        self._conf = {k: v for k, v in conf.items() if k.startswith(_CONNECTION_SETTINGS)}
        self.topics = sorted(keys)
        self.keys = dict(keys)  # topic -> the keys this publisher writes there (None: any)
        self.since_ms = since_ms
        self.max_records = max_records
        self._retry = retry_s
        self.found: set[bytes] = set()
        self.scanned = 0
        self.outcome = "not started"
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spool-readback", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        delay = self._retry[0]
        while not self._stop.is_set():
            try:
                self._scan()
                self.outcome = f"found {len(self.found)} of its records among {self.scanned} read back"
                break
            except _GiveUp as why:
                self.found.clear()
                self.outcome = f"gave up ({why}): records after the cursor are sent again, consumers drop repeats"
                log.warning("spool: read-back %s", self.outcome)
                break
            except (KafkaException, TimeoutError) as exc:
                log.warning("spool: cannot read back what was delivered before the restart yet (%s); "
                            "retrying in %.0fs, spooling meanwhile", exc, delay)
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self._retry[1])
        self.done.set()

    def _scan(self) -> None:
        consumer = Consumer({**self._conf, "group.id": f"faultline-spool-readback-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "enable.partition.eof": False})
        try:
            ranges = self._ranges(consumer)
            total = sum(end - start for start, end in ranges.values())
            if total > self.max_records:
                raise _GiveUp(f"{total} records were written since then, more than {self.max_records}")
            if not ranges:
                return
            consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in ranges.items()])
            pending = {tp: end for tp, (_, end) in ranges.items()}
            last_progress = time.monotonic()
            while pending and not self._stop.is_set():
                msgs = consumer.consume(num_messages=1000, timeout=0.5)
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                            raise _GiveUp("not allowed to read the topics back")
                        if err.fatal():
                            raise KafkaException(err)
                        continue
                    self.scanned += 1
                    topic, partition, offset = str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0)
                    key = msg.key() or b""
                    mine = self.keys.get(topic)
                    if mine is None or key in mine:
                        self.found.add(record_digest(topic, key, msg.value() or b""))
                    if offset + 1 >= pending.get((topic, partition), 0):
                        pending.pop((topic, partition), None)
                if msgs:
                    last_progress = time.monotonic()
                elif time.monotonic() - last_progress > _STALL_S:
                    raise TimeoutError(f"no progress reading back {sorted(pending)} for {_STALL_S:.0f}s")
        finally:
            consumer.close()

    def _ranges(self, consumer: Consumer) -> dict[tuple[str, int], tuple[int, int]]:
        """``{(topic, partition): (first offset at or after since, end now)}`` for partitions with records there."""
        meta = consumer.list_topics(timeout=10).topics
        parts = []
        for topic in self.topics:
            tm = meta.get(topic)
            if tm is None:  # a broker lists only the topics a user may see
                raise _GiveUp(f"cannot see {topic} (not allowed to read it, or it does not exist)")
            if tm.error is not None:
                if tm.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise _GiveUp("not allowed to read the topics back")
                raise KafkaException(tm.error)
            parts += [TopicPartition(topic, p, max(0, self.since_ms - READBACK_SLACK_MS)) for p in tm.partitions]
        if not parts:
            return {}
        ranges: dict[tuple[str, int], tuple[int, int]] = {}
        for tp in consumer.offsets_for_times(parts, timeout=10):
            if tp.error is not None:
                raise KafkaException(tp.error)
            if tp.offset < 0:
                continue  # nothing at or after that time
            _, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
            if high > tp.offset:
                ranges[(tp.topic, tp.partition)] = (tp.offset, high)
        return ranges
