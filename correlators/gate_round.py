"""The restart gate's state, per incident round: what failed, what was heard since, what it waits for.

Plain data (part of the engine's state: :attr:`correlators.incident_state.OpenIncident.gate`); the
judging is :mod:`correlators.restart_gate`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from correlators.state_fields import Instant

__all__ = ["Exclusion", "GateRound", "Wait"]


@dataclass
class Wait:
    """One detector the gate waits for: on which hardware, until when."""

    node: str
    gpu: int | None
    detector: str
    due: Instant


@dataclass
class Exclusion:
    """Hardware a restart leaves out without it being fenced: suspect, or without a verdict by the bound."""

    node: str
    gpu: int | None
    verdict: Literal["suspect", "no_verdict"]
    why: str


@dataclass
class GateRound:
    """The gate of one round of an incident: what failed, since when, what was heard since, what it waits for.

    ``alloc`` is the allocation that failed (node -> GPU indices), kept as it was: the scheduler may
    place the job elsewhere meanwhile. ``heard_*`` hold the newest report stamped at or after
    ``failure_at`` that arrived while the gate was open. ``waiting`` and ``excluded`` are what the
    gate last concluded (what the incident shows)."""

    opened: Instant
    failure_at: Instant
    bound: Instant
    alloc: dict[str, list[int]] = field(default_factory=dict)
    heard_hb: dict[str, Instant] = field(default_factory=dict)
    heard_bmc: dict[str, Instant] = field(default_factory=dict)
    heard_nvml: dict[str, dict[int, Instant]] = field(default_factory=dict)
    waiting: list[Wait] = field(default_factory=list)
    excluded: list[Exclusion] = field(default_factory=list)
    shown: str = ""  # the waiting text the incident last published
    passed: bool = False
    restarted: bool = False  # the round ended with a restart (what ``excluded`` says it left out)
    looked: Instant | None = None  # when the gate last judged the allocation (restart_gate.LOOK_AGAIN)
