"""Is a line's timestamp plausible? Judged against the timestamps of the lines around it.

Why. The correlator judges on event time: its clock is the newest ``ts`` it has
seen, and timers (debounce, settle, silence, staleness) fire as the clock
passes them. One line from a source whose clock is wrong (a BMC that lost its
real-time clock and counts from 2000-01-01, a node before NTP synced, a year
typed 2099) would move that clock years ahead, fire every pending timer and
close every open window at once, and every good line after it would be in the
past. The parser already refuses years outside 2000..2100; this catches a
timestamp that is valid on its own but far from the capture's clock.

The rule (general, tuned to no capture). A line's time is compared with the
median time of the ``2 * HALF_WINDOW + 1`` parsed lines around it, in file
order, itself included. It is an outlier when it is further from that median
than both :data:`MIN_DEVIATION` (an hour: far beyond clock skew of ±30 s and
the slight disorder of a capture's lines) and :data:`MAD_FACTOR` times the
window's median absolute deviation (so a sparse capture, whose consecutive
lines are hours apart, is judged on its own scale).

What it catches and what not. The median needs a majority: a run of up to
HALF_WINDOW consecutive wrong lines, or wrong lines that make up less than
half of every window, are outliers. A real jump of the capture's clock (a gap
in the recording) is not: on either side of the gap, most of the lines around
a line are on its own side. A capture shorter than the window is judged as a
whole; when its lines split evenly, the earlier times win (the lower median).

Judging a line needs the HALF_WINDOW lines after it, so verdicts come that
many lines late (and the rest at :meth:`ClockWindow.finish`); the public
captures' lines are at most 5 minutes apart and never judged outliers
(``tests/producers/test_capture_clock.py``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

__all__ = ["HALF_WINDOW", "MAD_FACTOR", "MIN_DEVIATION", "ClockWindow"]

#: Lines on each side of a line that its time is compared with.
HALF_WINDOW = 32
#: A time this close to its neighbours' median is never an outlier.
MIN_DEVIATION = timedelta(hours=1)
#: Beyond MIN_DEVIATION, a time within this many median absolute deviations is still plausible.
MAD_FACTOR = 4.0

T = TypeVar("T")


def _span(seconds: float) -> str:
    seconds = abs(seconds)
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:.0f} s"


class ClockWindow(Generic[T]):
    """Feed ``(item, ts)`` in line order; get ``(item, None)`` for a plausible time or
    ``(item, reason)`` for an outlier, in the same order, :data:`HALF_WINDOW` items late."""

    def __init__(self, half_window: int = HALF_WINDOW, min_deviation: timedelta = MIN_DEVIATION,
                 mad_factor: float = MAD_FACTOR) -> None:
        self._half = half_window
        self._min = min_deviation.total_seconds()
        self._factor = mad_factor
        self._times: deque[float] = deque()  # the window, in line order
        self._sorted: list[float] = []  # the same times, sorted
        self._pending: deque[tuple[T, datetime]] = deque()

    def push(self, item: T, ts: datetime) -> list[tuple[T, str | None]]:
        t = ts.timestamp()
        self._times.append(t)
        insort(self._sorted, t)
        self._pending.append((item, ts))
        return [self._judge_next()] if len(self._pending) > self._half else []

    def finish(self) -> list[tuple[T, str | None]]:
        """The verdicts still waiting for lines after them: the capture has ended."""
        return [self._judge_next() for _ in range(len(self._pending))]

    def _judge_next(self) -> tuple[T, str | None]:
        item, ts = self._pending.popleft()
        verdict = self._judge(ts)
        while len(self._times) > self._half + len(self._pending):  # the next line's window
            del self._sorted[bisect_left(self._sorted, self._times.popleft())]
        return item, verdict

    def _judge(self, ts: datetime) -> str | None:
        times = self._sorted
        mid = (len(times) - 1) // 2
        median = times[mid]
        off = ts.timestamp() - median
        if abs(off) <= self._min:
            return None
        mad = sorted(abs(t - median) for t in times)[mid]
        if abs(off) <= self._factor * mad:
            return None
        clock = datetime.fromtimestamp(median, UTC).isoformat().replace("+00:00", "Z")
        return (f"ts {ts.isoformat().replace('+00:00', 'Z')} is {_span(off)} "
                f"{'ahead of' if off > 0 else 'behind'} the capture's clock ({clock}, the median of the "
                f"{len(times)} lines around it): the source's clock is wrong; check its time sync "
                "(NTP, the BMC's clock)")
