"""A capture, line by line, to verdicts: the events of a good line, or why a line is bad.

:func:`~producers.capture.parse_capture_line` judges one line alone; the
screen adds what needs the lines around it, cheapest check first, so bad input
costs less than good input and a flood of it does not slow the good lines:

1. **Too long**: an :class:`~producers.capture.reader.OversizedLine` from the
   reader (or a line over ``MAX_LINE_BYTES`` handed in whole) is refused unread.
2. **Duplicate**: a line whose bytes (line ending aside) equal one of the last
   :data:`DEDUPE_WINDOW` distinct lines is refused before it is parsed: a flood
   costs one hash per line. Identical bytes give identical event ids, and the
   correlator already ignores an id it has seen, so refusing them here changes
   no decision; it spares the broker, the correlator and the archive the flood
   and gives each copy a dead letter naming the first. Copies further apart
   than the window are left to the correlator's id check (they are harmless,
   not refused). A copy of a bad line is refused as a duplicate of it.
3. **Parse**: :class:`~producers.capture.BadInput` with its reason and kind.
4. **Clock**: a timestamp far from the lines around it
   (:mod:`producers.capture.clock`) is refused; it would move the correlator's
   event clock.

Verdicts come in line order, ``HALF_WINDOW`` lines late (the clock needs the
lines after a line to judge it). Dead letters keep at most
:data:`RAW_KEPT_BYTES` of the line (:data:`DUPLICATE_RAW_BYTES` for a
duplicate: the first copy is in the capture), so they stay small however big or
many the bad lines are.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar, overload

from common.deadletters import RAW_KEPT_BYTES, dead_letter
from producers.capture import MAX_LINE_BYTES, BadInput, parse_capture_line, too_long
from producers.capture.clock import ClockWindow
from producers.capture.reader import OversizedLine
from streams.decisions import DeadLetter
from streams.events import Event

__all__ = ["DEDUPE_WINDOW", "DUPLICATE_RAW_BYTES", "RAW_KEPT_BYTES", "Accepted", "CaptureScreen", "Refused",
           "Verdict"]

#: Distinct lines remembered to recognise a copy (about 12 MB at most).
DEDUPE_WINDOW = 65_536
#: The most of a duplicate line its dead letter keeps.
DUPLICATE_RAW_BYTES = 256


class _Timed(Protocol):
    @property
    def ts(self) -> datetime: ...


E = TypeVar("E", bound=_Timed)


@dataclass(frozen=True)
class Accepted(Generic[E]):
    """Line ``line`` (1-based) is good; ``events`` may be empty (a line that says nothing)."""

    line: int
    events: list[E]


@dataclass(frozen=True)
class Refused:
    """Line ``line`` is bad: ``error`` says why; ``raw`` is its start, for the dead letter."""

    line: int
    error: BadInput
    raw: bytes

    def dead_letter(self, stage: str, at: datetime) -> DeadLetter:
        return dead_letter(stage, f"line {self.line}: {self.error.reason}", self.raw, at)


Verdict = Accepted[Event] | Refused


@dataclass
class _Slot(Generic[E]):
    line: int
    raw: bytes
    verdict: Accepted[E] | Refused | None = None
    events: list[E] = field(default_factory=list)


class CaptureScreen(Generic[E]):
    """Screen one capture: feed lines in order with :meth:`push`, then :meth:`finish`; or :meth:`screen`.

    ``parse`` turns a line into its events (default :func:`~producers.capture.parse_capture_line`;
    :func:`producers.capture.fast_nvml.parse_for_publishing` gives the same events, some already written
    as records)."""

    @overload
    def __init__(self: CaptureScreen[Event], dedupe_window: int = DEDUPE_WINDOW,
                 clock: ClockWindow[_Slot[Event]] | None = None) -> None: ...

    @overload
    def __init__(self, dedupe_window: int = DEDUPE_WINDOW, clock: ClockWindow[_Slot[E]] | None = None, *,
                 parse: Callable[[bytes | str], list[E]]) -> None: ...

    def __init__(self, dedupe_window: int = DEDUPE_WINDOW, clock: ClockWindow[Any] | None = None, *,
                 parse: Callable[[bytes | str], list[E]] | None = None) -> None:
        self._window = dedupe_window
        self._seen: OrderedDict[bytes, int] = OrderedDict()  # digest of a line -> its line number
        self._clock: ClockWindow[_Slot[E]] = clock if clock is not None else ClockWindow()
        self._queue: deque[_Slot[E]] = deque()  # lines without a verdict, and those behind them
        self._n = 0
        self._parse: Callable[[bytes | str], list[E]] = parse or parse_capture_line  # type: ignore[assignment]

    def screen(self, lines: Iterable[bytes | str | OversizedLine]) -> Iterator[Accepted[E] | Refused]:
        for raw in lines:
            yield from self.push(raw)
        yield from self.finish()

    def push(self, raw: bytes | str | OversizedLine) -> list[Accepted[E] | Refused]:
        """Take the next line; return the verdicts now known, in line order."""
        self._n += 1
        if isinstance(raw, OversizedLine):
            self._queue.append(_Slot(self._n, raw.head, Refused(self._n, too_long(raw.size), raw.head)))
            return self._release()
        data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
        slot: _Slot[E] = _Slot(self._n, data[:RAW_KEPT_BYTES])
        self._queue.append(slot)
        if len(data) > MAX_LINE_BYTES + 2:  # too long even with its line ending: neither hashed nor parsed
            slot.verdict = Refused(slot.line, too_long(len(data.rstrip(b"\r\n"))), slot.raw)
            return self._release()
        first = self._first_copy(data.rstrip(b"\r\n"))
        if first is not None:
            reason = f"duplicate of line {first} (the same bytes: the same event ids)"
            slot.verdict = Refused(slot.line, BadInput(reason, "duplicate"), data[:DUPLICATE_RAW_BYTES])
            return self._release()
        try:
            slot.events = self._parse(raw)
        except BadInput as exc:
            slot.verdict = Refused(slot.line, exc, slot.raw)
            return self._release()
        if not slot.events:
            slot.verdict = Accepted(slot.line, [])  # says nothing: no time to judge (its ts is valid)
            return self._release()
        self._judge(self._clock.push(slot, slot.events[0].ts))
        return self._release()

    def finish(self) -> list[Accepted[E] | Refused]:
        """The capture has ended: every remaining verdict."""
        self._judge(self._clock.finish())
        return self._release()

    def _first_copy(self, content: bytes) -> int | None:
        """The line number of an earlier copy of ``content``, remembering it if it is new."""
        if not content.strip():
            return None  # blank lines are bad input, but not copies of each other
        digest = hashlib.blake2b(content, digest_size=16).digest()
        first = self._seen.get(digest)
        if first is not None:
            return first
        self._seen[digest] = self._n
        if len(self._seen) > self._window:
            self._seen.popitem(last=False)
        return None

    def _judge(self, judged: list[tuple[_Slot[E], str | None]]) -> None:
        for slot, outlier in judged:
            slot.verdict = (Accepted(slot.line, slot.events) if outlier is None
                            else Refused(slot.line, BadInput(outlier, "clock_outlier"), slot.raw))

    def _release(self) -> list[Accepted[E] | Refused]:
        out: list[Accepted[E] | Refused] = []
        while self._queue and self._queue[0].verdict is not None:
            verdict = self._queue.popleft().verdict
            assert verdict is not None
            out.append(verdict)
        return out
