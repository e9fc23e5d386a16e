"""The snapshot taker without a broker: due by the schedule, never while a live tick is unacknowledged,
one write at a time per partition, captured at the record boundary, and a failed write never raised."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable

import pytest
from worker_fakes import ManualClock, new_state, scenario_log

from correlators.partitions import PartitionState
from correlators.snapshots import SnapshotSchedule
from correlators.worker.snapshot_taker import Captured, SnapshotTaker
from streams.events import Event

LOG = scenario_log()


class ManualWriter:
    """The one writer thread, run by hand: a submitted call waits until :meth:`run_next`."""

    def __init__(self) -> None:
        self.queue: list[tuple[Callable[[], None], concurrent.futures.Future[None]]] = []

    def submit(self, fn: Callable[[], None]) -> concurrent.futures.Future[None]:
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.queue.append((fn, fut))
        return fut

    async def run_next(self) -> None:
        fn, fut = self.queue.pop(0)
        try:
            fn()
            fut.set_result(None)
        except BaseException as exc:  # what escapes the call reaches the future
            fut.set_exception(exc)
        for _ in range(3):  # the done callback runs on the loop
            await asyncio.sleep(0)


class Rig:
    def __init__(self, every: int = 1, max_bytes: int = 1 << 20) -> None:
        self.clock = ManualClock()
        self.ticking = False
        self.writer = ManualWriter()
        self.written: list[tuple[int, bytes]] = []
        self.captured: list[int] = []
        self.fail_write: Exception | None = None
        self.taker = SnapshotTaker(SnapshotSchedule(every, 3600.0), self.capture, self.seal, self.write,
                                   self.writer.submit, ticks_in_flight=lambda: self.ticking, max_bytes=max_bytes,
                                   clock=self.clock)
        self.state = new_state()
        self.next = 0

    def capture(self, state: PartitionState) -> Captured:
        self.captured.append(state.position)
        return Captured(state.partition, state.position, sorted(state.engines), f"at {state.position}".encode())

    def seal(self, c: Captured) -> bytes:
        return b"sealed " + c.body

    def write(self, part: int, blob: bytes) -> None:
        if self.fail_write is not None:
            raise self.fail_write
        self.written.append((part, blob))

    def judge_one(self) -> bool:
        """Judge the next record, then ask the taker (as the agent does); whether one was taken."""
        key, value = LOG[self.next]
        self.state.judge(self.next, key, Event.model_validate_json(value))
        self.next += 1
        return self.taker.after_record(self.state)


async def test_no_snapshot_while_a_live_tick_is_unacknowledged() -> None:
    rig = Rig(every=3)
    assert [rig.judge_one(), rig.judge_one()] == [False, False]
    rig.ticking = True
    assert rig.judge_one() is False  # due, but a tick's decisions are not on their topic yet
    assert rig.captured == []
    rig.ticking = False
    assert rig.judge_one() is True  # still due (the schedule counted every record)
    assert rig.captured == [3]


async def test_one_write_at_a_time_and_in_the_order_taken() -> None:
    rig = Rig(every=1)
    assert rig.judge_one() is True
    assert rig.taker.writing(0)
    assert [rig.judge_one(), rig.judge_one()] == [False, False]  # the previous one is still being written
    await rig.writer.run_next()
    assert not rig.taker.writing(0) and rig.written == [(0, b"sealed at 0")]
    assert rig.judge_one() is True
    await rig.writer.run_next()
    assert rig.written == [(0, b"sealed at 0"), (0, b"sealed at 3")]


async def test_the_state_is_captured_at_the_record_boundary_not_when_it_is_written() -> None:
    rig = Rig(every=1)
    rig.judge_one()
    for _ in range(5):
        rig.judge_one()  # judged on while the first is waiting for the writer
    await rig.writer.run_next()
    assert rig.written == [(0, b"sealed at 0")]


async def test_a_failed_or_oversized_write_is_logged_and_the_partition_freed(caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig(every=1)
    rig.fail_write = RuntimeError("broker refused it")
    with caplog.at_level(logging.WARNING, logger="faultline.correlator"):
        assert rig.judge_one() is True
        await rig.writer.run_next()
        assert not rig.taker.writing(0)
        small = Rig(every=1, max_bytes=4)
        assert small.judge_one() is True
        await small.writer.run_next()
    assert small.written == [] and not small.taker.writing(0)
    assert "snapshot of partition 0 at offset 0 not written (broker refused it)" in caplog.text
    assert "over the 4 the topic takes: not written" in caplog.text
    rig.fail_write = None
    assert rig.judge_one() is True  # the next one is tried


async def test_revoked_partitions_are_counted_afresh() -> None:
    rig = Rig(every=2)
    assert rig.judge_one() is False
    rig.taker.forget([0])
    assert rig.judge_one() is False  # the count started again
    assert rig.judge_one() is True
