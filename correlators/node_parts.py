"""A node whose own parts logged a hardware fault is fenced before its job is restarted (issue #25, class 8).

The rule, as the operator states it: every node with a hardware SEL (its CPU, memory or board: a power
supply's is its power domain's) is fenced before the next restart of any job that was using it. The
hardware rules judge such a node at once when one of its ranks crashed near the SEL
(:meth:`~correlators.rules.hardware.HardwareRules.rank_crashed`), and its silence judges it when its agent's
cadence is known; neither may come before the job's restart (a rank crash blamed on a GPU's XID, an
agent that had sent one heartbeat gap, a job that failed of something else meanwhile). So the last
moment, the restart, looks once more: :func:`failed_parts` names each node of the job's allocation, not
fenced yet, whose BMC (or kernel) logged a fault of its own parts within ``hardware_lookback_s`` before
the failure or since (the window the restart gate suspects a node in), or earlier but its agent has said
nothing since -- or its last word came within that window after the fault and it has been quiet since (a
SEL an hour old on a node that kept heartbeating blames nothing), as a
``node_hardware_fault`` finding dated by the first such fault in the window (a dead node's BMC may log
again: the later SEL hides neither the earlier one nor what that one explains, issue #25 class 5); the
lifecycle takes it like any hardware evidence (fenced by its category's rule, the restart leaves the node
out). Found for one job, the fault is also the cause of every other job on the node whose failure is near it
and whose incident is still open (:func:`failed_beside`): a neighbour that crashed or hung as the node died
names it too, and the checkpoint write it lost is that fault's evidence, not a storage incident.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from correlators.findings import NODE_CATEGORIES, Finding
from correlators.incident_state import ACTIVE, OpenIncident
from correlators.restart_gate import human

if TYPE_CHECKING:
    from correlators.state import EngineState

__all__ = ["failed_beside", "failed_parts", "unheard_since", "unjudged_fault"]


def unheard_since(state: EngineState, node: str, at: datetime, grace_s: float) -> bool:
    """Has ``node``'s agent said nothing since ``at`` (it has one: a node without an agent is not waited on)? A
    last word within ``grace_s`` after ``at`` counts as nothing once the agent has been quiet ``grace_s`` since:
    a dying node's agent may get one heartbeat out after its BMC logged the fault."""
    beat = state.heartbeat.get(node)
    if beat is None:
        return False
    quiet = state.clock is not None and (state.clock - beat.last).total_seconds() > grace_s
    return beat.last < at or (quiet and (beat.last - at).total_seconds() <= grace_s)


def unjudged_fault(state: EngineState, node: str, near: datetime, lookback_s: float, job: str | None = None) -> bool:
    """Did ``node``'s own parts fail within ``lookback_s`` of ``near``, with that fault not judged yet: no fence for
    it on the node (a cordon for another cause, its power supply, does not judge a memory UE beside the write) --
    or, for ``job``, a fence another job's incident placed while none of ``job``'s incidents blames the node yet
    (its own failure's verdict, or its restart's last look, will: :func:`failed_parts`)."""
    view = state.bmc.get(node)
    fault = view.node_fault_near(near, lookback_s) if view is not None else None
    if fault is None:
        return False
    fence = state.ledger.nodes.get(node)
    if fence is None or fence.reason != "node_hardware_fault":
        return True
    if job is None:
        return False
    held = state.failure_of(job)
    return not any(_blames(i, node) for i in [*state.history(job), *([held] if held is not None else [])])


def failed_parts(state: EngineState, inc: OpenIncident, lookback_s: float) -> list[Finding]:
    """The ``node_hardware_fault`` findings the restart of ``inc``'s job must be preceded by: each node of its
    allocation with such a fault that the incident does not blame yet (a node another job's incident fenced for it
    already is blamed here too, and not fenced twice)."""
    job = state.topology.jobs.get(inc.job or "")
    if job is None:
        return []
    failure_at = inc.gate.failure_at if inc.gate is not None else inc.opened_at
    since = failure_at - timedelta(seconds=lookback_s)  # an older SEL is not this failure's (the gate's window)
    out = []
    for node in job.nodes:
        view = state.bmc.get(node)
        if view is None or view.node_fault_at is None or _blames(inc, node):
            continue
        # the first fault in the window began it (a later SEL of the same dead node does not redate it); before
        # the window, only the newest, and only when the node has said nothing since
        at, what = view.first_node_fault(since) or (view.node_fault_at, view.node_fault)
        if at < since and not unheard_since(state, node, at, lookback_s):
            continue
        out.append(Finding("node_hardware_fault", at, node,
                           reason=f"node_hardware_fault: a {what} fault logged on {node} at {human(at)}, "
                                  "near the job's failure: fenced before its restart",
                           evidence=None))
    return out


def _blames(inc: OpenIncident, node: str) -> bool:
    """Does ``inc`` already blame the whole of ``node`` (not only a GPU of it) for a cause of its own?"""
    whole = inc.category in NODE_CATEGORIES and any(n == node and not gpus for n, gpus in inc.hardware())
    return whole or any(o.category in NODE_CATEGORIES and o.node == node and not o.gpus for o in inc.others)


def failed_beside(state: EngineState, f: Finding, job: str, lookback_s: float) -> list[str]:
    """The other jobs whose failure ``f`` (a node's own parts, found at ``job``'s restart) explains: on its node,
    with an incident still active whose failure is within ``lookback_s`` of it and that does not blame the node
    yet. Judged for one job, the node's fault is theirs too -- a neighbour's crash or hang names it, and its held
    writes are its consequence, not a storage fault."""
    out = []
    for j in state.topology.jobs_on(f.node or ""):
        inc = state.failure_of(j.name)
        if j.name == job or inc is None or inc.state not in ACTIVE or _blames(inc, f.node or ""):
            continue
        failure_at = inc.gate.failure_at if inc.gate is not None else inc.opened_at
        if abs((failure_at - f.ts).total_seconds()) <= lookback_s:
            out.append(j.name)
    return out
