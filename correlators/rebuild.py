"""The log side of a takeover: judge a partition's records from the Kafka log, off the event loop.

A worker that takes a partition over (or finds records it never saw) reads them here with a
:class:`~common.kafka_reader.TopicReader` (it does not join the group; its errors, backoff and
bounds are the reader's), folds them into the partition's state
(:func:`correlators.partitions.fold`) and hands back the outcomes still to publish.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import OFFSET_BEGINNING

from common.kafka_reader import KafkaConsumerLike, TopicReader
from correlators.partitions import Folded, PartitionState, decode_events, fold

__all__ = ["rebuild"]


def rebuild(state: PartitionState, conf: dict[str, Any], topic: str, group: str, upto: int, after: int,
            idle_s: float = 60.0, *, consumer: KafkaConsumerLike | None = None) -> tuple[Folded, int]:
    """Judge every record of ``topic[state.partition]`` past the state's position and below ``upto``.

    From the log start for a new state. Blocking (run it off the event loop). Returns what was
    folded in, with the outcomes still to publish: those past ``after`` (the last published
    offset) and at or past ``group``'s committed offset -- a record below it was acknowledged,
    which a worker does only once the record's decisions are on their topics, so a lost
    ``emitted`` changelog never republishes the whole retained log. Also returns that committed
    offset (negative: none), read without joining the group. ``idle_s`` bounds every call to the
    broker and any stretch of the read without progress; ``consumer`` replaces the real one (tests).
    """
    part = state.partition
    with TopicReader(conf, topic, group, stall_s=idle_s, consumer=consumer) as reader:
        committed = reader.committed(part)
        after = max(after, committed - 1)
        low, _ = reader.watermarks(part)
        folded = Folded()
        start = max(low, state.position + 1)
        if start < upto:  # else nothing is left below it (a new partition, or retention deleted it)
            reader.assign({part: start if state.position >= 0 else OFFSET_BEGINNING})
            for batch in reader.batches({part: upto}):
                fold(state, ((msg.offset() or 0, msg.key(), msg.value()) for msg in batch), upto,
                     decode_events, after, folded)
        state.fast_forward(upto)
        return folded, committed
