"""The engine's dispatch tables: every event kind of the contract is judged by one rule set or ignored for a
stated reason, every timer armed anywhere has a handler, and the rule sets keep nothing of their own."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import pytest

import correlators.engine as engine_module
from correlators.engine import CONTROL, IGNORED, Correlator, _tables
from correlators.lifecycle import IncidentLifecycle
from correlators.planner import Planner
from correlators.policy import Policy, load_policy
from correlators.rules.base import EventHandler, OnTimer
from correlators.state import EngineState
from correlators.timers import TimerName, TimerQueue
from streams import events as ev

POLICY = load_policy(None)
CORRELATORS = Path(__file__).resolve().parents[2] / "correlators"
T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _body_kinds() -> list[str]:
    """Every ``kind`` of the Body union, read from the models themselves."""
    union, _field = get_args(ev.Body)
    return [model.model_fields["kind"].default for model in get_args(union)]


def test_every_event_kind_is_judged_or_ignored_for_a_reason_none_silently() -> None:
    eng = Correlator(POLICY)
    kinds = _body_kinds()
    assert len(kinds) == len(set(kinds)) and "trainer_heartbeat" in kinds
    for kind in kinds:
        homes = [kind in eng.handlers, kind in IGNORED, kind in CONTROL]
        assert homes.count(True) == 1, f"{kind}: handled {homes[0]}, ignored {homes[1]}, control {homes[2]}"
    assert set(eng.handlers) | set(IGNORED) | set(CONTROL) == set(kinds)
    assert all(len(why) > 30 for why in {**IGNORED, **CONTROL}.values()), "say why a kind is not judged"
    # each handled kind belongs to exactly one rule set
    claimed = [k for rules in eng.rule_sets for k in rules.event_handlers()]
    assert sorted(claimed) == sorted(eng.handlers)


def _armed_timer_names() -> list[tuple[str, int, str | None]]:
    """(file, line, name) of every ``.arm(...)``/``.arm_after(...)`` call in the correlator's source."""
    out = []
    for path in sorted(CORRELATORS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("arm", "arm_after") and node.args:
                first = node.args[0]
                name = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
                out.append((path.name, node.lineno, name))
    return out


def test_every_timer_armed_anywhere_has_one_handler() -> None:
    eng = Correlator(POLICY)
    armed = [(f, line, name) for f, line, name in _armed_timer_names() if f != "timers.py"]
    assert armed, "no timer found: the scan is broken"
    not_literal = [(f, line) for f, line, name in armed if name is None]
    assert not not_literal, f"timer names must be literals (declared in TimerName): {not_literal}"
    names = {name for _, _, name in armed}
    assert names <= set(eng.on_timer), f"armed without a handler: {names - set(eng.on_timer)}"
    assert names == set(get_args(TimerName)), f"declared but never armed: {set(get_args(TimerName)) - names}"
    claimed = [n for rules in eng.rule_sets for n in rules.timer_handlers()]
    assert sorted(claimed) == sorted(eng.on_timer)
    # the end of a capture flushes exactly the timers that decide on evidence already seen
    assert {n for n, on in eng.on_timer.items() if on.at_end} == {"fence", "settle", "judge", "psu_check",
                                                                   "confirm", "tell", "hold_write"}


class _Claims:
    def __init__(self, kinds: Mapping[str, EventHandler], timers: Mapping[TimerName, OnTimer]) -> None:
        self.kinds, self.timer_map = kinds, timers

    def event_handlers(self) -> Mapping[str, EventHandler]:
        return self.kinds

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        return self.timer_map


def test_an_engine_with_a_kind_or_timer_unhandled_or_claimed_twice_is_not_built() -> None:
    rule_sets = list(Correlator(POLICY).rule_sets)
    _tables(rule_sets)  # the real ones build
    with pytest.raises(ValueError, match="claimed twice"):
        _tables([*rule_sets, _Claims({"xid": lambda e, b: None}, {})])
    with pytest.raises(ValueError, match="claimed twice"):
        _tables([*rule_sets, _Claims({}, {"fence": OnTimer(lambda k, d: None, at_end=True)})])
    with pytest.raises(ValueError, match="claimed twice"):
        _tables([*rule_sets, _Claims({"node_state": lambda e, b: None}, {})])  # ignored, then judged?
    without_training = [r for r in rule_sets if type(r).__name__ != "TrainingRules"]
    with pytest.raises(ValueError, match=r"without a handler.*'trainer_heartbeat'"):
        _tables(without_training)
    with pytest.raises(ValueError, match="not in streams.events.Body"):
        _tables([*rule_sets, _Claims({"telepathy": lambda e, b: None}, {})])


def test_a_new_event_kind_without_a_rule_stops_every_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "contract_kinds", lambda: (*_body_kinds(), "gpu_on_fire"))
    with pytest.raises(ValueError, match="gpu_on_fire"):
        Correlator(POLICY)


