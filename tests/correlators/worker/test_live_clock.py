"""The live clock and the gauges without a broker: a tick publishes what the wall clock closes and holds
snapshots back until the broker acknowledged it, refused or not; the gauges count what is open."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from worker_fakes import FakeEmitted, FakeProducer, new_state, scenario_log

from common import metrics as m
from correlators.partitions import WorkerState
from correlators.worker.live import LiveClock, set_gauges
from correlators.worker.publisher import Publisher
from streams.events import Event

LOG = scenario_log()


def _held(upto: int) -> WorkerState:
    state = new_state()
    for offset, (key, value) in enumerate(LOG[:upto]):
        state.judge(offset, key, Event.model_validate_json(value))
    held = WorkerState()
    held.install(state)
    return held


async def test_a_tick_publishes_what_the_wall_clock_closes_and_is_in_flight_until_acknowledged() -> None:
    held = _held(40)
    producer = FakeProducer(auto_ack=False)
    live = LiveClock(held, Publisher(producer.send, FakeEmitted(), namespace="ns", keys=None,
                                     ttl=timedelta(hours=1), live_clock=True))
    engine = held.get(0).engine("default")
    assert engine.clock is not None
    later = engine.clock + timedelta(seconds=600)
    live._wall_clock = lambda: later
    assert not live.in_flight
    ticking = asyncio.create_task(live.tick())
    while not producer.pending:
        await asyncio.sleep(0)
    assert live.in_flight
    producer.acknowledge()
    await ticking
    assert not live.in_flight and producer.keys("incidents", "commands")
    assert engine.clock == later
    assert await asyncio.wait_for(live.tick(), 1) is None and len(producer.sent) == len(producer.keys(
        "incidents", "commands"))  # nothing more to close at the same time


async def test_a_refused_tick_is_no_longer_in_flight_and_raises() -> None:
    held = _held(40)
    producer = FakeProducer(auto_ack=False)
    live = LiveClock(held, Publisher(producer.send, FakeEmitted(), namespace="ns", keys=None,
                                     ttl=timedelta(hours=1), live_clock=False))
    engine = held.get(0).engine("default")
    assert engine.clock is not None
    later = engine.clock + timedelta(seconds=600)
    live._wall_clock = lambda: later
    ticking = asyncio.create_task(live.tick())
    while not producer.pending:
        await asyncio.sleep(0)
    producer.refuse()
    with pytest.raises(RuntimeError, match="refused"):
        await ticking
    assert not live.in_flight


def test_the_gauges_count_the_open_incidents_of_every_cell_held() -> None:
    held = _held(len(LOG))
    engine = held.get(0).engine("default")
    open_ = [i for i in engine.incidents.values() if i.state not in ("resolved", "closed")]
    set_gauges(held)
    assert open_
    for inc in open_:
        want = sum(1 for i in open_ if (i.category, i.severity) == (inc.category, inc.severity))
        assert m.INCIDENTS_OPEN.labels(inc.category, inc.severity)._value.get() == want
    assert engine.clock is not None
    assert m.EVENT_TIME.labels("correlator")._value.get() == engine.clock.timestamp()
