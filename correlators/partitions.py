"""Which correlator state a worker holds: one engine per cell, grouped by events partition.

Pure bookkeeping, no I/O (the Faust adapter, :mod:`correlators.app`, does the
reading and publishing). The invariant that makes scale-out safe: a
partition's state is always the fold of a *prefix* of that partition's log --
every record from the log start up to :attr:`PartitionState.position`, each
exactly once, in order. The correlator is deterministic, so such a state
equals the one any other worker would have after the same records, and the
decisions it makes next carry the same ids.

A worker keeps that invariant by judging only the record right after the
position. Anything else says where the record stands (:class:`Step`):

* the partition is new to this worker, or a record arrives *past* the next
  one -- the worker catches up from the log first: from the log start for a
  new partition, from its position otherwise. A record can come past the next
  one because another worker judged the records in between (a rebalance moved
  the partition away and back, or this worker was out of the group for a
  while), or because the consumer dropped records it had fetched (Faust clears
  its stream buffers when it resumes after a rebalance);
* a record at or before the position was already judged here (Kafka
  redelivers from the last committed offset after a rebalance) -- skipped.

Catching up judges the missing records like live ones and hands back the
decisions of those past ``after`` (the last offset whose decisions were
published, by whichever worker): nothing published is published again, and
nothing unpublished is skipped because this worker did not see it arrive.

A revoked partition's state is dropped (:meth:`WorkerState.keep_only`), so
memory follows the assignment; the position check above would catch a stale
state on its own, the drop makes it cheap.

A record may hold several events (a batch, :mod:`streams.batch`): it is still one
offset. Its events are judged in order by the record's cell's engine, their
decisions together are what the record led to, and the position moves past the
record only once all of them are in.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from correlators.engine import Correlator
from correlators.state import Decision
from streams.batch import decode_record
from streams.cells import cell_of_key
from streams.events import EndOfCapture, Event

__all__ = ["Folded", "Judged", "PartitionState", "Step", "WorkerState", "decode_events", "fold"]


class Step(enum.Enum):
    JUDGE = "judge"  # the next record of a state this worker holds
    SEEN = "seen"  # already part of this worker's state: redelivered, skip it
    CATCH_UP = "catch_up"  # no state, or records missing before this one: read them from the log first


@dataclass(frozen=True)
class Judged:
    """What one record led to: the decisions of its cell's engine, and whether it ended a capture."""

    offset: int
    cell: str
    decisions: list[Decision]
    end: bool = False

    @property
    def says_anything(self) -> bool:
        return bool(self.decisions) or self.end


@dataclass
class Folded:
    """The result of a catch-up: events folded in, and the outcomes still to publish, in offset order."""

    events: int = 0
    unpublished: list[Judged] = field(default_factory=list)


class PartitionState:
    """The engines of the cells in one events partition, and how far into the partition they are."""

    def __init__(self, partition: int, new_engine: Callable[[], Correlator], default_cell: str) -> None:
        self.partition = partition
        self.position = -1  # offset of the last record folded in; -1: none
        self._new_engine = new_engine
        self._default_cell = default_cell
        self._engines: dict[str, Correlator] = {}

    @property
    def engines(self) -> dict[str, Correlator]:
        """Cell -> engine (a snapshot: safe to iterate while records are judged)."""
        return dict(self._engines)

    def cell_of(self, key: bytes | None) -> str:
        return cell_of_key(key, self._default_cell)

    def engine(self, cell: str) -> Correlator:
        eng = self._engines.get(cell)
        if eng is None:
            eng = self._engines[cell] = self._new_engine()
        return eng

    def new_engine(self) -> Correlator:
        """A fresh engine as this partition makes them (held nowhere: a template for a restore)."""
        return self._new_engine()

    def judge(self, offset: int, key: bytes | None, events: Event | Sequence[Event]) -> Judged:
        """Fold in the record at ``offset`` (past :attr:`position`): its event, or its events in order
        (a batch; none: every one was bad); what they led to together."""
        self._check_past(offset)
        cell = self.cell_of(key)
        if isinstance(events, Event):
            events = (events,)
        engine = self.engine(cell)
        decisions: list[Decision] = []
        end = False
        for event in events:
            decisions += engine.process(event)
            end = end or (isinstance(event.body, EndOfCapture) and engine.replay)  # else refused, ends nothing
        self.position = offset
        return Judged(offset, cell, decisions, end)

    def skip(self, offset: int) -> None:
        """Move past a record that holds no usable event (it went to the dead letters)."""
        self._check_past(offset)
        self.position = offset

    def restore(self, engines: dict[str, Correlator], position: int) -> None:
        """Hold ``engines`` as the fold of the log up to ``position`` (a snapshot: :mod:`correlators.snapshots`)."""
        self._engines = dict(engines)
        self.position = position

    def fast_forward(self, offset: int) -> None:
        """Nothing below ``offset`` is left to read (retention deleted it, or gaps): the position moves there."""
        self.position = max(self.position, offset - 1)

    def _check_past(self, offset: int) -> None:
        if offset <= self.position:
            raise ValueError(f"partition {self.partition}: offset {offset} is already judged "
                             f"(position {self.position})")


