"""The correlator agent's body: one events record at a time, and the assignment it follows.

The order of things for one record (:meth:`RecordJudge.on_record`):

1. Where it stands (:meth:`~correlators.partitions.WorkerState.step`): at or before the state's
   position -- redelivered after a rebalance, judged (and published) here before: skipped.
2. No state for the partition, or records missing before this one: the takeover first
   (:class:`~correlators.worker.takeover.Takeover`), up to just before this record.
3. Covered by a restored snapshot (its position is past this record): skipped, it was judged
   and its decisions published before.
4. Counted in (``records_in``) and decoded (:func:`streams.batch.decode_record`: one event, or a
   batch of them). Every event that cannot be used goes to the dead letters alone, with its
   reason (counted in ``dead_letters``); so does every operator action no operator key signed
   for here (:func:`correlators.operator_trust.screen`), and every ``end_of_capture`` outside a
   replay namespace (:func:`correlators.capture_end.screen_ends`). A record with no usable event:
   the state moves past it; nothing else.
5. Its events are judged in order by its cell's engine and the record is settled
   (:meth:`~correlators.worker.publisher.Publisher.settle`: published, acknowledged, then
   ``emitted``) -- once per record, however many events it holds.
6. A snapshot if one is due (:class:`~correlators.worker.snapshot_taker.SnapshotTaker`): here the
   record's decisions are acknowledged and the next record is not judged yet.

A partition that is revoked is dropped (:meth:`RecordJudge.on_assigned`), so one assigned back
later is caught up from the log, never judged on stale state. The judge also knows when it last
finished a record (:meth:`RecordJudge.idle_for`), which the delivery watch
(:mod:`correlators.worker.delivery_watch`) needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

from common import metrics as m
from common.deadletters import dead_letter
from correlators.capture_end import screen_ends
from correlators.operator_trust import OperatorTrust, screen
from correlators.partitions import Step, WorkerState
from correlators.worker.ports import Clock
from correlators.worker.publisher import Publisher
from correlators.worker.snapshot_taker import SnapshotTaker
from correlators.worker.takeover import Takeover
from streams.batch import decode_record

__all__ = ["RecordJudge"]

log = logging.getLogger("faultline.correlator")


class RecordJudge:
    """Judges each events record of the partitions this worker holds (see the module docstring)."""

    def __init__(self, held: WorkerState, takeover: Takeover, publisher: Publisher,
                 snapshots: SnapshotTaker | None, *, topic: str, clock: Clock = time.monotonic,
                 operators: OperatorTrust | None = None, namespace: str | None = None) -> None:
        self._held = held
        self._takeover = takeover
        self._publisher = publisher
        self._snapshots = snapshots
        self._topic = topic
        self._clock = clock
        self._operators = operators if operators is not None else OperatorTrust()
        self._namespace = namespace  # where this worker runs; None: a capture may end (tests without one)
        self._in_count = m.RECORDS_IN.labels("correlator", "events")
        self._busy = False
        self._done_at = clock()

    def idle_for(self) -> float:
        """Seconds since the last record was finished; 0 while one is being judged."""
        return 0.0 if self._busy else self._clock() - self._done_at

    async def on_record(self, part: int, offset: int, key: bytes | None, value: bytes) -> None:
        self._busy = True
        try:
            await self._judge(part, offset, key, value)
        finally:
            self._busy = False
            self._done_at = self._clock()

    async def _judge(self, part: int, offset: int, key: bytes | None, value: bytes) -> None:
        step = self._held.step(part, offset)
        if step is Step.SEEN:  # 1.
            return
        state = await self._takeover.catch_up(part, offset) if step is Step.CATCH_UP else self._held.get(part)  # 2.
        if offset <= state.position:  # 3.
            return
        self._in_count.inc()  # 4.
        decoded = decode_record(value)
        events, refused = screen(decoded.events, self._operators)
        if self._namespace is not None:
            events, ends = screen_ends(events, self._namespace)
            refused += ends
        if not events:
            state.skip(offset)
        bad: list[tuple[str, bytes | str]] = [(b.reason, b.raw) for b in decoded.bad] + [(why, e.model_dump_json()) for e, why in refused]
        for reason, raw in bad:
            m.DEAD_LETTERS.labels("correlator").inc()
            dl = dead_letter("correlator", reason, raw)
            await self._publisher.send("deadletters", "correlator", dl.model_dump_json().encode())
        if not events:
            return
        self._publisher.capture_started(part)
        await self._publisher.settle(state, state.judge(offset, key, events))  # 5.
        if self._snapshots is not None:
            self._snapshots.after_record(state, len(decoded.events))  # 6.

    def on_assigned(self, partitions: Collection[int]) -> list[int]:
        """The consumer now holds ``partitions``: drop the state of every other one; the dropped ones."""
        dropped = self._held.keep_only(partitions)
        if self._snapshots is not None:
            self._snapshots.forget(dropped)
        log.warning("assigned events partitions %s of %s%s", sorted(partitions), self._topic,
                    f"; dropped the state of {dropped}" if dropped else "")
        return dropped
