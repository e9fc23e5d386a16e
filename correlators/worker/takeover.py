"""Taking a partition over: its state brought up to a record from the newest snapshot and the log.

A worker takes a partition over when it holds no state for it (a start, a crash elsewhere, a
rebalance) or when a record arrives past the next one it expects (another worker judged the
records between, or the consumer dropped some). The order of things (:meth:`Takeover.catch_up`):

1. The state is taken out of the worker's sight (the timers must not touch it while another
   thread folds records into it); a partition without one gets a new, empty state.
2. A new state starts from the partition's newest valid snapshot when snapshots are on
   (:class:`SnapshotLoader`, off the event loop); a refused or unreadable one is logged and the
   state rebuilt from the log start instead. A snapshot may cover records past the takeover
   point: they were judged and published before, so the agent skips them.
3. The log between the state's position and the takeover point is folded in (off the loop,
   :mod:`correlators.rebuild`): the outcomes past the last published offset and past the group's
   committed offset come back, nothing before them (a lost ``emitted`` changelog never
   republishes the whole log).
4. The state is handed back to the worker, then those outcomes are published in offset order
   (:meth:`Publisher.settle`: each acknowledged before ``emitted`` moves).
5. The offsets the consumer skipped (fetched, never handed over: it clears its buffers when it
   resumes after a rebalance) are acknowledged, or the group's committed offset would wait for
   them forever. Offsets below the committed one are ignored by the consumer, and so are those
   it already counts (:mod:`correlators.consumer_acks`: counted twice, they make its commits
   crawl one offset at a time).
6. One line says what was done (restored, rebuilt in full, or caught up) and how long it took.

One catch-up of a partition runs at a time: a second one (the agent's, while the live clock's
adoption below is still reading the log) waits for the first, then finds the state far enough
along and does nothing, or catches up only what is still missing.

Adoption (:meth:`Takeover.adopt`, with the live clock). A partition assigned to this worker is
otherwise taken over when its first record arrives; until then no state is held, so the clock
has nothing to advance, and what it would decide in a silence (a node gone quiet, a settle
window closing) waits for the next record -- or for ever. Adoption takes an assigned partition
without a state over up to the group's committed offset (the next record the consumer hands
over) at once. Everything below that offset was published by whoever committed it, so
adoption itself publishes nothing; the clock's tick then does. A failure raises before any state
is installed: the next attempt starts again.

A failure anywhere (the log unreadable within its bound, a publish refused) raises: the agent
exits, the supervisor restarts the worker, and the takeover is done again from the start.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from common import metrics as m
from correlators.partitions import Folded, PartitionState, WorkerState
from correlators.snapshots import Snapshot, SnapshotRefused, check_retained, restore
from correlators.worker.ports import Ack, Clock, RunBlocking, in_thread
from correlators.worker.publisher import Publisher

__all__ = ["Rebuild", "SnapshotLoader", "Takeover"]

log = logging.getLogger("faultline.correlator")

#: Fold ``state``'s partition from its position up to (not including) ``upto``; the outcomes past
#: ``after`` still to publish, and the group's committed offset (blocking: :func:`correlators.rebuild.rebuild`).
Rebuild = Callable[[PartitionState, int, int], tuple[Folded, int]]


class SnapshotLoader:
    """The newest valid snapshot of a partition, or None (and why, in the log). Blocking.

    In this order: read the partition's last record of the snapshot topic; open it (checked before
    anything in it is loaded, :func:`correlators.snapshots.open_snapshot`); refuse it when the events
    log no longer holds the records right after it, or never held its position (``log_range``: the
    partition's watermarks, :func:`correlators.snapshots.check_retained`). Any failure means None,
    logged and counted (``faultline_snapshots_refused_total{reason}``): the snapshot is an
    optimisation, and without it the rebuild is complete.
    """

    def __init__(self, read_latest: Callable[[int], bytes | None], open_blob: Callable[[bytes, int], Snapshot],
                 log_range: Callable[[int], tuple[int, int]], topic: str) -> None:
        self._read_latest = read_latest
        self._open = open_blob
        self._log_range = log_range
        self._topic = topic

    def __call__(self, part: int) -> Snapshot | None:
        try:
            blob = self._read_latest(part)
            if blob is None:
                return None
            snap = self._open(blob, part)
            check_retained(snap.position, *self._log_range(part))
            return snap
        except SnapshotRefused as exc:
            m.SNAPSHOTS_REFUSED.labels(exc.kind).inc()
            log.warning("snapshot of partition %d refused: %s; rebuilding it from the log start", part, exc)
        except Exception as exc:  # the snapshot is an optimisation: without it the rebuild is complete
            m.SNAPSHOTS_REFUSED.labels("unreadable").inc()
            log.warning("could not read the snapshot of partition %d from %s (%s); rebuilding it from the log "
                        "start", part, self._topic, exc)
        return None


class Takeover:
    """Brings a partition's state up to just before a record (see the module docstring for the order)."""

    def __init__(self, held: WorkerState, new_state: Callable[[int], PartitionState], publisher: Publisher,
                 rebuild: Rebuild, ack: Ack, *, load_snapshot: Callable[[int], Snapshot | None] | None,
                 committed: Callable[[list[int]], dict[int, int]] | None = None,
                 run_blocking: RunBlocking = in_thread, clock: Clock = time.monotonic) -> None:
        self._held = held
        self._committed = committed  # the group's committed offsets (blocking), for adoption
        self._locks: dict[int, asyncio.Lock] = {}
        self._new_state = new_state
        self._publisher = publisher
        self._rebuild = rebuild
        self._ack = ack
        self._load_snapshot = load_snapshot
        self._run_blocking = run_blocking
        self._clock = clock

    async def catch_up(self, part: int, offset: int) -> PartitionState:
        """``part``'s state up to just before ``offset``, with every outcome below it published.

        A new state may come out past ``offset`` (a snapshot newer than it): the caller skips
        the records it covers.
        """
        async with self._locks.setdefault(part, asyncio.Lock()):
            held = self._held.judged_upto(part)
            if held is not None and held + 1 >= offset:  # caught up meanwhile, by the one this waited for
                return self._held.get(part)
            return await self._catch_up(part, offset)

    async def adopt(self, part: int) -> PartitionState | None:
        """Take ``part`` over up to the group's committed offset now (module docstring); None when a state
        is held already or a catch-up of it is under way."""
        lock = self._locks.get(part)
        if self._committed is None or part in self._held.partitions or (lock is not None and lock.locked()):
            return None
        committed = await self._run_blocking(self._committed, [part])
        return await self.catch_up(part, max(committed.get(part, 0), 0))

    async def _catch_up(self, part: int, offset: int) -> PartitionState:
        state = self._held.release(part)  # 1. out of sight of the timers while another thread works on it
        fresh = state is None
        if state is None:
            state = self._new_state(part)
        start, t0 = state.position + 1, self._clock()
        restored = None
        if fresh and self._load_snapshot is not None:  # 2.
            restored = await self._run_blocking(self._load_snapshot, part)
            if restored is not None:
                restore(state, restored)
        folded, committed = (Folded(), -1) if offset == 0 else await self._run_blocking(  # 3.
            self._rebuild, state, offset, self._publisher.published_upto(part))
        self._held.install(state)  # 4.
        for judged in folded.unpublished:
            await self._publisher.settle(state, judged)
        self._ack(part, range(max(start, committed), offset))  # 5.
        self._report(part, state, fresh, restored, folded, start, offset, self._clock() - t0)  # 6.
        return state

    @staticmethod
    def _report(part: int, state: PartitionState, fresh: bool, restored: Snapshot | None, folded: Folded,
                start: int, offset: int, seconds: float) -> None:
        if restored is not None:
            log.warning("restored snapshot of partition %d at offset %d (%d cells); rebuilt %d later events in "
                        "%.2fs; published %d outcomes not published before", part, restored.position,
                        len(state.engines), folded.events, seconds, len(folded.unpublished))
        elif fresh and offset > 0:
            log.warning("rebuilt state from %d earlier events of partition %d (%d cells) in %.2fs; published %d "
                        "outcomes not published before", folded.events, part, len(state.engines), seconds,
                        len(folded.unpublished))
        elif not fresh:
            log.warning("caught up on offsets %d-%d of partition %d, which this worker had not seen (%d events, "
                        "%d outcomes published) in %.2fs", start, offset - 1, part, folded.events,
                        len(folded.unpublished), seconds)
