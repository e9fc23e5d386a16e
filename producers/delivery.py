"""Delivery to Kafka: a confluent-kafka idempotent producer, keyed as the topics declare.

With a :class:`~producers.batching.Batching`, events go several to a record (:mod:`producers.batching`;
``flush`` sends the batch under way first); without one, one event per record.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from common.kafka_logging import with_logger
from producers.batching import Batcher, Batching, EncodedEvent
from streams.cells import DEFAULT_CELL, cell_key
from streams.decisions import DeadLetter
from streams.events import Event
from streams.topics import topic_name

__all__ = ["EventPublisher", "DeliveryFailed", "event_key"]

log = logging.getLogger("faultline.producer")


class DeliveryFailed(RuntimeError):
    pass


def event_key(cell: str) -> bytes:
    """Events are keyed by their cell (:mod:`streams.cells`): a cell's events share one partition, in order."""
    return cell_key(cell)


class EventPublisher:
    """Publishes one cell's canonical events and dead letters; ``flush`` checks every delivery report."""

    def __init__(self, kafka_conf: dict[str, Any], namespace: str, cell: str = DEFAULT_CELL,
                 batching: Batching | None = None) -> None:
        conf = {
            **kafka_conf,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "message.max.bytes": 1_048_576,
        }
        self._p = Producer(with_logger(conf))
        self._events = topic_name(namespace, "events")
        self._dead = topic_name(namespace, "deadletters")
        self._key = event_key(cell)
        self._batcher = Batcher(batching) if batching is not None else None
        self.failed: list[str] = []
        self.sent = 0  # records delivered

    def _report(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed.append(f"{msg.topic()}: {err}")
        else:
            self.sent += 1

    def _produce(self, topic: str, key: bytes, value: bytes) -> None:
        while True:
            try:
                self._p.produce(topic, value=value, key=key, on_delivery=self._report)
                return
            except BufferError:
                self._p.poll(0.1)  # local queue full: let deliveries drain, then retry

    def publish(self, events: Iterable[Event | EncodedEvent]) -> None:
        """Hand ``events`` over in order (batched: the records they filled; the rest waits for ``flush``)."""
        if self._batcher is None:
            for e in events:
                value = e.value if isinstance(e, EncodedEvent) else e.model_dump_json().encode()
                self._produce(self._events, self._key, value)
        else:
            for e in events:
                for packed in self._batcher.add(e):
                    self._produce(self._events, self._key, packed.value)
        self._p.poll(0)

    def send_batch(self) -> None:
        """Hand the batch under way to the producer now (a live sender's linger is up)."""
        if self._batcher is not None:
            for packed in self._batcher.flush():
                self._produce(self._events, self._key, packed.value)

    def dead_letter(self, dl: DeadLetter) -> None:
        self._produce(self._dead, dl.stage.encode(), dl.model_dump_json().encode())

    def flush(self, timeout: float = 30.0) -> None:
        """Send the batch under way, then wait for every delivery report; raise if any failed."""
        self.send_batch()
        left = self._p.flush(timeout)
        if left or self.failed:
            raise DeliveryFailed(f"{left} undelivered, failures: {self.failed[:5]}")
