"""One node's clock never moves the cell (#26, "time"): the rule of correlators/clock.py, then whole captures.

The unit tests drive :class:`~correlators.clock.CellClock` with fakes; the capture tests take a healthy
fleet (the builder's, and the public nccl capture cut before its fault), stamp ONE node's lines ahead or
behind -- by 1 s to 1 h, jumping for a window or drifting -- and require no incident and no command at all;
and the same node's real outage during its skew must still open ``node_down`` within the normal bound.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
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
from tests.harness.skew import Offset, drift, jump, restamp

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


def test_when_every_other_voter_stops_the_survivors_clock_is_followed_within_three_of_its_lines() -> None:
    """A small cell: two agents and the scheduler; n1 and the scheduler stop. Nobody is ahead of anybody: the
    others are gone, so the survivor's third line retires them and its time is the cell's again. (A fleet of two
    nodes whose second died was frozen at the dead node's last heartbeat, every later line of the survivor
    placed there, the survivor judged silent and its XID fenced minutes early: the fleet invariants' find.)"""
    c = CellClock()
    clock, _ = c.arrive("scheduler", at(10), None, TOL)
    for s in (0, 60):
        for n, off in (("n1", 1.0), ("n2", 4.7)):
            clock, _ = c.arrive(f"{n}|node_agent", at(s + off), clock, TOL)
    placed = []
    for s in (120, 180, 240, 300, 360):  # n1 and the scheduler said nothing more
        clock, at_ = c.arrive("n2|node_agent", at(s + 4.7), clock, TOL)
        placed.append((at_ - at(s + 4.7)).total_seconds())
    assert placed[2:] == [0.0, 0.0, 0.0] and clock == at(364.7)  # at the latest from its third line on
    assert c.screened <= 2


def test_a_rogue_that_goes_on_speaking_in_turn_stays_live_and_outvoted() -> None:
    """The other side of the same rule: a node ten minutes ahead that keeps speaking in turn with the others is no
    dead voter, whatever its stamps: it is outvoted for as long as it stays ahead."""
    c = CellClock()
    clock = None
    for s in range(0, 1200, 30):
        for n in ("n1", "n2", "n3", "n4"):
            clock, placed = c.arrive(f"{n}|node_agent", at(s + (600 if n == "n2" and s >= 300 else 0)), clock, TOL)
            assert clock == at(s)
            if n == "n2" and s >= 300:
                assert placed == at(s)  # judged where it arrived on the cell's clock


@settings(max_examples=50, deadline=None)
@given(kind=st.sampled_from(["nvml", "trainer", "kernel", "framework"]), lead=st.floats(20.0, 3600.0),
       nodes=st.integers(2, 12), every=st.sampled_from([10.0, 30.0, 60.0]), other=st.sampled_from([3.0, 7.0, 20.0]))
@example(kind="nvml", lead=45.0, nodes=12, every=30.0, other=20.0)  # a soak's find: NVML ahead on every node
@example(kind="trainer", lead=45.0, nodes=2, every=60.0, other=10.0)  # two nodes, both trainers ahead
@example(kind="nvml", lead=20.0, nodes=2, every=10.0, other=20.0)
def test_a_source_kind_ahead_on_every_node_moves_the_clock_no_further_than_the_reach(
        kind: str, lead: float, nodes: int, every: float, other: float) -> None:
    """One kind of source runs ``lead`` seconds ahead on every node (a collector with a clock of its own): the
    nodes agree with each other, so no vote between nodes can see it; but only the agents vote, and no stamp moves
    the clock past their vote by more than the reach (one cadence of theirs, half the tolerance more). Whatever
    lies beyond that is screened."""
    c = CellClock()
    clock: datetime | None = None
    arrivals = sorted([(t, f"n{n}|node_agent", 0.0) for n in range(nodes) for t in _times(every, n)]
                      + [(t + 1, f"n{n}|{kind}", lead) for n in range(nodes) for t in _times(other, n)])
    before = 0.0  # the clock's lead over true time at the line before
    for t, key, off in arrivals:
        clock, placed = c.arrive(key, at(t + off), clock, TOL)
        assert clock is not None
        lead = (clock - at(t)).total_seconds()
        assert lead <= max(c.reach(TOL).total_seconds(), before), (key, t)  # no stamp grows it past the reach
        before = lead
        if off and lead > every + c.reach(TOL).total_seconds() and t > 2 * every:
            assert placed <= clock  # screened: judged at the cell's clock
    assert c.reach(TOL).total_seconds() == max(TOL, every + TOL / 2)


def _times(every: float, n: int, until: float = 600.0) -> list[float]:
    """One source's arrival times: ``every`` seconds apart, node ``n``'s phase its own."""
    return [k * every + (n * 0.37) % every for k in range(int(until / every))]


def test_an_honest_source_between_heartbeats_is_judged_at_its_own_time() -> None:
    """A trainer stepping every 5 s between heartbeats 60 s apart is up to a cadence past the agents' vote: it
    moves the clock to its own stamps and is never screened; nor is a heartbeat delivered late."""
    c = CellClock()
    clock: datetime | None = None
    for t in range(0, 600, 5):
        if t % 60 == 0:
            for n in ("n1", "n2", "n3"):
                clock, placed = c.arrive(f"{n}|node_agent", at(t + 0.5), clock, TOL)
        clock, placed = c.arrive("n1|trainer", at(t + 1), clock, TOL)
        assert placed == clock == at(t + 1)
    clock, placed = c.arrive("n1|node_agent", at(500), clock, TOL)  # late: an old heartbeat, delivered now
    assert placed == at(500) and c.screened == 0


def test_a_source_behind_the_cell_within_the_tolerance_lags_and_one_late_line_does_not() -> None:
    """A trainer 20 s slow is never screened (within the tolerance) but arrives behind the clock the agents keep:
    it lags the cell (:meth:`CellClock.lags`), so when the cell heard of its saves dates them. A trainer in step
    does not lag, nor does it when one of its lines (a failed write reported late) arrives 20 s late."""
    c = CellClock()
    clock: datetime | None = None
    for t in range(0, 300, 10):
        for n in ("n1", "n2", "n3"):
            clock, _ = c.arrive(f"{n}|node_agent", at(t + 0.1 * int(n[1])), clock, TOL)
        clock, placed = c.arrive("n1|trainer", at(t + 5 - 20), clock, TOL)
        assert placed == at(t - 15)  # judged at its stamp: within the tolerance
        clock, _ = c.arrive("n2|trainer", at(t + 5), clock, TOL)
        if t == 150:
            clock, _ = c.arrive("n2|trainer", at(t - 15), clock, TOL)
    assert c.screened == 0
    assert c.lags("n1|trainer") and not c.lags("n2|trainer") and not c.lags("n1|node_agent")
    assert not c.lags("n9|trainer") and not c.lags(None)


def test_a_source_ahead_of_the_cell_is_screened_now_and_a_voter_in_step_is_not() -> None:
    """A trainer 10 minutes ahead is screened: its line is judged where it arrived (:meth:`CellClock.screened_now`
    says so of the line that came last, so its save is also dated by when the cell heard of it)."""
    c = CellClock()
    clock: datetime | None = None
    for t in range(0, 300, 10):
        for n in ("n1", "n2", "n3"):
            clock, _ = c.arrive(f"{n}|node_agent", at(t + 0.1 * int(n[1])), clock, TOL)
        clock, placed = c.arrive("n1|trainer", at(t + 600), clock, TOL)
        assert c.screened_now("n1|trainer") and placed != at(t + 600)
        assert not c.screened_now("n1|node_agent")
    assert not c.screened_now("n9|trainer") and not c.screened_now(None)


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
    honest ones by more than the reach (the tolerance, once their cadence is known), keeps up with them, and
    every line is judged within the reach of the cell clock, or at the voters' time when screened."""
    c = CellClock()
    clock: datetime | None = None
    before = 0.0  # the clock's lead over the honest nodes after the round before
    for k in range(60):
        t = k * every
        for n in range(honest):
            prev = clock
            clock, placed = c.arrive(f"h{n}|node_agent", at(t + 0.01 * n), clock, TOL)
            assert prev is None or clock >= prev
            assert abs(placed - clock) <= c.reach(TOL)
        off = rogue[k % len(rogue)]
        prev, newest = clock, c.sources.get("rogue|node_agent")
        clock, placed = c.arrive("rogue|node_agent", at(t + off), clock, TOL)
        assert prev is None or clock >= prev
        late = newest is not None and at(t + off) < newest.mark  # behind its own newest: judged at its own time
        # in step; screened, judged at the voters' time; or late, judged at its own
        assert abs(placed - clock) <= c.reach(TOL) or placed == c.vote or (late and placed == at(t + off))
        assert clock is not None
        lead = (clock - at(t + 0.01 * honest)).total_seconds()
        assert lead <= max(c.reach(TOL).total_seconds(), before - every) + 1e-6  # no stamp grows it past the reach
        before = lead
        assert (clock - at(t)).total_seconds() >= -every  # the honest ones are followed


# --- whole captures -------------------------------------------------------------------------------------
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
@example(skew=("n1", "drift", 244.69193226422038, -1.0, 60.0, 245.0))  # its clock stops: NVML's cadence was its
@example(skew=("n1", "drift", 90.01713130052181, -1.0, 60.0, 246.0))  # milliseconds, a power domain "lost together"
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
@example(skew=("n4", "jump", 23.413935434552233, 1.0, 550.5527154482372, 198.9008115581408),  # 121.8 s after the
         down=0.8477)  # outage, 76.8 s unskewed: past the fixed bound of 120 s this test held before
def test_a_real_outage_of_the_skewed_node_is_still_found_in_time(
        skew: tuple[str, str, float, float, float, float], down: float) -> None:
    node, mode, size, sign, start, length = skew
    at_s = start + down * length
    cap = fleet(*NODES, duration=at_s + 400).job("pt", list(NODES), interval=None).silence(at_s, node)
    plain = cap.lines()
    true_ts = [(datetime.fromisoformat(json.loads(x)["ts"]) - T0).total_seconds() for x in plain]
    found = [(t, i) for t, i in judged(restamp(plain, node, offset_of(mode, start, length, sign * size)), true_ts)
             if i.category == "node_down" and i.culprit.node == node]
    unskewed = [t for t, i in judged(plain, true_ts) if i.category == "node_down" and i.culprit.node == node]
    assert found and unskewed, (skew, at_s)
    # later than the same outage unskewed by no more than twice the node's lead within the tolerance: the lead is in
    # its last heartbeat and in the longest recent gap that times the verdict (state.Heartbeat.judge_step); a lead
    # past the tolerance is screened, its heartbeats placed on the cell's clock
    assert found[0][0] <= unskewed[0] + 2 * TOL, (skew, at_s, found[0][0] - at_s, unskewed[0] - at_s)
    assert unskewed[0] <= at_s + bound(), (at_s, unskewed[0] - at_s)


def test_one_heartbeat_thirty_days_ahead_among_two_hundred_nodes() -> None:
    """Straight into the engine, as the worker takes events off the topic (the capture screen refuses
    such a line offline, producers/capture/clock.py; a producer publishing it live does not)."""
    nodes = [f"n{k:03d}" for k in range(200)]
    events = [e for v in CaptureScreen().screen(x.encode() for x in fleet(*nodes, duration=240, nvml=None).lines())
              if isinstance(v, Accepted) for e in v.events]
    k = next(i for i, e in enumerate(events) if e.node == "n007" and e.kind == "agent_heartbeat" and e.ts > at(120))
    events[k] = events[k].model_copy(update={"ts": events[k].ts + timedelta(days=30)})
    engine = Correlator(load_policy(None))

    class Held:  # the worker's cells (correlators.partitions.WorkerState), as set_gauges reads them
        def engines(self) -> Iterable[Correlator]:
            return [engine]

    decided = [d for e in events[:k + 1] for d in engine.process(e)]
    set_gauges(Held())  # type: ignore[arg-type]
    assert m.CLOCK_SOURCE_SKEW.labels("n007", "node_agent")._value.get() > 29 * 86400  # the alert's series
    decided += [d for e in events[k + 1:] for d in engine.process(e)]
    assert decided == []
    assert engine.state.sources.screened == 1 and engine.state.sources.worst_skew_s > 29 * 86400
    set_gauges(Held())  # type: ignore[arg-type]
    assert m.CLOCK_SCREENED._value.get() == 1 and m.CLOCK_WORST_SKEW._value.get() > 29 * 86400
    assert engine.state.sources.skewed() == []  # its later heartbeats in step: the series is gone


def test_a_source_in_step_again_loses_its_skew_series() -> None:
    """The per-source series names who is skewed *now*: flagged ahead of its agent, or screened lately; never
    more than 20; once its clock steps back in step and the live window passes, it is gone (the alert resolves)."""
    c = CellClock()
    clock = None
    for k in range(60):
        ahead = 45.0 if k < 30 else 0.0  # every node's NVML 45 s ahead for five minutes, then in step
        for n in range(25):
            clock, _ = c.arrive(f"n{n}|node_agent", at(k * 10 + n * 0.01), clock, TOL)
            clock, _ = c.arrive(f"n{n}|nvml", at(k * 10 + 5 + n * 0.01 + ahead), clock, TOL)
        if k == 29:
            assert len(c.skewed()) == 20 and all(40 < v < 60 for _, v in c.skewed())  # 45 s, and the agents' lag
    assert c.skewed() == []
    m.set_source_skews({("n1", "nvml"): 45.0})
    m.set_source_skews({})
    assert ("n1", "nvml") not in {tuple(s.labels.values()) for s in m.CLOCK_SOURCE_SKEW.collect()[0].samples}


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
