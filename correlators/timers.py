"""Event-time timers: a clock that only moves with the observations.

Armed timers are part of the engine's state, so a snapshot carries them: as a
list of plain records (:class:`ArmedTimers`: name, key, due time, arming
sequence), never as the heap. The heap is an index rebuilt on load from the
live timers alone; pop order is (due, seq), a total order, so a restored queue
fires exactly as the original would have.

Every name a rule may arm is declared once in :data:`TimerName` (mypy rejects
any other; a snapshot holding another is refused), and the engine checks that
each has a handler (``tests/correlators/test_engine_tables.py``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from correlators.state_fields import Instant

__all__ = ["ArmedTimers", "Timer", "TimerKey", "TimerName", "TimerQueue"]

#: Every timer the rules arm (see each rule set's ``timer_handlers()`` for what it decides).
TimerName = Literal["fence", "confirm", "psu_check", "gone", "silence", "judge", "settle", "verify", "hang",
                    "hang_check", "stale",
                    "tell", "hold_write"]
#: What a timer is about: (node,), (node, GPU index), (incident id,) or (job,).
TimerKey = tuple[str | int | None, ...]


@dataclass(order=True)
class Timer:
    due: Instant
    seq: int
    name: TimerName = field(compare=False)
    key: TimerKey = field(compare=False)


@dataclass
class ArmedTimers:
    """A queue as data: the live timers in firing order and the last arming sequence number."""

    seq: int = 0
    armed: list[Timer] = field(default_factory=list)


class TimerQueue:
    """Timers keyed by (name, key); re-arming replaces the earlier due time."""

    def __init__(self) -> None:
        self._heap: list[Timer] = []
        self._live: dict[tuple[str, TimerKey], Timer] = {}
        self._seq = 0

    def arm(self, name: TimerName, key: TimerKey, due: datetime) -> None:
        self._seq += 1
        t = Timer(due, self._seq, name, key)
        self._live[(name, key)] = t
        heapq.heappush(self._heap, t)

    def arm_after(self, name: TimerName, key: TimerKey, now: datetime, seconds: float) -> None:
        self.arm(name, key, now + timedelta(seconds=seconds))

    def cancel(self, name: TimerName, key: TimerKey) -> None:
        self._live.pop((name, key), None)

    def armed(self, name: TimerName, key: TimerKey) -> bool:
        return (name, key) in self._live

    def due(self, name: TimerName, key: TimerKey) -> datetime | None:
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

    # --- as data -------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        """Equal when the same timers are armed, due alike and in the same order (the heap's leftovers aside)."""
        return isinstance(other, TimerQueue) and self.to_data() == other.to_data()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def to_data(self) -> ArmedTimers:
        """The live timers, in the order they fire, and the sequence counter."""
        return ArmedTimers(self._seq, sorted(self._live.values()))

    @classmethod
    def from_data(cls, data: ArmedTimers) -> TimerQueue:
        """The queue ``data`` describes; raises ValueError when it is not one a queue could hold."""
        q = cls()
        for t in data.armed:
            if (t.name, t.key) in q._live:
                raise ValueError(f"timer {t.name} {list(t.key)} armed twice")
            if not 0 < t.seq <= data.seq:
                raise ValueError(f"timer {t.name} {list(t.key)} has sequence {t.seq}, outside 1..{data.seq}")
            q._live[(t.name, t.key)] = t
        q._heap = sorted(q._live.values())  # a sorted list is a heap
        q._seq = data.seq
        return q

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        data = handler.generate_schema(ArmedTimers)
        return core_schema.no_info_after_validator_function(
            cls.from_data, data,
            serialization=core_schema.plain_serializer_function_ser_schema(cls.to_data, return_schema=data))
