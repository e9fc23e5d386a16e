"""The delivery watch without a broker: a record the consumer fetched but never handed over (Faust can lose
one around a rebalance) is fetched again once the agent has been idle a while -- the last record of a
capture included, which nothing else would bring back -- and nothing is fetched again while records flow."""

from __future__ import annotations

import logging

import pytest
from worker_fakes import JudgeRig, ManualClock, inline, new_state, scenario_log

from correlators.partitions import WorkerState
from correlators.worker.delivery_watch import DeliveryWatch
from streams.decisions import StreamEnd

LOG = scenario_log()


class FakeConsumer:
    """The Faust side: a fetch position per partition; fetched records go to the judge unless lost."""

    def __init__(self, rig: JudgeRig | None = None) -> None:
        self.rig = rig
        self.positions: dict[int, int] = {}
        self.lose: set[int] = set()  # offsets of partition 0 lost the next time they are fetched
        self.seeks: list[tuple[int, int]] = []
        self.asked = 0

    async def fetch(self, upto: int) -> None:
        assert self.rig is not None
        for offset in range(self.positions.get(0, 0), upto):
            self.positions[0] = offset + 1
            if offset in self.lose:
                self.lose.discard(offset)
                continue
            key, value = self.rig.log[offset]
            await self.rig.judge.on_record(0, offset, key, value)

    async def position(self, part: int) -> int | None:
        self.asked += 1
        return self.positions.get(part)

    async def seek(self, part: int, offset: int) -> None:
        self.seeks.append((part, offset))
        self.positions[part] = offset


def _watch(held: WorkerState, consumer: FakeConsumer, clock: ManualClock, *, idle: list[float] | None = None,
           ready: list[bool] | None = None, committed: dict[int, int] | None = None,
           asked_committed: list[list[int]] | None = None) -> DeliveryWatch:
    def read_committed(parts: list[int]) -> dict[int, int]:
        if asked_committed is not None:
            asked_committed.append(parts)
        return {p: (committed or {}).get(p, -1001) for p in parts}

    return DeliveryWatch(held, idle_for=lambda: (idle or [60.0])[0], ready=lambda: (ready or [True])[0],
                         position=consumer.position, seek=consumer.seek, committed=read_committed,
                         run_blocking=inline, grace_s=5.0, clock=clock)


async def test_the_last_record_of_a_capture_lost_by_the_consumer_is_fetched_again_and_judged(
        caplog: pytest.LogCaptureFixture) -> None:
    rig = JudgeRig(LOG)
    consumer = FakeConsumer(rig)
    watch = DeliveryWatch(rig.held, idle_for=rig.judge.idle_for, ready=lambda: True, position=consumer.position,
                          seek=consumer.seek, committed=lambda parts: {}, run_blocking=inline, grace_s=5.0,
                          clock=rig.clock)
    watch.on_assigned({0})
    end = len(LOG) - 1
    consumer.lose = {end}
    await consumer.fetch(len(LOG))  # every record fetched; the end marker never handed over
    assert consumer.positions[0] == len(LOG) and rig.held.get(0).position == end - 1
    assert await watch.check() == []  # records were flowing just now
    rig.clock.advance(5)
    with caplog.at_level(logging.WARNING, logger="faultline.correlator"):
        assert await watch.check() == [(0, end, len(LOG))]
    assert f"fetched up to offset {end} but handed over nothing past {end - 1}" in caplog.text
    await consumer.fetch(len(LOG))  # the consumer fetches from where it was sent back
    ends = [StreamEnd.model_validate_json(s.value) for s in rig.producer.sent if s.suffix == "control"]
    assert [e.events for e in ends] == [len(LOG)]
    rig.clock.advance(5)
    assert await watch.check() == []  # in order now


async def test_a_partition_without_state_is_compared_with_the_committed_offset() -> None:
    clock, consumer = ManualClock(), FakeConsumer()
    asked: list[list[int]] = []
    watch = _watch(WorkerState(), consumer, clock, committed={0: 120, 1: 40}, asked_committed=asked)
    watch.on_assigned({0, 1, 2})
    consumer.positions = {0: 120, 1: 41}  # 2: no position yet
    clock.advance(5)
    assert await watch.check() == [(1, 40, 41)]
    assert asked == [[0, 1]]
    consumer.positions[1] = 41  # fetched again, and lost again
    assert await watch.check() == [(1, 40, 41)]  # sent back again
    assert asked == [[0, 1], [1]]  # partition 0 was in order at that position: not asked about again
    consumer.positions[0] = 125
    await watch.check()
    assert asked[-1] == [0, 1]
    assert consumer.seeks == [(1, 40), (1, 40), (0, 120)]


async def test_a_state_held_is_compared_with_its_position() -> None:
    clock, consumer = ManualClock(), FakeConsumer()
    held = WorkerState()
    state = new_state(0)
    state.fast_forward(100)  # judged up to offset 99
    held.install(state)
    watch = _watch(held, consumer, clock)
    watch.on_assigned({0})
    clock.advance(5)
    consumer.positions = {0: 100}
    assert await watch.check() == []
    consumer.positions = {0: 103}
    assert await watch.check() == [(0, 100, 103)]
    assert consumer.seeks == [(0, 100)]


async def test_nothing_is_fetched_again_during_a_rebalance_just_after_one_or_while_records_flow() -> None:
    clock, consumer = ManualClock(), FakeConsumer()
    idle, ready = [60.0], [True]
    watch = _watch(WorkerState(), consumer, clock, idle=idle, ready=ready, committed={0: 10})
    consumer.positions = {0: 15}
    watch.on_assigned({0})
    assert await watch.check() == []  # assigned less than grace_s ago
    clock.advance(5)
    ready[0] = False
    assert await watch.check() == []  # rebalancing
    ready[0] = True
    idle[0] = 1.0
    assert await watch.check() == []  # the agent judged a record a second ago
    assert consumer.asked == 0
    idle[0] = 5.0
    assert await watch.check() == [(0, 10, 15)] and consumer.seeks == [(0, 10)]


async def test_a_check_that_fails_is_logged_and_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    clock, consumer = ManualClock(), FakeConsumer()

    def broken(parts: list[int]) -> dict[int, int]:
        raise TimeoutError("the broker is away")

    async def no_position(part: int) -> int | None:
        raise RuntimeError("not assigned")

    watch = DeliveryWatch(WorkerState(), idle_for=lambda: 60.0, ready=lambda: True, position=consumer.position,
                          seek=consumer.seek, committed=broken, run_blocking=inline, grace_s=5.0, clock=clock)
    watch.on_assigned({0})
    consumer.positions = {0: 3}
    clock.advance(5)
    with caplog.at_level(logging.WARNING, logger="faultline.correlator"):
        assert await watch.check() == []
    assert "could not check the consumer's fetch positions (TimeoutError('the broker is away'))" in caplog.text
    watch._position = no_position
    assert await watch.check() == [] and consumer.seeks == []
