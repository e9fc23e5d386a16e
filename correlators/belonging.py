"""Which incident a piece of evidence belongs to, when it is not a new root cause (issue #25).

Two rules, each a plain function over the engine's state (the lifecycle and the hardware rules call
them before opening anything):

* **Repeats on fenced hardware belong to the fence** (:func:`fence_owner`). Hardware fenced for a
  cause (a GPU quarantined, a node cordoned: :class:`~correlators.quarantine_ledger.Fence` names
  the category it was fenced for) that reports that cause again -- a quarantined GPU that keeps
  logging XID 79 while idle, also once its node has been cordoned for another cause on top -- says
  nothing new: the evidence goes to the incident that fenced it
  (and so to its ticket), for as long as the fence holds, whether that incident is still open or
  already resolved. No job-less incident is opened for it. Another cause on the same hardware is
  news, and is judged as such. The same holds for a second culprit found in a job's failure
  (:func:`second_fault_owner`): hardware a fence holds for that cause is the fence's -- another
  incident's fence always, the failure's own incident's when the job's run was started on the
  hardware after it was fenced (a job-less fence that took the run the scheduler started there, and
  that a stronger cause has since taken over).
* **A consequence is not a second cause** (:func:`explained_by`). When a job's failure has a
  hardware root cause, what that cause explains -- the failures it brings about on the hardware it
  names or in the job it stopped, within ``timing.hardware_lookback_s`` of it -- is evidence of its
  incident, not an incident of its own: a checkpoint write that fails as its node dies is the
  node's fault, and no storage ticket is sent for a storage system that was fine.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from correlators.findings import HARDWARE_CATEGORIES
from correlators.incident_state import ACTIVE, OpenIncident
from correlators.quarantine_ledger import Fence

if TYPE_CHECKING:
    from correlators.state import EngineState
    from correlators.topology import Job

__all__ = ["CONSEQUENCES", "explained_by", "fence_owner", "note_repeat", "second_fault_owner", "takes_breach"]

#: Categories a job's hardware root cause can bring about on its own (a consequence, not a cause).
CONSEQUENCES = frozenset({"checkpoint_failure", "checkpoint_stale", "training_hang", "network_timeout",
                          "software_crash", "loss_anomaly"})

REPEAT_NOTE = "repeats on the fenced hardware belong to this fence"


def fence_owner(state: EngineState, node: str | None, gpus: list[int] | set[int], category: str) -> OpenIncident | None:
    """The incident whose fence holds this hardware for ``category`` (None: the evidence is news).

    Hardware can be held by more than one fence at once: a GPU quarantined for XID 79 stays quarantined
    when its node is cordoned later for another cause (a power domain lost, a SEL). Each one of ``gpus``
    belongs to the fence when *some* fence holding it was set for this very cause -- its own quarantine,
    else its node's cordon; evidence without GPUs, when the node's cordon was. The first such fence's
    incident owns the repeat, in whatever state it is (resolved, or closed by its job's cancellation:
    the fence outlives it), as long as the engine still keeps it."""
    if node is None:
        return None
    ledger = state.ledger
    cordon = ledger.nodes.get(node)
    for_cause = cordon if cordon is not None and cordon.reason == category else None
    fences: list[Fence | None]
    if gpus:
        on_node = ledger.gpus.get(node, {})
        fences = [q if (q := on_node.get(g)) is not None and q.reason == category else for_cause
                  for g in sorted(gpus)]
    else:
        fences = [for_cause]
    first = fences[0]
    if first is None or any(f is None for f in fences):
        return None
    return state.incident(first.incident)


def second_fault_owner(state: EngineState, inc: OpenIncident, node: str, gpus: set[int],
                       category: str) -> OpenIncident | None:
    """The incident whose fence a second culprit of ``inc`` (``category`` on ``node``'s ``gpus``) belongs to, or None:
    a root cause of ``inc``'s job, an incident of its own (:mod:`correlators.root_causes`).

    Hardware a fence holds for this very cause (:func:`fence_owner`) is that fence's: another incident's fence
    always; ``inc``'s own fence when ``inc``'s job was started on the hardware after it was fenced (a breach:
    :attr:`~correlators.topology.Job.breach` names ``inc``) -- its cause, its ticket and its incident were there
    before this run, and a stronger cause taking ``inc`` over does not make them a new root cause of the run.
    Only ``inc``'s own fence set for the run that failed (the job was on that hardware when it failed for that
    cause, and a stronger cause took ``inc`` over since) leaves the cause an incident of its own."""
    owner = fence_owner(state, node, gpus, category)
    if owner is None or owner is not inc:
        return owner
    run = state.topology.jobs.get(inc.job) if inc.job is not None else None
    return inc if run is not None and run.breach == inc.id else None


def takes_breach(owner: OpenIncident, run: Job | None) -> bool:
    """Whether the job-less fence's incident ``owner`` takes ``job``'s failure: True when the scheduler started
    ``run`` on the hardware ``owner`` fenced (a breach) -- the failure there is the fence's cause again, so
    ``owner`` becomes the job's incident (its restart leaves the hardware out; the caller gives it the job)
    rather than a second incident for what is already fenced."""
    return owner.job is None and run is not None and run.breach == owner.id


def note_repeat(owner: OpenIncident, what: str) -> bool:
    """Record on the fence's incident that its hardware reported its cause again; True the first time
    (a new version says so once; further repeats are evidence only, no storm of versions)."""
    if REPEAT_NOTE in owner.summary:
        return False
    note = f"{what} again while fenced: {REPEAT_NOTE} (it holds; no new incident, no new ticket)"
    owner.summary = f"{owner.summary}; {note}" if owner.summary else note
    return True


def explained_by(incidents: list[OpenIncident], category: str, node: str | None, ts: datetime,
                 lookback_s: float) -> OpenIncident | None:
    """The hardware incident that explains a failure of ``category`` (on ``node``, if known) at ``ts``: one of
    ``incidents`` (the job's own, then the job-less ones of its nodes) with a hardware root cause, not
    finished, whose first evidence -- or its newest version while it is still acted on, or the evidence of a
    second hardware root cause it carries -- is within ``lookback_s`` of ``ts`` (either order: the
    consequence is often logged first), and, when the failure names a node, blaming that node (or the whole
    job's hardware, for a node-less failure)."""
    if category not in CONSEQUENCES:
        return None
    for inc in incidents:
        if inc.category not in HARDWARE_CATEGORIES or inc.held and inc.node is None:
            continue
        # the incident's own cause, or a second hardware root cause it carries (its own incident, one restart)
        hw = {n for n, _ in inc.hardware()}
        # ...also the newest round of a cause still being acted on (a SEL that took the incident over late)
        causes = [(inc.opened_at, hw)] + ([(inc.updated_at, hw)] if inc.updated_at and inc.state in ACTIVE else []) + [
            (o.ts, {o.node}) for o in inc.others if o.ts is not None and o.category in HARDWARE_CATEGORIES]
        if any(abs((ts - at).total_seconds()) <= lookback_s and (node is None or node in nodes) for at, nodes in causes):
            return inc
    return None
