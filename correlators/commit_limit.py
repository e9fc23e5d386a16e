"""The group's committed offset never passes an events record this worker has not judged.

Why. Faust acknowledges records its agent never saw: a record the stream meets while flow
control is suspended (a rebalance has begun) or from an earlier consumer generation is skipped
*and acknowledged* (``faust.streams.Stream._py_aiter``: "we want to ack the filtered out
message"). The next commit -- at the revocation, or on its 2.8 s timer -- then moves the group's
committed offset past records whose decisions were never made. A worker that holds on to the
partition catches them up when the next record shows the gap (:mod:`correlators.worker.takeover`);
but a successor (this one crashed, or the partition moved) rebuilds the state and publishes only
the outcomes past the committed offset (:mod:`correlators.rebuild`: below it everything was
published, by definition). The skipped record's decisions were lost for good.

What. Each commit round asks Faust's consumer, per partition, how far it may commit
(``Consumer._new_offset``); for the events topic that answer is capped, in this order:

1. A partition whose state this worker does not hold (not taken over yet, or being caught up on a
   thread): nothing is committed.
2. Else at most up to its state's position + 1: every record up to the position was judged here
   (or folded from the log by a takeover), its decisions published before the agent finished
   it. (The record at the position itself may still be publishing; Faust acknowledges it only once
   the agent finished it, so Faust's own answer does not pass it before then.)
3. The acknowledged offsets Faust consumed past the cap are put back in its list, so a later
   round commits them once the position has moved past them; nothing is forgotten.

Other topics (the ``emitted`` changelog's recovery) are left to Faust. Like
:mod:`correlators.consumer_acks`, this reads Faust's private bookkeeping (``_new_offset``,
``_acked``, ``_acked_index``); ``tests/correlators/test_commit_limit.py`` pins it against the
installed Faust.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from faust.types import TP

__all__ = ["CommitLimit"]


class CommitLimit:
    """Caps what Faust's consumer commits on ``topic`` at what this worker judged (module docstring)."""

    def __init__(self, topic: str, judged_upto: Callable[[int], int | None]) -> None:
        self._topic = topic
        self._judged_upto = judged_upto  # partition -> offset of the last record judged, None: no state held
        self._installed: set[int] = set()  # id() of the consumers already capped

    def install(self, consumer: Any) -> None:
        """Cap ``consumer`` (once; later calls for the same consumer do nothing)."""
        if id(consumer) in self._installed:
            return
        faust_new_offset = consumer._new_offset

        def new_offset(tp: TP) -> int | None:
            if tp.topic != self._topic:
                return faust_new_offset(tp)  # type: ignore[no-any-return]
            judged = self._judged_upto(tp.partition)
            if judged is None:  # 1.
                return None
            return self._capped(consumer, tp, faust_new_offset(tp), judged + 1)

        consumer._new_offset = new_offset
        self._installed.add(id(consumer))

    @staticmethod
    def _capped(consumer: Any, tp: TP, offset: int | None, limit: int) -> int | None:
        if offset is None or offset <= limit:  # 2.
            return offset
        back = range(limit, offset)  # 3. Faust took these off its list, as if committed
        acked = consumer._acked[tp]
        acked.extend(back)
        acked.sort()
        consumer._acked_index[tp].update(back)
        return limit
