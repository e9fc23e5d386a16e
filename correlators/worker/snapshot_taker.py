"""Taking a partition's snapshot at a record boundary, and writing it off the event loop.

The order of things after each judged record (:meth:`SnapshotTaker.after_record`):

1. The schedule counts the record's events (:class:`~correlators.snapshots.SnapshotSchedule`): is
   a snapshot of this partition due (every N events or T seconds)?
2. Not while a live tick's decisions are unacknowledged (``ticks_in_flight``): a snapshot must
   never hold a decision that is not on its topic. The record's own decisions are acknowledged
   already (the agent settles a record before it comes here), and the next record is not judged
   yet: this is a record boundary.
3. Not while this partition's previous snapshot is still being sealed or written: the schedule
   asks again after the next record.
4. Capture the state here, on the loop, where the state is mutated (``capture``: the part that
   must not race the next record).
5. The schedule counts afresh from now.
6. Seal and write it on the one writer thread (``submit``): one at a time, so a partition's
   snapshots reach the topic in the order they were taken. Too big, or refused by the broker: a
   warning, and the next one is tried later; nothing is ever raised into the agent.
7. When the write is over (done or failed), the partition may be snapshotted again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from correlators.partitions import PartitionState
from correlators.snapshots import SnapshotSchedule
from correlators.worker.ports import Clock

__all__ = ["Captured", "SnapshotTaker", "Submit"]

log = logging.getLogger("faultline.correlator")

#: Run a call on the one snapshot-writer thread; its future.
Submit = Callable[[Callable[[], None]], concurrent.futures.Future[None]]


@dataclass(frozen=True)
class Captured:
    """One partition's state as taken on the loop, not sealed yet."""

    partition: int
    position: int
    cells: list[str]
    body: bytes


class SnapshotTaker:
    """Decides when a partition is snapshotted, captures it on the loop, seals and writes it elsewhere."""

    def __init__(self, schedule: SnapshotSchedule, capture: Callable[[PartitionState], Captured],
                 seal: Callable[[Captured], bytes], write: Callable[[int, bytes], None], submit: Submit, *,
                 ticks_in_flight: Callable[[], bool], max_bytes: int, clock: Clock = time.monotonic) -> None:
        self._schedule = schedule
        self._capture = capture
        self._seal = seal
        self._write = write
        self._submit = submit
        self._ticks_in_flight = ticks_in_flight
        self._max_bytes = max_bytes
        self._clock = clock
        self._writing: set[int] = set()  # partitions with a snapshot being sealed or written

    def writing(self, partition: int) -> bool:
        return partition in self._writing

    def after_record(self, state: PartitionState, events: int = 1) -> bool:
        """Call after each judged record (of ``events``) is settled; whether a snapshot was taken (module
        docstring)."""
        part = state.partition
        if not self._schedule.due(part, self._clock(), events) or self._ticks_in_flight():  # 1, 2
            return False
        if part in self._writing:  # 3
            return False
        t0 = self._clock()
        captured = self._capture(state)  # 4
        capture_s = self._clock() - t0
        self._schedule.taken(part, self._clock())  # 5
        self._writing.add(part)
        fut = asyncio.wrap_future(self._submit(lambda: self._seal_and_write(captured, capture_s)))  # 6
        fut.add_done_callback(lambda f: self._written(part, f))
        return True

    def forget(self, partitions: Collection[int]) -> None:
        """Partitions no longer held (revoked): their schedule starts afresh if they come back."""
        self._schedule.forget(list(partitions))

    def _seal_and_write(self, captured: Captured, capture_s: float) -> None:
        """Seal and write one snapshot (off the loop); a failure is logged, the next one is tried later."""
        part, position = captured.partition, captured.position
        t0 = self._clock()
        try:
            blob = self._seal(captured)
            if len(blob) > self._max_bytes:
                log.warning("snapshot of partition %d at offset %d is %d bytes, over the %d the topic takes: not "
                            "written (a takeover replays more); split the cell or raise MAX_SNAPSHOT_BYTES",
                            part, position, len(blob), self._max_bytes)
                return
            self._write(part, blob)
            log.info("snapshot of partition %d at offset %d (%d cells): %d bytes (%d of JSON); %.3fs capturing on "
                     "the loop, %.3fs sealing and writing", part, position, len(captured.cells), len(blob),
                     len(captured.body), capture_s, self._clock() - t0)
        except Exception as exc:
            log.warning("snapshot of partition %d at offset %d not written (%s); the next one is tried after "
                        "%d more events", part, position, exc, self._schedule.every_events)

    def _written(self, part: int, fut: asyncio.Future[None]) -> None:
        """7. On the loop, once the write is over; anything that escaped it is logged, never lost."""
        self._writing.discard(part)
        if not fut.cancelled() and fut.exception() is not None:
            log.warning("snapshot of partition %d: the writer failed: %r", part, fut.exception())
