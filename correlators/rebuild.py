"""The log side of a takeover: judge a partition's records from the Kafka log, off the event loop.

A worker that takes a partition over (or finds records it never saw) reads them here with a
plain consumer that does not join the group, folds them into the partition's state
(:func:`correlators.partitions.fold`) and hands back the outcomes still to publish.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from correlators.partitions import Folded, PartitionState, fold
from streams.events import Event

__all__ = ["rebuild"]


def rebuild(state: PartitionState, conf: dict[str, Any], topic: str, group: str, upto: int, after: int,
            idle_s: float = 60.0) -> tuple[Folded, int]:
    """Judge every record of ``topic[state.partition]`` past the state's position and below ``upto``.

    From the log start for a new state. Blocking (run it off the event loop). Returns what was
    folded in, with the outcomes still to publish: those past ``after`` (the last published
    offset) and at or past ``group``'s committed offset -- a record below it was acknowledged,
    which a worker does only once the record's decisions are on their topics, so a lost
    ``emitted`` changelog never republishes the whole retained log. Also returns that committed
    offset (negative: none), read without joining the group.
    """
    tp = TopicPartition(topic, state.partition)
    c = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        committed = c.committed([tp], timeout=30)[0].offset
        after = max(after, committed - 1)
        low, _ = c.get_watermark_offsets(tp, timeout=30)
        folded = Folded()
        start = max(low, state.position + 1)
        if start >= upto:  # nothing left below it (a new partition, or retention deleted it)
            state.fast_forward(upto)
            return folded, committed
        c.assign([TopicPartition(topic, state.partition, start if state.position >= 0 else OFFSET_BEGINNING)])
        idle_since = time.monotonic()
        while True:
            msgs = [msg for msg in c.consume(1000, timeout=1.0) if not msg.error()]
            if not msgs:
                if time.monotonic() - idle_since > idle_s:
                    raise TimeoutError(f"reading {topic}[{state.partition}]: no records before offset {upto}")
                continue
            idle_since = time.monotonic()
            fold(state, ((msg.offset() or 0, msg.key(), msg.value()) for msg in msgs), upto,
                 Event.model_validate_json, after, folded)
            if (msgs[-1].offset() or 0) >= upto - 1:
                state.fast_forward(upto)
                return folded, committed
    finally:
        c.close()
