"""One node's clock never moves the cell (#26, "time"): the rule of correlators/clock.py, then whole captures.

The unit tests drive :class:`~correlators.clock.CellClock` with fakes; the capture tests take a healthy
fleet (the builder's, and the public nccl capture cut before its fault), stamp ONE node's lines ahead or
behind -- by 1 s to 1 h, jumping for a window or drifting -- and require no incident and no command at all;
and the same node's real outage during its skew must still open ``node_down`` within the normal bound.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scenario_book import fleet

from common import metrics as m
from correlators.clock import CellClock, source_key
from correlators.engine import Correlator
from correlators.policy import load_policy
from correlators.state import STATE, EngineState
from correlators.worker.live import set_gauges
from faultline.outcome import decide_offline
from producers.capture.screen import Accepted, CaptureScreen
from streams.decisions import Incident
from tests.harness.shared import needs_shared, scenario

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
TOL = load_policy(None).timing.clock_skew_tolerance_s
TIMING = load_policy(None).timing
NCCL = scenario("nccl_network_timeout")


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


# --- the rule, with fakes ------------------------------------------------------------------------------
def test_one_source_is_the_clock() -> None:
    c = CellClock()
    clock = None
    for s in (0, 5, 3600, 3610):  # a tiny capture: nobody to outvote it, a gap is a gap
        clock, placed = c.arrive("n1|node_agent", at(s), clock, TOL)
        assert clock == placed == at(s)


def test_a_lone_node_far_ahead_moves_nothing_and_is_placed_at_the_cell_clock() -> None:
    c = CellClock()
    clock = None
    for s in range(0, 60, 5):
        for n in ("n1", "n2", "n3"):
            clock, _ = c.arrive(f"{n}|node_agent", at(s), clock, TOL)
    clock, placed = c.arrive("n2|node_agent", at(60 + 600), clock, TOL)
    assert clock == at(55) and placed == at(55)
    clock, placed = c.arrive("n2|nvml", at(61 + 600), clock, TOL)  # the same node's other source: same clock
    assert clock == at(55) and placed == at(55)
    assert c.sources["n2|node_agent"].skew_s == 605 and c.screened == 2
    clock, placed = c.arrive("n1|node_agent", at(60), clock, TOL)
    assert clock == at(60) and placed == at(60)
    clock, placed = c.arrive("n2|node_agent", at(65), clock, TOL)  # stepped back: its own time again
    assert placed == at(65) and c.sources["n2|node_agent"].mark == at(65)


def test_a_node_far_behind_is_placed_at_the_cell_clock_and_pulls_nothing_back() -> None:
    c = CellClock()
    clock = None
    for s in range(0, 60, 5):
        for n in ("n1", "n2", "n3"):
            clock, placed = c.arrive(f"{n}|node_agent", at(s - (3600 if n == "n3" else 0)), clock, TOL)
            if n == "n3" and s > 0:
                assert placed == clock
    assert clock == at(55)


def test_a_gap_the_whole_cell_crosses_is_followed_at_its_second_witness() -> None:
    c = CellClock()
    clock = None
    for n in ("n1", "n2", "n3"):
        clock, _ = c.arrive(f"{n}|node_agent", at(0), clock, TOL)
    clock, placed = c.arrive("n1|node_agent", at(3600), clock, TOL)
    assert clock == at(0) and placed == at(0)  # alone: not yet believed
    clock, placed = c.arrive("n2|node_agent", at(3601), clock, TOL)
    assert clock == at(3601) and placed == at(3601)


def test_without_a_periodic_source_the_newest_stamp_is_the_clock() -> None:
    """A scheduler and trainers only (the lemons' histories): hours between lines are a gap, never a skew."""
    c = CellClock()
    clock = None
    for k, t in (("scheduler", 0), ("n1|trainer", 600), ("n2|trainer", 600), ("n1|trainer", 1200),
                 ("scheduler", 4 * 3600), ("n1|trainer", 4 * 3600 + 600)):
        clock, placed = c.arrive(k, at(t), clock, TOL)
        assert clock == placed == at(t)


def test_a_quiet_voter_does_not_hold_the_clock_back() -> None:
    """n3 stops (its node is down): n1 and n2 go on, and the clock with them."""
    c = CellClock()
    clock = None
    for t in range(0, 600, 15):
        for n in ("n1", "n2", "n3") if t < 120 else ("n1", "n2"):
            clock, placed = c.arrive(f"{n}|node_agent", at(t), clock, TOL)
            assert placed == at(t)
    assert clock == at(585)


def test_unknown_sources_do_not_vote() -> None:
    c = CellClock()
    clock, _ = c.arrive("n1|node_agent", at(0), None, TOL)
    clock, placed = c.arrive(None, at(30 * 86400), clock, TOL)
    assert clock == at(0) and placed == at(0)


def test_live_a_stamp_far_ahead_of_the_wall_clock_is_screened_even_alone() -> None:
    """On the live path the wall clock bounds the vote: even a capture's one source cannot take the cell far
    past the time its line arrived at (Correlator.advance_to ticks it)."""
    engine = Correlator(load_policy(None))
    engine.advance_to(at(100))
    c = engine.state.sources
    clock, placed = c.arrive("n1|node_agent", at(100 + 600), engine.clock, TOL)
    assert clock == at(100 + TOL) and placed == clock and c.screened == 1
    c.tick(at(200))
    clock, placed = c.arrive("n1|node_agent", at(205), clock, TOL)
    assert clock == at(205) and placed == at(205)


def test_the_clock_state_is_a_snapshot() -> None:
    s = EngineState()
    clock = None
    for k, t in (("n1|node_agent", 0), ("scheduler", 1), ("n2|nvml", 900)):
        clock, _ = s.sources.arrive(k, at(t), clock, TOL)
    back = STATE.validate_json(STATE.dump_json(s))
    assert back.sources == s.sources
    assert back.sources.arrive("n3|kernel", at(2), clock, TOL) == s.sources.arrive("n3|kernel", at(2), clock, TOL)


@settings(max_examples=200, deadline=None)
@given(honest=st.integers(3, 8), rogue=st.lists(st.floats(-7200, 7200), min_size=1, max_size=40),
       every=st.sampled_from([1.0, 5.0, 15.0]))
@example(honest=3, rogue=[0.0, 600.0, 600.0, 0.0], every=15.0)
@example(honest=3, rogue=[31.0, 62.0, 93.0, 124.0, 155.0], every=15.0)  # drifting: the lead stays bounded
def test_no_single_node_moves_the_clock(honest: int, rogue: list[float], every: float) -> None:
    """Honest nodes in step plus one rogue node with any stamps: the clock never goes back, never leads the
    honest ones by more than the tolerance, keeps up with them, and every line is judged within the
    tolerance of the cell clock."""
    c = CellClock()
    clock: datetime | None = None
    for k in range(60):
        t = k * every
        for n in range(honest):
            prev = clock
            clock, placed = c.arrive(f"h{n}|node_agent", at(t + 0.01 * n), clock, TOL)
            assert prev is None or clock >= prev
            assert abs((placed - clock).total_seconds()) <= TOL
        off = rogue[k % len(rogue)]
        prev = clock
        clock, placed = c.arrive("rogue|node_agent", at(t + off), clock, TOL)
        assert prev is None or clock >= prev
        assert abs((placed - clock).total_seconds()) <= TOL
        assert clock is not None and (clock - at(t + 0.01 * honest)).total_seconds() <= TOL
        assert (clock - at(t)).total_seconds() >= -every  # the honest ones are followed


# --- whole captures -------------------------------------------------------------------------------------
Offset = Callable[[float], float]


def restamp(lines: Iterable[str], node: str, offset: Offset) -> list[str]:
    """``node``'s lines (all its sources) stamped ``offset(true time)`` seconds off; arrival order unchanged."""
    out = []
    for line in lines:
        d = json.loads(line)
        if d.get("node") == node and d.get("source") != "inventory":
            t = datetime.fromisoformat(d["ts"])
            d["ts"] = (t + timedelta(seconds=offset((t - T0).total_seconds()))).isoformat(timespec="milliseconds")
            line = json.dumps(d, separators=(",", ":"))
        out.append(line)
    return out


def jump(start: float, length: float, by: float) -> Offset:
    return lambda t: by if start <= t < start + length else 0.0


def drift(start: float, length: float, by: float) -> Offset:
    return lambda t: 0.0 if t < start else by * min(1.0, (t - start) / length)


def judged(lines: list[str], true_ts: list[float]) -> list[tuple[float, Incident]]:
    """Every incident the engine publishes, with the true time of the line that made it."""
    engine = Correlator(load_policy(None))
    out: list[tuple[float, Incident]] = []
    for v in CaptureScreen().screen(line.encode() for line in lines):
        if isinstance(v, Accepted):
            for e in v.events:
                out += [(true_ts[v.line - 1], d) for d in engine.process(e) if isinstance(d, Incident)]
    return out


NODES = ("n1", "n2", "n3", "n4")
DURATION = 1200.0


def healthy() -> list[str]:
    return fleet(*NODES, duration=DURATION).job("pt", list(NODES), interval=None).lines()


skews = st.tuples(
    st.sampled_from(NODES), st.sampled_from(["jump", "drift"]),
    st.floats(math.log(1.0), math.log(3600.0)).map(math.exp), st.sampled_from([1.0, -1.0]),
    st.floats(60.0, 900.0), st.floats(5.0, 600.0))


def offset_of(mode: str, start: float, length: float, by: float) -> Offset:
    return (jump if mode == "jump" else drift)(start, length, by)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skew=skews)
