"""Acknowledging events offsets the consumer never handed to the agent, each once in Faust's books.

Why. A takeover (:mod:`correlators.worker.takeover`, step 5) acknowledges the offsets the
consumer skipped, or the group's committed offset would wait for them forever. Faust commits, every
``broker_commit_interval`` (2.8 s), the run of consecutive offsets at the head of a partition's
list of acknowledged offsets. It fills some skipped offsets itself: when a record arrives past
the last one it handed over, the offsets between (and the record's own) go into a gap tree
(``Consumer._add_gap``), which is merged into that list at the next commit without looking at
what the list holds. An offset in the list twice splits the run at that offset, so each commit
then moves the committed offset by one: a takeover that acknowledged the 193 offsets Faust had
also filled left the group's committed offset crawling one offset every 2.8 s (seen as a worker
that judged everything while its partition's lag stayed put). So an offset Faust already counts is
not acknowledged again.

What, for each offset of the range (:meth:`ConsumerAcks.__call__`), in this order:

1. Below the consumer's own committed offset (what it read at the assignment or committed
   since): passed over, the consumer would ignore it.
2. Already acknowledged and not committed yet, or inside a gap Faust fills itself: passed over.
3. Else acknowledged, as a message the agent finished.

Nothing here changes what may be committed: every offset handed in is one the worker judged (in
the agent or from the log) with its decisions on their topics; this only keeps Faust from
counting it twice. It reads Faust's consumer bookkeeping (``_committed_offset``, ``_acked``,
``_gap``), which faust-streaming keeps private; ``tests/correlators/test_consumer_acks.py``
pins the behaviour this relies on against the installed Faust.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from faust.types import TP, Message

__all__ = ["ConsumerAcks"]


class ConsumerAcks:
    """Acknowledges offsets of ``topic`` to Faust's consumer, none it already counts (module docstring)."""

    def __init__(self, consumer: Callable[[], Any], topic: str) -> None:
        self._consumer = consumer  # the app's consumer, looked up when used (Faust makes it lazily)
        self._topic = topic

    def __call__(self, part: int, offsets: range) -> int:
        """Acknowledge ``offsets`` of ``part`` (see the module docstring); how many were acknowledged."""
        consumer = self._consumer()
        tp = TP(self._topic, part)
        committed = consumer._committed_offset.get(tp)
        pending = set(consumer._acked.get(tp, ()))
        gaps = consumer._gap.get(tp)
        done = 0
        for offset in offsets:
            if committed is not None and offset < committed:  # 1.
                continue
            if offset in pending or (gaps and gaps.overlaps(offset)):  # 2.
                continue
            if consumer.ack(Message(self._topic, part, offset, 0.0, 0, None, None, None, None)):  # 3.
                done += 1
        return done
