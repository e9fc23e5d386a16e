"""What every rule set is and shares: the state, the policy, the outbox; event and timer handlers.

A rule set is a plain object over the engine's state (:class:`RuleContext`)
and the collaborators it is given (the incident lifecycle, the planner, other
rule sets). It keeps nothing of its own -- anything it must remember between
events is a field of :class:`~correlators.state.EngineState`, or a snapshot
would lose it -- and it declares what it handles:

* :meth:`RuleSet.event_handlers` -- event kind -> handler ``(event, body)``;
* :meth:`RuleSet.timer_handlers` -- timer name -> :class:`OnTimer` (the handler
  ``(key, due)`` and whether it still fires when a capture ends).

The engine (:mod:`correlators.engine`) builds its dispatch tables from these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from correlators.policy import Policy
from correlators.state import Decision, EngineState
from correlators.timers import TimerKey, TimerName
from streams.events import Event

__all__ = ["EventHandler", "OnTimer", "RuleContext", "RuleSet", "TimerHandler"]

#: ``handler(event, event.body)``; the body's type is the one its kind names.
EventHandler = Callable[[Event, Any], None]
#: ``handler(key, due)``: the timer's key and the event time it was due at.
TimerHandler = Callable[[TimerKey, datetime], None]


@dataclass(frozen=True)
class OnTimer:
    """A timer's handler. ``at_end``: it decides on evidence already seen, so it still fires when a capture
    ends; the others wait for time to pass (silence, staleness, hangs), and the end of a capture is not that."""

    fire: TimerHandler
    at_end: bool


@dataclass(frozen=True)
class RuleContext:
    """What every rule set works on: the state, the policy, and the outbox the engine drains after each step."""

    state: EngineState
    policy: Policy
    out: list[Decision]


class RuleSet(Protocol):
    def event_handlers(self) -> Mapping[str, EventHandler]:
        """Event kind -> handler, for every kind this rule set judges."""
        ...

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        """Timer name -> handler, for every timer this rule set arms."""
        ...