@example(skew=("n2", "jump", 600.5, 1.0, 240.0, 60.0))  # (+600 s exactly would re-send, byte for byte,
@example(skew=("n2", "jump", 3600.0, -1.0, 240.0, 300.0))  # the heartbeats it writes ten minutes later: the
@example(skew=("n3", "drift", 3600.0, 1.0, 100.0, 600.0))  # builder's carry nothing but node and ts, and
@example(skew=("n3", "drift", 3600.0, -1.0, 100.0, 600.0))  # the real ones would be dropped as duplicates)
@example(skew=("n1", "jump", 45.0, 1.0, 300.0, 600.0))
def test_one_node_skewed_on_a_healthy_fleet_opens_nothing(skew: tuple[str, str, float, float, float, float]) -> None:
    node, mode, size, sign, start, length = skew
    lines = restamp(healthy(), node, offset_of(mode, start, length, sign * size))
    out = decide_offline(lines)
    assert out["incidents"] == [] and out["commands"] == [], (skew, out["incidents"][:2])


def bound() -> float:
    """How long after a node's last heartbeat its node_down is published at the latest: its silence
    (``silence_min_s``; 3 x 15 s is less), the verdict's step (15 s), one more cadence for the last
    heartbeat, and the cell clock's lag behind the node (at most the tolerance)."""
    return TIMING.silence_min_s + 15 + 15 + TOL


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skew=skews, down=st.floats(0.0, 1.0))
@example(skew=("n2", "jump", 600.5, 1.0, 240.0, 120.0), down=0.5)
@example(skew=("n2", "jump", 3600.0, -1.0, 240.0, 300.0), down=0.5)
@example(skew=("n3", "drift", 3600.0, 1.0, 100.0, 600.0), down=0.9)
@example(skew=("n3", "drift", 29.0, 1.0, 100.0, 600.0), down=0.9)
def test_a_real_outage_of_the_skewed_node_is_still_found_in_time(
        skew: tuple[str, str, float, float, float, float], down: float) -> None:
    node, mode, size, sign, start, length = skew
    at_s = start + down * length
    cap = fleet(*NODES, duration=at_s + 400).job("pt", list(NODES), interval=None).silence(at_s, node)
    plain = cap.lines()
    true_ts = [(datetime.fromisoformat(json.loads(x)["ts"]) - T0).total_seconds() for x in plain]
    found = [(t, i) for t, i in judged(restamp(plain, node, offset_of(mode, start, length, sign * size)), true_ts)
             if i.category == "node_down" and i.culprit.node == node]
    assert found, (skew, at_s)
    assert found[0][0] <= at_s + bound(), (skew, at_s, found[0][0] - at_s)


