"""The worker's timers: the live clock tick and the open-incident gauges.

The live tick (:class:`LiveClock`, only with ``FAULTLINE_LIVE_CLOCK``): event time follows the wall
clock too, so debounce and settle windows close on time without waiting for the next event. In
this order: every assigned partition without a state is adopted first (``adopt``: taken over up to
the committed offset, :meth:`correlators.worker.takeover.Takeover.adopt`), so a successor's clock
runs before any record wakes it; then, for each engine held: advance it to now; publish what that
decided and await the broker's acknowledgement. While any tick's decisions are unacknowledged, :attr:`LiveClock.in_flight`
is true and no snapshot is taken (:mod:`correlators.worker.snapshot_taker`): a snapshot must never
hold a decision that is not on its topic.

The gauges (:func:`set_gauges`): open incidents by category and severity over every cell held,
and the newest event time, every few seconds (not per event).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from common import metrics as m
from correlators.partitions import WorkerState
from correlators.worker.ports import WallClock, utcnow
from correlators.worker.publisher import Publisher

__all__ = ["LiveClock", "set_gauges"]


class LiveClock:
    """Advances every engine held to the wall clock and publishes what that decides."""

    def __init__(self, held: WorkerState, publisher: Publisher, wall_clock: WallClock = utcnow, *,
                 adopt: Callable[[], Awaitable[None]] | None = None) -> None:
        self._held = held
        self._publisher = publisher
        self._wall_clock = wall_clock
        self._adopt = adopt
        self._unacked = 0  # ticks whose decisions the broker has not acknowledged yet

    @property
    def in_flight(self) -> bool:
        return self._unacked > 0

    async def tick(self) -> None:
        if self._adopt is not None:
            await self._adopt()
        now = self._wall_clock()
        for engine in self._held.engines():
            decisions = engine.advance_to(now)
            if decisions:
                self._unacked += 1
                try:
                    await self._publisher.publish_acknowledged(engine, decisions)
                finally:
                    self._unacked -= 1


def set_gauges(held: WorkerState) -> None:
    """Open incidents by category and severity over every cell held; the newest event time; the lines
    screened for a wrong clock (correlators/clock.py), the worst skew, and the sources skewed now (the 20 worst)."""
    counts: dict[tuple[str, str], int] = {}
    newest: datetime | None = None
    screened, worst = 0, 0.0
    skews: dict[tuple[str, str], float] = {}
    for engine in held.engines():
        screened += engine.state.sources.screened
        if abs(engine.state.sources.worst_skew_s) > abs(worst):
            worst = engine.state.sources.worst_skew_s
        for key, skew in engine.state.sources.skewed():
            node, _, source = key.rpartition("|")
            skews[(node, source)] = skew
        for inc in engine.incidents.values():
            if inc.state not in ("resolved", "closed"):
                counts[(inc.category, inc.severity)] = counts.get((inc.category, inc.severity), 0) + 1
        if engine.clock is not None and (newest is None or engine.clock > newest):
            newest = engine.clock
    m.set_incidents_open(counts)
    m.CLOCK_SCREENED.set(screened)
    m.CLOCK_WORST_SKEW.set(worst)
    m.set_source_skews(dict(sorted(skews.items(), key=lambda kv: -abs(kv[1]))[:20]))
    if newest is not None:
        m.EVENT_TIME.labels("correlator").set(newest.timestamp())
