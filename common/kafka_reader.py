"""Reading Kafka topics to their end with confluent-kafka."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from common.kafka_logging import with_logger

__all__ = ["read_topic"]


def read_topic(conf: dict[str, Any], topic: str, timeout: float = 30.0) -> Iterator[bytes]:
    """Every record now on ``topic``, from the beginning to the high watermark, in partition order."""
    c = Consumer({**with_logger(conf), "group.id": f"faultline-reader-{time.monotonic_ns()}", "enable.auto.commit": False})
    try:
        meta = c.list_topics(topic, timeout=timeout).topics[topic]
        ends = {}
        for p in meta.partitions:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if hi > lo:
                ends[p] = hi
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            value, offset = m.value(), m.offset() or 0
            if value is not None:
                yield value
            if offset + 1 >= ends.get(m.partition(), 0):
                ends.pop(m.partition(), None)
        if ends:
            raise TimeoutError(f"reading {topic}: partitions {sorted(ends)} not read to the end in {timeout}s")
    finally:
        c.close()
