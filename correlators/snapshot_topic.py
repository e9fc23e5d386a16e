"""Where correlator snapshots live: the compacted topic ``<app id>-snapshots``, one record per partition.

The I/O edge of :mod:`correlators.snapshots` (which says what a snapshot is).
The topic has as many partitions as the events topic; the snapshot of events
partition ``p`` goes to partition ``p`` under the key ``p``, so compaction keeps
the newest and a takeover reads one record: the last of its partition. It is
created by the worker like the ``emitted`` changelog (the correlator's
principal has CREATE/ALTER/READ/WRITE on it, :mod:`deploy.acls`), with
``max.message.bytes`` raised to :data:`~correlators.snapshots.MAX_SNAPSHOT_BYTES`.
Records are written by a confluent-kafka producer allowed that size (Faust's
producer is capped at 1 MB), uncompressed on the wire: the body is zlib already.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from common.kafka_admin import ensure_topic, grow_topic
from common.kafka_reader import TopicReader
from correlators.snapshots import MAX_SNAPSHOT_BYTES

__all__ = ["SnapshotWriter", "ensure_snapshot_topic", "events_log_range", "read_latest_snapshot",
           "snapshot_topic_name"]

log = logging.getLogger("faultline.correlator")

_OVERHEAD = 64 * 1024  # record and batch headers around a value of the largest size


def snapshot_topic_name(app_id: str) -> str:
    return f"{app_id}-snapshots"


def ensure_snapshot_topic(conf: dict[str, Any], name: str, partitions: int) -> None:
    """Create the compacted snapshot topic (or grow it to ``partitions``)."""
    ensure_topic(conf, name, partitions, {"cleanup.policy": "compact",
                                          "max.message.bytes": str(MAX_SNAPSHOT_BYTES + _OVERHEAD)})
    grow_topic(conf, name, partitions)


class SnapshotWriter:
    """Produces sealed snapshots; :meth:`send` blocks until the broker has the record (call it off the loop)."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        self.topic = topic
        self._producer = Producer({**conf, "acks": "all", "enable.idempotence": True,
                                   "message.max.bytes": MAX_SNAPSHOT_BYTES + _OVERHEAD,
                                   "compression.type": "none", "linger.ms": 0})
        self._lock = threading.Lock()

    def send(self, partition: int, blob: bytes, timeout: float = 60.0) -> None:
        """Write ``blob`` as partition ``partition``'s newest snapshot; raises if the broker refused it."""
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        with self._lock:
            self._producer.produce(self.topic, key=str(partition).encode(), value=blob, partition=partition,
                                   on_delivery=delivered)
            left = self._producer.flush(timeout)
        if errors or left:
            raise RuntimeError(f"snapshot of partition {partition} not written to {self.topic}: "
                               f"{errors[0] if errors else 'no acknowledgement in time'}")


def _reader(conf: dict[str, Any], topic: str, group: str, timeout: float) -> TopicReader:
    # The correlator's own group id (granted READ); nothing is committed, partitions are assigned.
    return TopicReader(conf, topic, group, stall_s=timeout, extra={"fetch.message.max.bytes": MAX_SNAPSHOT_BYTES + _OVERHEAD})


def read_latest_snapshot(conf: dict[str, Any], topic: str, partition: int, group: str,
                         timeout: float = 30.0) -> bytes | None:
    """The last record of ``topic[partition]`` (the newest snapshot); None when there is none.

    Only the last offset is read: the writer appends only this partition's snapshots there, and
    compaction never removes a partition's last record. ``timeout`` bounds each call to the broker
    and the read (:mod:`common.kafka_reader`).
    """
    with _reader(conf, topic, group, timeout) as reader:
        low, high = reader.watermarks(partition)
        if high <= low:
            return None
        reader.assign({partition: high - 1})
        for batch in reader.batches({partition: high}):
            value = batch[0].value()
            return value if value else None  # a tombstone: no snapshot
        raise RuntimeError(f"reading {topic}[{partition}]: no record at offset {high - 1}, its last")


def events_log_range(conf: dict[str, Any], topic: str, partition: int, group: str,
                     timeout: float = 30.0) -> tuple[int, int]:
    """``topic[partition]``'s watermarks: the first offset still retained, and the next one to be written."""
    with _reader(conf, topic, group, timeout) as reader:
        return reader.watermarks(partition)
