"""The publisher without a broker: ``emitted`` moves only after the broker acknowledged every record of an
offset, a refused acknowledgement leaves it where it was, and what was published is not published again."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from worker_fakes import FakeEmitted, FakeProducer, ManualClock, Timeline, judged_all, new_state, scenario_log

from common import metrics as m
from correlators.partitions import Judged, PartitionState
from correlators.worker.publisher import Publisher
from streams.decisions import Command, StreamEnd
from streams.events import Event
from streams.signing import SigningKeys, verify

NOW = datetime(2026, 4, 22, 3, 30, tzinfo=UTC)


def _publisher(producer: FakeProducer, emitted: FakeEmitted, **kw: object) -> Publisher:
    args: dict[str, object] = {"namespace": "ns", "keys": None, "ttl": timedelta(hours=1), "live_clock": False,
                               "wall_clock": lambda: NOW}
    args.update(kw)
    return Publisher(producer.send, emitted, **args)  # type: ignore[arg-type]


def _judged_with_decisions() -> tuple[PartitionState, Judged, list[Judged]]:
    """A state judged up to (and including) the first record that decides something, and that record."""
    log = scenario_log()
    state = new_state()
    every = []
    for offset, (key, value) in enumerate(log):
        judged = state.judge(offset, key, Event.model_validate_json(value))
        every.append(judged)
        if judged.decisions and any(isinstance(d, Command) for d in judged.decisions):
            return state, judged, every
    raise AssertionError("the scenario decides nothing")


async def test_emitted_is_written_only_after_every_record_of_the_offset_is_acknowledged() -> None:
    timeline = Timeline()
    producer, emitted = FakeProducer(timeline, auto_ack=False), FakeEmitted(timeline)
    pub = _publisher(producer, emitted)
    state, judged, _ = _judged_with_decisions()
    settling = asyncio.create_task(pub.settle(state, judged))
    while len(producer.sent) < len(judged.decisions):
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not settling.done() and "0" not in emitted  # sent, not acknowledged: emitted not written
    producer.acknowledge()
    await settling
    assert emitted["0"] == judged.offset
    sends = [i for i, e in enumerate(timeline) if e.startswith("send")]
    acks = [i for i, e in enumerate(timeline) if e.startswith("ack")]
    assert timeline.index(f"emitted 0={judged.offset}") > max(sends + acks)
    assert producer.keys("incidents", "commands") == [d.id for d in judged.decisions]  # each once, in order


async def test_a_refused_acknowledgement_does_not_advance_emitted() -> None:
    producer, emitted = FakeProducer(auto_ack=False), FakeEmitted()
    emitted["0"] = 3
    pub = _publisher(producer, emitted)
    state, judged, _ = _judged_with_decisions()
    settling = asyncio.create_task(pub.settle(state, judged))
    while len(producer.sent) < len(judged.decisions):
        await asyncio.sleep(0)
    producer.refuse()
    producer.acknowledge()
    with pytest.raises(RuntimeError, match="refused"):
        await settling
    assert emitted["0"] == 3


async def test_what_was_published_before_is_not_sent_again() -> None:
    producer, emitted = FakeProducer(), FakeEmitted()
    pub = _publisher(producer, emitted)
    state, judged, _ = _judged_with_decisions()
    emitted["0"] = judged.offset  # another worker published it
    await pub.settle(state, judged)
    assert producer.sent == []
    emitted["0"] = judged.offset - 1
    await pub.settle(state, judged)
    assert len(producer.sent) == len(judged.decisions)


async def test_a_record_that_says_nothing_leaves_emitted_alone() -> None:
    timeline = Timeline()
    producer, emitted = FakeProducer(timeline), FakeEmitted(timeline)
    pub = _publisher(producer, emitted)
    await pub.settle(new_state(), Judged(offset=5, cell="default", decisions=[]))
    assert timeline == []


async def test_a_capture_end_goes_to_control_after_its_decisions_and_then_emitted() -> None:
    timeline = Timeline()
    clock = ManualClock()
    producer, emitted = FakeProducer(timeline), FakeEmitted(timeline)
    pub = _publisher(producer, emitted, clock=clock)
    state, judged, _ = _judged_with_decisions()
    last = judged_all(scenario_log())[-1]
    assert last.end
    pub.capture_started(0)
    clock.advance(2.5)
    pub.capture_started(0)  # a later event of the same capture: the timer keeps its start
    await pub.settle(state, Judged(last.offset, last.cell, judged.decisions, end=True))
    assert producer.keys("incidents", "commands") == [d.id for d in judged.decisions]
    control = [s for s in producer.sent if s.suffix == "control"]
    assert len(control) == 1 and producer.sent[-1] is control[0]  # after every decision
    end = StreamEnd.model_validate_json(control[0].value)
    assert (end.events, end.seconds, end.cell, end.partition) == (last.offset + 1, 2.5, "default", 0)
    assert timeline[-2:] == ["ack control ns", f"emitted 0={last.offset}"]


async def test_the_hook_between_acknowledged_and_emitted_sees_emitted_unwritten() -> None:
    producer, emitted = FakeProducer(), FakeEmitted()
    seen: list[tuple[int, int, int]] = []

    async def hook(partition: int, offset: int) -> None:
        seen.append((partition, offset, emitted[str(partition)]))
        if len(seen) == 2:
            raise RuntimeError("crash between the acknowledgement and emitted")

    pub = _publisher(producer, emitted, on_acknowledged=hook)
    state, judged, _ = _judged_with_decisions()
    await pub.settle(state, judged)
    assert seen == [(0, judged.offset, -1)] and emitted["0"] == judged.offset
    emitted["0"] = judged.offset - 1
    with pytest.raises(RuntimeError, match="crash"):
        await pub.settle(state, judged)
    assert emitted["0"] == judged.offset - 1  # acknowledged, not recorded: a takeover publishes it again


async def test_commands_are_signed_and_counted() -> None:
    keys = SigningKeys.parse("k1:" + "s" * 32)
    producer, emitted = FakeProducer(), FakeEmitted()
    pub = _publisher(producer, emitted, keys=keys)
    state, judged, _ = _judged_with_decisions()
    commands = [d for d in judged.decisions if isinstance(d, Command)]
    issued = {c.type: m.COMMANDS_ISSUED.labels(c.type, str(c.requires_approval).lower())._value.get()
              for c in commands}
    out_before = m.RECORDS_OUT.labels("correlator", "commands")._value.get()
    await pub.settle(state, judged)
    sent = [Command.model_validate_json(s.value) for s in producer.sent if s.suffix == "commands"]
    assert [c.id for c in sent] == [c.id for c in commands]
    assert all(verify(c, keys, NOW) is None for c in sent)  # signed, now, and not expired
    assert all(verify(c, keys, NOW + timedelta(hours=2)) is not None for c in sent)  # the TTL
    assert m.RECORDS_OUT.labels("correlator", "commands")._value.get() == out_before + len(commands)
    for c in commands:
        assert m.COMMANDS_ISSUED.labels(c.type, str(c.requires_approval).lower())._value.get() >= issued[c.type] + 1
