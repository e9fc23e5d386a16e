"""What the worker's collaborators need from the outside, as plain callables and protocols.

The Faust adapter (:mod:`correlators.app`) fills these with the real producer, consumer and
table; the unit tests (``tests/correlators/worker/``) with fakes that record sends, resolve or fail
acknowledgements on demand, and run blocking calls inline. Nothing here imports Faust or Kafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

__all__ = ["Ack", "Clock", "OffsetTable", "RunBlocking", "Send", "WallClock", "in_thread", "utcnow"]

_T = TypeVar("_T")

#: Hand one record (topic suffix, key, value) to the producer; what it returns resolves once the
#: broker has acknowledged the record (and raises if it refused it).
Send = Callable[[str, bytes, bytes], Awaitable[Awaitable[Any]]]

#: Acknowledge a range of offsets of one events partition to the consumer (so the group's
#: committed offset can move past them) without them having been handed to the agent; offsets
#: the consumer already counts are left alone (:mod:`correlators.consumer_acks`). Returns how
#: many it acknowledged.
Ack = Callable[[int, range], int]

#: Monotonic seconds (durations, schedules); and the wall clock (signing, live event time).
Clock = Callable[[], float]
WallClock = Callable[[], datetime]


class RunBlocking(Protocol):
    """Run a blocking call off the event loop and await its result (its exception is raised here)."""

    def __call__(self, fn: Callable[..., _T], /, *args: Any) -> Awaitable[_T]: ...


class OffsetTable(Protocol):
    """The ``emitted`` table: events partition (as a string key) -> last offset whose decisions are
    on their topics; -1 for a partition never published."""

    def __getitem__(self, key: str) -> int: ...
    def __setitem__(self, key: str, value: int) -> None: ...


def in_thread(fn: Callable[..., _T], /, *args: Any) -> Awaitable[_T]:
    """:class:`RunBlocking` on the loop's default executor."""
    return asyncio.get_running_loop().run_in_executor(None, fn, *args)


def utcnow() -> datetime:
    return datetime.now(UTC)