def _event(kind_body: ev.TrainerHeartbeat | ev.NodeState, **kw: object) -> ev.Event:
    return ev.Event(id=f"e-{kw.get('ts', T0)}-{kind_body.kind}", ts=kw.pop("ts", T0), source="test",
                    body=kind_body, **kw)  # type: ignore[arg-type]


def test_a_trainer_heartbeat_says_the_trainer_is_alive() -> None:
    eng = Correlator(POLICY)
    assert eng.process(_event(ev.TrainerHeartbeat(), job="pt", ts=T0)) == []
    assert eng.state.progress["pt"].heartbeat_ts == T0
    later = T0.replace(minute=5)
    eng.process(_event(ev.TrainerHeartbeat(), job="pt", ts=later))
    eng.process(_event(ev.TrainerHeartbeat(), job="pt", ts=T0.replace(minute=1)))  # arrives late: the newest stays
    assert eng.state.progress["pt"].heartbeat_ts == later and eng.clock == later
    eng.process(_event(ev.TrainerHeartbeat(), ts=later.replace(minute=6)))  # no job: nothing to attach it to
    assert list(eng.state.progress) == ["pt"]


def test_an_ignored_kind_moves_the_clock_and_nothing_else() -> None:
    eng = Correlator(POLICY)
    eng.process(_event(ev.NodeState(ready=False), node="n1", ts=T0))
    fresh = EngineState()
    assert eng.clock == T0 and eng.state.topology == fresh.topology and eng.state.incidents == {}


def test_rule_sets_keep_nothing_of_their_own() -> None:
    """Whatever a rule must remember is state (a snapshot carries it); a rule set holds only references to
    the state, the policy, the outbox and its collaborators, and so do the lifecycle and the planner."""
    eng = Correlator(POLICY)
    s = eng.state
    rule_sets = list(eng.rule_sets)
    lifecycles = {id(v) for r in rule_sets for v in vars(r).values() if isinstance(v, IncidentLifecycle)}
    planners = {id(v) for r in rule_sets for v in vars(r).values() if isinstance(v, Planner)}
    assert len(lifecycles) == 1 and len(planners) == 1, "one lifecycle and one planner, shared"
    allowed = {id(s), id(s.timers), id(eng._out), *map(id, rule_sets), *lifecycles, *planners}

    def check(owner: object) -> None:
        for name, value in vars(owner).items():
            if (isinstance(value, Policy) and value is POLICY) or value is eng.operators:  # configuration, frozen
                continue
            assert id(value) in allowed, f"{type(owner).__name__}.{name} is {type(value).__name__}, not shared"

    for r in rule_sets:
        check(r)
    life = next(v for v in vars(rule_sets[0]).values() if isinstance(v, IncidentLifecycle))
    check(life)
    plan = next(v for r in rule_sets for v in vars(r).values() if isinstance(v, Planner))
    assert (plan.policy, plan.topo, plan.ledger, plan.hardware_work) == (POLICY, s.topology, s.ledger,
                                                                         s.hardware_work)
    assert plan.topo is s.topology and plan.ledger is s.ledger and plan.hardware_work is s.hardware_work
    assert isinstance(s.timers, TimerQueue)
