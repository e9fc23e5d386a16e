"""Event-time timers: a clock that only moves with the observations."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import datetime, timedelta

__all__ = ["Timer", "TimerQueue"]


@dataclass(order=True)
class Timer:
    due: datetime
    seq: int
    name: str = field(compare=False)
    key: tuple[str | int | None, ...] = field(compare=False)


class TimerQueue:
    """Timers keyed by (name, key); re-arming replaces the earlier due time."""

    def __init__(self) -> None:
        self._heap: list[Timer] = []
        self._live: dict[tuple[str, tuple[str | int | None, ...]], Timer] = {}
        self._seq = 0

    def arm(self, name: str, key: tuple[str | int | None, ...], due: datetime) -> None:
        self._seq += 1
        t = Timer(due, self._seq, name, key)
        self._live[(name, key)] = t
        heapq.heappush(self._heap, t)

    def arm_after(self, name: str, key: tuple[str | int | None, ...], now: datetime, seconds: float) -> None:
        self.arm(name, key, now + timedelta(seconds=seconds))

    def cancel(self, name: str, key: tuple[str | int | None, ...]) -> None:
        self._live.pop((name, key), None)

    def armed(self, name: str, key: tuple[str | int | None, ...]) -> bool:
        return (name, key) in self._live

    def due(self, name: str, key: tuple[str | int | None, ...]) -> datetime | None:
        t = self._live.get((name, key))
        return t.due if t else None

    def pop_due(self, now: datetime) -> Timer | None:
        """The next live timer due at or before ``now``, or None."""
        while self._heap and self._heap[0].due <= now:
            t = heapq.heappop(self._heap)
            if self._live.get((t.name, t.key)) is t:
                del self._live[(t.name, t.key)]
                return t
        return None