class WorkerState:
    """Every partition state one worker holds, keyed by events partition."""

    def __init__(self) -> None:
        self._parts: dict[int, PartitionState] = {}

    def step(self, partition: int, offset: int) -> Step:
        """What to do with the record at ``offset`` of ``partition`` (see the module docstring)."""
        st = self._parts.get(partition)
        if st is None or offset > st.position + 1:
            return Step.CATCH_UP
        if offset <= st.position:
            return Step.SEEN
        return Step.JUDGE

    def get(self, partition: int) -> PartitionState:
        return self._parts[partition]

    def judged_upto(self, partition: int) -> int | None:
        """Offset of the last record of ``partition`` judged here (-1: none yet); None when no state is held."""
        st = self._parts.get(partition)
        return None if st is None else st.position

    def release(self, partition: int) -> PartitionState | None:
        """Take ``partition``'s state out (to catch it up elsewhere); None when none is held."""
        return self._parts.pop(partition, None)

    def install(self, state: PartitionState) -> None:
        """Hold ``state`` for its partition (replacing any other)."""
        self._parts[state.partition] = state

    def keep_only(self, partitions: Collection[int]) -> list[int]:
        """Drop the state of every partition not in ``partitions`` (revoked); the dropped ones."""
        dropped = sorted(p for p in self._parts if p not in partitions)
        for p in dropped:
            del self._parts[p]
        return dropped

    @property
    def partitions(self) -> list[int]:
        return sorted(self._parts)

    def engines(self) -> Iterator[Correlator]:
        """Every engine held (over a snapshot, so judging may go on between two steps)."""
        for st in list(self._parts.values()):
            yield from st.engines.values()


def decode_events(value: bytes) -> list[Event]:
    """The usable events of one record (:func:`streams.batch.decode_record`), the bad ones left out."""
    return decode_record(value).events


def fold(state: PartitionState, records: Iterable[tuple[int, bytes | None, bytes | None]], upto: int,
         decode: Callable[[bytes], Event | Sequence[Event]] = decode_events, after: int = -1,
         into: Folded | None = None) -> Folded:
    """Judge ``(offset, key, value)`` records past the position and below ``upto`` into ``state``.

    Records at or before the position are ignored; undecodable ones (and the bad events of a
    batch) are skipped: they went to the dead letters when first judged. The outcomes of records
    past ``after`` that say anything are collected for publishing, in order. Call it once per
    batch read (passing the same ``into``); once the log is read up to ``upto``,
    :meth:`PartitionState.fast_forward` to it (the last records may be gone, or be gaps).
    """
    out = into if into is not None else Folded()
    for offset, key, value in records:
        if offset >= upto or offset <= state.position:
            continue
        try:
            decoded = decode(value) if value is not None else None
        except ValueError:
            decoded = None
        events = (decoded,) if isinstance(decoded, Event) else decoded
        if not events:
            state.skip(offset)
            continue
        judged = state.judge(offset, key, events)
        out.events += len(events)
        if offset > after and judged.says_anything:
            out.unpublished.append(judged)
    return out
