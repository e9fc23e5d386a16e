"""Packing a producer's events into ``events`` records: several per record, in order, bounded.

Why several: every record costs the correlator's stream processor a fixed price (fetching, its
bookkeeping, acknowledging) many times the cost of judging a routine sample, so a producer that
sends what it has together -- a node agent's every GPU sample of one tick, every rank's watchdog
line of one timeout -- makes that price per batch (:mod:`streams.batch` is the envelope; every
reader takes both shapes).

A batch is cut (:meth:`Batcher.add`) before the event that would make it exceed ``max_events`` or
``max_bytes`` (the record's size, envelope included; well under the broker's record limit), that lies more than ``window_s`` of *event
time* from the batch's first event (a replay stands in event time for the few tens of
milliseconds a live producer waits: its records then look like what live producers send, and a
sparse capture stays one event per record), or, with ``per_source``, that comes from another
source than the batch's (per-source delivery counters stay exact). A batch of one event is sent as
the event itself, the shape every reader has always taken. Order is never changed: batches are runs
of consecutive events.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from streams.batch import ENVELOPE_BYTES, encode_batch
from streams.events import Event

__all__ = ["Batcher", "Batching", "EncodedEvent", "Packed"]


@dataclass(frozen=True)
class Batching:
    """How a producer packs events into records (see the module docstring)."""

    max_events: int = 500
    max_bytes: int = 256 * 1024
    window_s: float | None = None
    per_source: bool = False

    def __post_init__(self) -> None:
        if self.max_events < 1 or self.max_bytes < 1:
            raise ValueError("a batch holds at least one event and one byte")


@dataclass(frozen=True, slots=True)
class EncodedEvent:
    """An event already written as its record (``Event.model_dump_json()``'s bytes), with what batching
    needs of it: a producer that reads a line straight to those bytes builds no model only to write it
    out (:mod:`producers.capture.fast_nvml`)."""

    ts: datetime
    source: str
    value: bytes


@dataclass(frozen=True)
class Packed:
    """One record's value, how many events it holds and their source (the first one's)."""

    value: bytes
    events: int
    source: str


class Batcher:
    """Accumulates encoded events and hands back the records they fill, in order."""

    def __init__(self, batching: Batching) -> None:
        self.batching = batching
        self._encoded: list[bytes] = []
        self._bytes = 0
        self._first_ts: datetime | None = None
        self._source = ""

    def __len__(self) -> int:
        """Events waiting for their batch to be cut."""
        return len(self._encoded)

    def add(self, event: Event | EncodedEvent, encoded: bytes | None = None) -> list[Packed]:
        """Take ``event`` (``encoded``: its JSON, if the caller has it); the records it completed."""
        raw = (encoded if encoded is not None else event.value if isinstance(event, EncodedEvent)
               else event.model_dump_json().encode())
        b = self.batching
        out = []
        if self._encoded and (
                len(self._encoded) >= b.max_events or self._bytes + len(raw) + 1 > b.max_bytes
                or (b.per_source and event.source != self._source)
                or (b.window_s is not None and not self._within_window(event.ts, b.window_s))):
            out.append(self._cut())
        if not self._encoded:
            self._first_ts, self._source, self._bytes = event.ts, event.source, ENVELOPE_BYTES
        self._encoded.append(raw)
        self._bytes += len(raw) + 1
        return out

    def _within_window(self, ts: datetime, window_s: float) -> bool:
        try:
            return self._first_ts is None or abs((ts - self._first_ts).total_seconds()) <= window_s
        except TypeError:  # one naive, one aware: not comparable, so not together
            return False

    def flush(self) -> list[Packed]:
        """The batch under way as a record (none when nothing waits)."""
        return [self._cut()] if self._encoded else []

    def _cut(self) -> Packed:
        encoded, self._encoded, self._bytes, self._first_ts = self._encoded, [], 0, None
        value = encoded[0] if len(encoded) == 1 else encode_batch(encoded)
        return Packed(value, len(encoded), self._source)
