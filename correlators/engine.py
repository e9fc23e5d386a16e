"""The correlator: typed events in, incidents and commands out, time passed in.

Pure logic, no I/O: the Faust agent, ``faultline replay`` and the tests all
drive the same :class:`Correlator`. Time is event time: the clock only moves
with the observations, and timers (debounce, settle, silence, hang, staleness)
fire as it passes them, so a three-day capture replays in seconds and gives the
same answer every run. Which time: the sources vote it (:mod:`correlators.clock`), so one node whose
clock is wrong moves nothing; its lines are judged at the cell's clock instead.

How it is put together. Everything the engine remembers is one
:class:`~correlators.state.EngineState` -- plain typed data, which is exactly
what a snapshot serialises (:mod:`correlators.snapshots`). The rules are rule
sets over that state (:mod:`correlators.rules`: scheduler, liveness, hardware,
training, recovery, verification, placement, operator, lemons), composed here, never inherited: each is given
the state (:class:`~correlators.rules.base.RuleContext`) and the collaborators
it needs -- the incident lifecycle (:mod:`correlators.lifecycle`), the planner
(:mod:`correlators.planner`), another rule set -- and declares the event kinds
and timer names it handles. From those declarations the engine builds two
explicit tables, ``handlers`` (kind -> handler) and ``on_timer`` (timer name
-> handler), and refuses to be built unless every event kind of the contract
(:data:`streams.events.Body`) is handled exactly once, deliberately ignored
(:data:`IGNORED`, with the reason) or the engine's own control
(:data:`CONTROL`), and every timer name (:data:`~correlators.timers.TimerName`)
has exactly one handler.

How to add a rule:

* **On an event kind already judged** -- find its rule set in ``handlers``
  and add the rule there; what it must remember goes in the state (below).
* **A new concern** -- a rule set of its own in ``correlators/rules/<name>.py``:
  a class taking the :class:`~correlators.rules.base.RuleContext` and its
  collaborators, with ``event_handlers()`` and ``timer_handlers()``; build it in
  :meth:`Correlator.__init__` and add it to ``rule_sets``. It keeps nothing on
  itself between events (a snapshot would lose it).
* **A new event kind** -- its body model in :mod:`streams.events` (in ``Body``);
  until a rule set handles it or :data:`IGNORED` says why not, no engine builds
  and every test fails.
* **A timer** -- its name in :data:`~correlators.timers.TimerName`, its handler
  in the rule set's ``timer_handlers()`` (``at_end``: whether it still fires when
  a capture ends, i.e. it decides on evidence already seen).
* **State** -- a field with a default on :class:`~correlators.state.EngineState`
  (or the record it belongs to), in a JSON-friendly shape (see
  :mod:`correlators.state`). Containers of the state are mutated in place,
  never rebound: the rule sets and the planner hold them. Snapshots follow the
  schema on their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import cache
from typing import get_args

from correlators.clock import source_key
from correlators.incident_state import OpenIncident
from correlators.lifecycle import IncidentLifecycle
from correlators.operator_trust import OperatorTrust
from correlators.planner import Planner
from correlators.policy import Policy
from correlators.quarantine_ledger import QuarantineLedger
from correlators.rules.base import EventHandler, OnTimer, RuleContext, RuleSet
from correlators.rules.hardware import HardwareRules
from correlators.rules.held_writes import HeldWrites
from correlators.rules.lemons import LemonRules
from correlators.rules.liveness import LivenessRules
from correlators.rules.operator import OperatorRules
from correlators.rules.placement import PlacementRules
from correlators.rules.recovery import RecoveryRules
from correlators.rules.scheduler import SchedulerRules
from correlators.rules.training import TrainingRules
from correlators.rules.verification import VerificationRules
from correlators.state import Decision, EngineState
from correlators.timers import TimerKey, TimerName
from streams import events as ev
from streams.event_identity import identity

__all__ = ["CONTROL", "Correlator", "Decision", "IGNORED", "contract_kinds"]

#: Event kinds no rule judges, and why (each is still archived by the sinks).
IGNORED: dict[str, str] = {}
#: Event kinds the engine handles itself.
CONTROL: dict[str, str] = {
    "end_of_capture": "a replay's last record: judge every decision whose evidence is in (finish())",
}


@cache
def contract_kinds() -> tuple[str, ...]:
    """Every event kind of the contract, from the ``Body`` union of :mod:`streams.events`."""
    union = get_args(ev.Body)[0]
    return tuple(str(model.model_fields["kind"].default) for model in get_args(union))


class Correlator:
    """One cell's engine: its state (``state``), its rule sets (``rule_sets``) and their dispatch tables."""

    def __init__(self, policy: Policy, state: EngineState | None = None,
                 operators: OperatorTrust | None = None, *, replay: bool = True) -> None:
        self.policy = policy
        self.operators = operators if operators is not None else OperatorTrust()  # keys None: development
        # Whether a capture may end here (end_of_capture): a scratch namespace's engine, or one driven
        # without a broker (a backtest, a test). A live worker's is not (streams.topics.is_replay_namespace).
        self.replay = replay
        self.state = state if state is not None else EngineState()
        self._out: list[Decision] = []
        s = self.state
        ctx = RuleContext(s, policy, self._out)
        planner = Planner(policy, s.topology, s.ledger, s.hardware_work, s.blast)
        lemons = LemonRules(ctx)  # watches the lifecycle's versions: a lemon is fenced before its restart
        life = IncidentLifecycle(ctx, planner, watcher=lemons)
        verification = VerificationRules(ctx, life, planner)
        recovery = RecoveryRules(ctx, life, planner, verification)
        hardware = HardwareRules(ctx, life)
        held = HeldWrites(ctx, life)  # a failed checkpoint write waits for its job's hardware to speak
        training = TrainingRules(ctx, life, verification, hardware, held)
        placement = PlacementRules(ctx, life, planner)
        self.rule_sets: tuple[RuleSet, ...] = (
            SchedulerRules(ctx, life, verification, placement, training), LivenessRules(ctx, hardware), hardware,
            training, recovery, verification, placement, OperatorRules(ctx, self.operators), lemons, held)
        self.handlers, self.on_timer = _tables(self.rule_sets)

    # --- what tests and the worker read --------------------------------------------------
    @property
    def clock(self) -> datetime | None:
        return self.state.clock

    @property
    def ledger(self) -> QuarantineLedger:
        return self.state.ledger

    @property
    def incidents(self) -> dict[str, OpenIncident]:
        """Id -> incident, for every incident this engine holds (the newest, should two share an id)."""
        return {i: self.state.incidents[ref] for i, ref in self.state.by_id.items()}

    def restored(self, state: EngineState) -> Correlator:
        """A new engine under this one's policy holding ``state`` (a snapshot's)."""
        return Correlator(self.policy, state, self.operators, replay=self.replay)

    # --- driving ---------------------------------------------------------------------
    def process(self, event: ev.Event) -> list[Decision]:
        """Apply one event; return the decisions it (and the time it moved past) caused.

        An operator action no operator key signed for here is not judged at all (it moves no clock and
        takes no id: :mod:`correlators.operator_trust`), nor is an ``end_of_capture`` outside a replay
        (:mod:`correlators.capture_end`); the worker dead-letters both."""
        body = event.body
        if isinstance(body, ev.OperatorAction) and self.operators.signed_by(event)[1] is not None:
            return []
        if isinstance(body, ev.EndOfCapture) and not self.replay:
            return []
        if not self.state.seen.add(identity(event)):  # source, id and content (streams/event_identity.py)
            return []
        if isinstance(body, ev.EndOfCapture):
            return self.finish()
        s = self.state
        node = event.node
        key = None if node and node not in s.topology.nodes else source_key(node, event.source)
        now, at = s.sources.arrive(key, event.ts, s.clock, self.policy.timing.clock_skew_tolerance_s)
        # a late line fires only the timers due by its own time, as ever (what it adds may still join them)
        self._advance(now if s.clock is None or now > s.clock else min(at, s.clock))
        if at != event.ts:  # screened: judged where it arrived on the cell's clock (correlators/clock.py)
            event = event.model_copy(update={"ts": at})
        handler = self.handlers.get(body.kind)
        if handler is not None:  # else IGNORED
            handler(event, body)
        return self._drain()

    def advance_to(self, now: datetime) -> list[Decision]:
        """Move the clock without an event (live mode ticks on wall time)."""
        self._advance(now)
        return self._drain()

    def finish(self) -> list[Decision]:
        """End of a capture: judge every decision whose evidence is in; wait for nothing else."""
        s = self.state
        while True:
            t = s.timers.pop_due(datetime.max.replace(tzinfo=s.clock.tzinfo if s.clock else None))
            if t is None:
                break
            on = self.on_timer[t.name]
            if on.at_end:
                s.clock = max(s.clock or t.due, t.due)
                on.fire(t.key, t.due)
        return self._drain()

    def _advance(self, now: datetime) -> None:
        s = self.state
        while (t := s.timers.pop_due(now)) is not None:
            s.clock = max(s.clock or t.due, t.due)
            self._fire(t.name, t.key, t.due)
        s.clock = max(s.clock or now, now)

    def _fire(self, name: TimerName, key: TimerKey, due: datetime) -> None:
        self.on_timer[name].fire(key, due)

    def _drain(self) -> list[Decision]:
        out = list(self._out)
        self._out.clear()
        return out


