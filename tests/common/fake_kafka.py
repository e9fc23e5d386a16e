"""A fake confluent-kafka consumer for tests of what reads Kafka (:mod:`common.kafka_reader` and its users)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, KafkaError, TopicPartition

__all__ = ["TOPIC", "FakeConsumer", "FakeMessage", "error"]

TOPIC = "t"


class FakeMessage:
    def __init__(self, partition: int, offset: int, value: bytes | None = b"v",
                 error: KafkaError | None = None, key: bytes | None = None) -> None:
        self._partition, self._offset, self._value, self._error, self._key = partition, offset, value, error, key

    def error(self) -> KafkaError | None:
        return self._error

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def topic(self) -> str:
        return TOPIC


def error(code: int, *, fatal: bool = False) -> FakeMessage:
    return FakeMessage(-1, -1, None, KafkaError(code, "scripted", fatal=fatal))


class FakeConsumer:
    """``logs``: partition -> {offset: value, or (key, value)}; ``highs``: partition -> high watermark
    (default: last + 1). Positions move as records are consumed; ``script`` holds what the next
    consume() calls return (errors); ``clock`` moves only when a consume() waits for nothing."""

    def __init__(self, logs: dict[int, dict[int, Any]], highs: dict[int, int] | None = None,
                 clock: list[float] | None = None) -> None:
        self.logs = logs
        self.highs = highs or {}
        self.positions: dict[int, int] = {}
        self.frozen: set[int] = set()  # partitions that deliver nothing (their leader is away)
        self.script: list[list[FakeMessage]] = []  # what the next consume() calls return, before the log
        self.consumed = 0
        self.closed = False
        self.watermarks_answer = True
        self.committed_at: dict[int, int] = {}  # partition -> the group's committed offset
        self.clock = clock if clock is not None else [0.0]

    def high(self, p: int) -> int:
        return self.highs.get(p, max(self.logs[p], default=-1) + 1)

    def assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            low = min(self.logs[tp.partition], default=0)
            self.positions[tp.partition] = low if tp.offset == OFFSET_BEGINNING else tp.offset

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[FakeMessage]:
        self.consumed += 1
        if self.script:
            return self.script.pop(0)
        out: list[FakeMessage] = []
        for p, pos in sorted(self.positions.items()):
            if p in self.frozen:
                continue
            for off in sorted(o for o in self.logs[p] if o >= pos)[:num_messages - len(out)]:
                rec = self.logs[p][off]
                key, value = rec if isinstance(rec, tuple) else (None, rec)
                out.append(FakeMessage(p, off, value, key=key))
                self.positions[p] = off + 1
            if max(self.logs[p], default=-1) < self.positions[p] < self.high(p):
                self.positions[p] = self.high(p)  # offsets after the last record hold none (compaction, markers)
        if not out:
            self.clock[0] += timeout  # nothing came: the whole wait passed
        return out

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, tp.partition, self.positions.get(tp.partition, OFFSET_INVALID))
                for tp in partitions]

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int] | None:
        if not self.watermarks_answer:
            self.clock[0] += timeout
            return None
        return min(self.logs[partition.partition], default=0), self.high(partition.partition)

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, tp.partition, self.committed_at.get(tp.partition, OFFSET_INVALID))
                for tp in partitions]

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        meta = SimpleNamespace(error=None, partitions={p: None for p in self.logs})
        return SimpleNamespace(topics={TOPIC: meta})

    def close(self) -> None:
        self.closed = True
