"""Records the consumer fetched but never handed to the agent are fetched again.

Why. Around a rebalance Faust can lose a batch it fetched: the end of table recovery resumes
the stream partitions and then seeks them to the committed offsets, and a fetch that lands
between the two is dropped while the consumer's fetch position has moved past it. A record lost
in the middle of a partition is caught up from the log once a later one arrives (a gap: a
takeover, :mod:`correlators.worker.takeover`). One lost at the end of what is written is not --
not until something more is written, perhaps never (a capture's end marker, the last events
before a quiet night). Seen as a successor that logged its assignment, then nothing, its
consumer's position at the partition's high watermark.

What. Every few seconds (:meth:`DeliveryWatch.check`), in this order:

1. Nothing while a rebalance is in progress, within ``grace_s`` of the last assignment, or when
   the agent finished a record less than ``grace_s`` ago (records are flowing, and a gap is caught
   up on its own when the next one comes).
2. For each assigned partition, the next offset this worker needs: its state's position + 1, or
   with no state the group's committed offset (read from the broker, off the event loop); and the
   consumer's fetch position (bounded by ``grace_s``; an unknown one is passed over this time).
3. Fetched past what is needed: the consumer is sent back (seek) to the needed offset, with a
   warning; the records come again, through the agent like any other, so each is judged once
   (any already judged is skipped as redelivered).
4. A partition found in order is not asked about again until its fetch position moves.

A check that fails (the broker away, the partition revoked meanwhile) is logged and tried again
on the next tick; it never raises into the timer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection

from correlators.partitions import WorkerState
from correlators.worker.ports import Clock, RunBlocking, in_thread

__all__ = ["DeliveryWatch"]

log = logging.getLogger("faultline.correlator")

#: How long the agent must have been idle before fetch positions are checked.
GRACE_S = 5.0


class DeliveryWatch:
    """Sends the consumer back to records it fetched past without handing them over (module docstring)."""

    def __init__(self, held: WorkerState, *, idle_for: Callable[[], float], ready: Callable[[], bool],
                 position: Callable[[int], Awaitable[int | None]], seek: Callable[[int, int], Awaitable[None]],
                 committed: Callable[[list[int]], dict[int, int]], run_blocking: RunBlocking = in_thread,
                 grace_s: float = GRACE_S, clock: Clock = time.monotonic) -> None:
        self._held = held
        self._idle_for = idle_for
        self._ready = ready
        self._position = position
        self._seek = seek
        self._committed = committed
        self._run_blocking = run_blocking
        self.grace_s = grace_s
        self._clock = clock
        self._assigned: list[int] = []
        self._assigned_at = clock()
        self._in_order: dict[int, int] = {}  # partition -> fetch position last found in order

    def on_assigned(self, partitions: Collection[int]) -> None:
        self._assigned = sorted(partitions)
        self._assigned_at = self._clock()
        self._in_order.clear()

    async def check(self) -> list[tuple[int, int, int]]:
        """One round (module docstring); (partition, needed offset, fetch position) of each seek made."""
        try:
            return await self._check()
        except Exception as exc:  # tried again on the next tick
            log.warning("could not check the consumer's fetch positions (%r); trying again", exc)
            return []

    async def _check(self) -> list[tuple[int, int, int]]:
        if (not self._ready() or self._clock() - self._assigned_at < self.grace_s  # 1.
                or self._idle_for() < self.grace_s):
            return []
        fetched: dict[int, int] = {}
        for part in self._assigned:  # 2.
            try:
                pos = await asyncio.wait_for(self._position(part), self.grace_s)
            except Exception:  # no valid position in time (TimeoutError), or revoked meanwhile
                continue
            if pos is not None and pos >= 0 and self._in_order.get(part) != pos:
                fetched[part] = pos
        if not fetched:
            return []
        needed = {p: self._held.get(p).position + 1 for p in fetched if p in self._held.partitions}
        stateless = [p for p in fetched if p not in needed]
        if stateless:
            committed = await self._run_blocking(self._committed, stateless)
            needed.update({p: max(committed.get(p, 0), 0) for p in stateless})
        seeks: list[tuple[int, int, int]] = []
        for part, pos in sorted(fetched.items()):
            want = needed[part]
            if pos <= want:  # 4. in order: nothing fetched past what this worker needs
                self._in_order[part] = pos
                continue
            if self._idle_for() < self.grace_s or not self._ready():  # records came meanwhile: next round
                return seeks
            quiet = min(self._idle_for(), self._clock() - self._assigned_at)
            log.warning("partition %d: the consumer fetched up to offset %d but handed over nothing past %d for "
                        "%.0fs; fetching offsets %d-%d again", part, pos - 1, want - 1, quiet, want, pos - 1)
            await self._seek(part, want)  # 3.
            seeks.append((part, want, pos))
        return seeks
