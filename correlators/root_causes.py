"""Two root causes, two incidents: a job's second fault is published as an incident of its own.

The contract's rule is one incident per affected job *and root cause*. While a job's failure incident
is open, hardware of another cause on hardware it does not blame (XID 79 on one node, XID 48 on another
18 s later) is a second, independent root cause (:class:`~correlators.incident_state.OtherFault`,
found by the lifecycle). Its handling stays with the job's failure, because one restart serves both:
it is fenced by its own category's rule before that restart (the planner), the restart gate judges
its hardware, and the restart excludes both. What changes is what is published: besides the job's
incident (the stronger cause leads it), each second fault is an incident of its own -- its own id,
category, culprit, severity and opening time -- whose state follows the failure it shares a restart
with, and whose text says which rule made it and which incident's restart serves it. The lead
incident names it too (its ``faults``, each with the id of its own incident). A second fault on hardware
another incident already fenced for that very cause -- or the lead itself did, before the scheduler started the
job there (a breach) -- is not a new root cause but that fence's
(:func:`correlators.belonging.second_fault_owner`): the lead names that incident and no second one is published.

Kept nowhere but in the lead incident (the second incident is derived from it at every version), so
a snapshot, a reopen and a takeover keep both without a second copy of the lifecycle.
"""

from __future__ import annotations

from collections.abc import Callable

from correlators.incident_state import OpenIncident, OtherFault, stable_id
from streams.decisions import Culprit, Incident

__all__ = ["RULE", "fault_id", "second_incidents"]

RULE = "a second root cause in the job's failure: an incident of its own (one per job and root cause)"


def fault_id(inc: OpenIncident, o: OtherFault) -> str:
    """The second fault's own incident id: stable for the same decision on the same input."""
    return stable_id("inc", inc.job, o.category, o.node, o.ts.isoformat() if o.ts else "", inc.id)


def second_incidents(inc: OpenIncident, version: int, gpu_id: Callable[[str, int], str],
                     severity: Callable[[str], str]) -> list[Incident]:
    """The incidents of ``inc``'s second faults, at its current version (only for a job's incident)."""
    if inc.job is None:
        return []
    out = []
    for o in inc.others:
        if o.fenced_by:  # already another incident's, by its fence (correlators.belonging): named, not published again
            continue
        if not o.id:
            o.id = fault_id(inc, o)
        out.append(Incident(
            id=o.id, job=inc.job, category=o.category,  # type: ignore[arg-type]
            culprit=Culprit(node=o.node, gpus=[gpu_id(o.node, i) for i in sorted(o.gpus)]),
            opened_at=o.ts or inc.opened_at, severity=severity(o.category),  # type: ignore[arg-type]
            state=inc.state, version=version, updated_at=inc.updated_at,
            summary=f"{o.reason} ({o.category}): {RULE}; fenced by its own rule before the restart of incident "
                    f"{inc.id} ({inc.category}), which serves both and excludes both",
            evidence=[]))
    return out