def _tables(rule_sets: Iterable[RuleSet]) -> tuple[dict[str, EventHandler], dict[TimerName, OnTimer]]:
    """kind -> handler and timer name -> handler, checked: each once, none missing, none unknown."""
    handlers: dict[str, EventHandler] = {}
    on_timer: dict[TimerName, OnTimer] = {}
    for rules in rule_sets:
        for kind, handler in rules.event_handlers().items():
            if kind in handlers or kind in IGNORED or kind in CONTROL:
                raise ValueError(f"event kind {kind!r} is claimed twice ({type(rules).__name__})")
            handlers[kind] = handler
        for name, on in rules.timer_handlers().items():
            if name in on_timer:
                raise ValueError(f"timer {name!r} is claimed twice ({type(rules).__name__})")
            on_timer[name] = on
    kinds = set(contract_kinds())
    unjudged = kinds - set(handlers) - set(IGNORED) - set(CONTROL)
    unknown = (set(handlers) | set(IGNORED) | set(CONTROL)) - kinds
    if unjudged or unknown:
        raise ValueError(f"event kinds without a handler or a reason to ignore them: {sorted(unjudged)}; "
                         f"handled but not in streams.events.Body: {sorted(unknown)}")
    unfired = set(get_args(TimerName)) - set(on_timer)
    if unfired or set(on_timer) - set(get_args(TimerName)):
        raise ValueError(f"timers without a handler: {sorted(unfired)}; "
                         f"handlers of undeclared timers: {sorted(set(on_timer) - set(get_args(TimerName)))}")
    return handlers, on_timer