def test_one_heartbeat_thirty_days_ahead_among_two_hundred_nodes() -> None:
    """Straight into the engine, as the worker takes events off the topic (the capture screen refuses
    such a line offline, producers/capture/clock.py; a producer publishing it live does not)."""
    nodes = [f"n{k:03d}" for k in range(200)]
    events = [e for v in CaptureScreen().screen(x.encode() for x in fleet(*nodes, duration=240, nvml=None).lines())
              if isinstance(v, Accepted) for e in v.events]
    k = next(i for i, e in enumerate(events) if e.node == "n007" and e.kind == "agent_heartbeat" and e.ts > at(120))
    events[k] = events[k].model_copy(update={"ts": events[k].ts + timedelta(days=30)})
    engine = Correlator(load_policy(None))
    decided = [d for e in events for d in engine.process(e)]
    assert decided == []
    assert engine.state.sources.screened == 1 and engine.state.sources.worst_skew_s > 29 * 86400

    class Held:  # the worker's cells (correlators.partitions.WorkerState), as set_gauges reads them
        def engines(self) -> Iterable[Correlator]:
            return [engine]

    set_gauges(Held())  # type: ignore[arg-type]
    assert m.CLOCK_SCREENED._value.get() == 1 and m.CLOCK_WORST_SKEW._value.get() > 29 * 86400


# --- the public case ------------------------------------------------------------------------------------
@needs_shared(NCCL)
def test_the_public_capture_with_one_node_ten_minutes_ahead_for_a_minute() -> None:
    """The issue's case: nccl_network_timeout cut at 03:12 (healthy), one node's lines 03:04-03:05 stamped
    +600 s (NTP stepping back, a bad RTC): no incident, no command -- for each node, and for other sizes."""
    lines = [x for x in NCCL.read_text().splitlines() if json.loads(x)["ts"] < "2026-04-22T03:12"]
    assert decide_offline(lines) == {**decide_offline(lines), "incidents": [], "commands": []}
    for node in ("n11", "n12", "n13", "n14"):
        for by in (600.0, -600.0, 3600.0):
            out = decide_offline(restamp(lines, node, jump(240, 60, by)))
            assert out["incidents"] == [] and out["commands"] == [], (node, by, out["incidents"][:1])


def test_source_keys() -> None:
    assert source_key("n1", "nvml") == "n1|nvml" and source_key(None, "scheduler") == "scheduler"
