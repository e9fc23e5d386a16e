"""Hardware evidence joining an open incident: which culprit it is, and whether it takes the incident over.

Plain functions over the engine's state (the lifecycle calls them while refining an incident):

* A **stronger cause** takes the incident over; the previous culprit, when it is other hardware, stays a
  culprit of its own cause (a second fault).
* The **same cause** adds culprit hardware.
* A **weaker cause** on hardware the incident does not blame yet is a second culprit of its own cause
  (:class:`~correlators.incident_state.OtherFault`): its own incident (:mod:`correlators.root_causes`),
  fenced by its own rule before the one restart that serves both -- unless a fence already holds that hardware
  for that very cause (another incident's, or this incident's own when the scheduler started the job on the
  hardware after it was fenced: a breach): then it is that fence's
  (:func:`correlators.belonging.second_fault_owner`), named by the lead and not published a second time.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from correlators.belonging import second_fault_owner
from correlators.findings import HARDWARE_CATEGORIES, PRIORITY, Finding, covered_by, covers
from correlators.incident_state import OpenIncident, OtherFault
from correlators.root_causes import fault_id

if TYPE_CHECKING:
    from correlators.policy import Policy
    from correlators.state import EngineState

__all__ = ["add_other", "is_fenced", "join_hardware"]


def join_hardware(state: EngineState, policy: Policy, inc: OpenIncident, f: Finding) -> tuple[bool, bool]:
    """Hardware evidence ``f`` joins ``inc``: (new hardware to fence, whether ``f`` took the incident over)."""
    if PRIORITY[f.category] > PRIORITY[inc.category]:
        if inc.category in HARDWARE_CATEGORIES and inc.node is not None:
            for node, gpus in inc.hardware():
                if not covers(f, node, gpus):
                    add_other(state, inc, inc.category, node, gpus, inc.summary, inc.opened_at)
        inc.category, inc.node, inc.gpus, inc.more = f.category, f.node, set(f.gpus), {}
        inc.severity, inc.summary = policy.rule(f.category).severity, f.reason
        return not is_fenced(state, f), True
    if f.category == inc.category:
        return inc.blame(f.node, set(f.gpus)), False
    if f.node is None or any(covered_by(node, gpus, f) for node, gpus in inc.hardware()):
        return False, False  # the same hardware, already blamed for a stronger cause
    return add_other(state, inc, f.category, f.node, set(f.gpus), f.reason, f.ts), False


def add_other(state: EngineState, inc: OpenIncident, category: str, node: str, gpus: set[int], reason: str,
              ts: datetime | None) -> bool:
    """Record a second culprit of ``category``; True when its hardware is new to the incident."""
    o = inc.other(category, node)
    if o is None:
        o = OtherFault(category, node, set(gpus), reason, ts)
        owner = second_fault_owner(state, inc, node, gpus, category)
        if owner is not None:  # fenced for this very cause already: that fence's incident
            o.id = o.fenced_by = owner.id
        else:
            o.id = fault_id(inc, o)  # its own incident (root_causes): one per job and root cause
        inc.others.append(o)
        which = "this incident's fence" if owner is inc else f"incident {o.id}"
        also = f"also {reason} ({category}, {which})" if inc.job else reason
        inc.summary = f"{inc.summary}; {also}" if inc.summary else also
        return True
    if gpus <= o.gpus:
        return False
    o.gpus |= gpus
    return True


def is_fenced(state: EngineState, f: Finding) -> bool:
    """Is the hardware of ``f`` out of service already (its node cordoned, or every GPU quarantined)?"""
    ledger = state.ledger
    if f.node is None or ledger.is_fenced(f.node):
        return f.node is not None
    return bool(f.gpus) and all(ledger.is_fenced(f.node, g) for g in f.gpus)
