"""Fences are standing state: a job the scheduler starts on fenced hardware is a finding, not news.

A quarantine or a cordon is carried out by an executor (a Slurm drain, a Kubernetes taint); a
scheduler that does not know of it, or an executor that did not carry it out, starts the job again
on the very hardware it was fenced off. Each ``job_started`` is checked against the fence ledger:

* the run is marked (:attr:`~correlators.topology.Job.breach`): its failure is the incident's that
  fenced the hardware (or the job's own open or recently restarted one), never a second incident
  for the same broken hardware, and its next restart excludes the hardware again;
* a notify says the fence is not being enforced: which hardware, which command fenced it and when,
  and who started the job (the scheduler source);
* after ``restarts.fence_breaches`` such placements the incident is escalated for a person: restarting
  onto hardware the scheduler will not keep the job off is a loop, not a recovery.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from correlators.incident_state import OpenIncident
from correlators.lifecycle import ACTIVE, IncidentLifecycle
from correlators.planner import Planner
from correlators.quarantine_ledger import Fence
from correlators.restart_gate import human
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.timers import TimerName
from correlators.topology import Job

__all__ = ["PlacementRules"]


class PlacementRules:
    """Checks each run's allocation against the fences; called by the scheduler rules on ``job_started``."""

    def __init__(self, ctx: RuleContext, lifecycle: IncidentLifecycle, planner: Planner) -> None:
        self.state = ctx.state
        self.p = ctx.policy
        self.out = ctx.out
        self.life = lifecycle
        self.plan = planner

    def event_handlers(self) -> Mapping[str, EventHandler]:
        return {}

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        return {}

    def on_started(self, job: Job, now: datetime, source: str) -> None:
        fenced = self._fenced(job)
        if not fenced:
            return
        inc = self._carrier(job, fenced, now)
        what = ", ".join(self._describe(node, gpu, fence) for node, gpu, fence in fenced)
        message = (f"the scheduler (source {source!r}) started job {job.name} on fenced hardware: {what}. The fence is "
                   "not being enforced: check that the executor carried the command out (its result) and that "
                   "the scheduler honours it (Slurm: the node's drain; Kubernetes: the cordon or the quarantine "
                   "taint); faultline will restart the job off it again when it fails")
        if inc is None:
            return
        job.breach = inc.id
        inc.fence_breaches += 1
        if inc.state == "escalated":
            self.out.extend(self.plan.notify(inc, now, message, "page"))
            return
        if inc.fence_breaches >= self.p.restarts.fence_breaches:
            self.out.extend(self.plan.notify(
                inc, now, f"{message}. This is placement {inc.fence_breaches} on fenced hardware: no more "
                          "automatic restarts until a person makes the fence hold", "page"))
            self.life.set_state(inc, "escalated", now, f"the scheduler keeps starting the job on fenced hardware "
                                                       f"({inc.fence_breaches} times)")
            return
        self.out.extend(self.plan.notify(inc, now, message, "page"))
        inc.summary = f"{inc.summary}; the scheduler started the job again on fenced hardware ({what})"
        self.life.emit(inc, now)

    def _fenced(self, job: Job) -> list[tuple[str, int | None, Fence]]:
        """(node, GPU or None for the node, fence) of every fenced piece of the run's allocation."""
        ledger = self.state.ledger
        out: list[tuple[str, int | None, Fence]] = []
        for alloc in job.spec.allocation:
            node_fence = ledger.nodes.get(alloc.node)
            if node_fence is not None:
                out.append((alloc.node, None, node_fence))
                continue
            on_node = ledger.gpus.get(alloc.node, {})
            out += [(alloc.node, g, on_node[g]) for g in sorted(set(alloc.gpus)) if g in on_node]
        return out

    def _carrier(self, job: Job, fenced: list[tuple[str, int | None, Fence]], now: datetime) -> OpenIncident | None:
        """The incident the run belongs to: the job's failure that is open or was restarted lately, else the
        incident of this job that fenced the hardware; else a job-less fence's own incident (which takes the job
        when the run fails there); another job's fence is only told."""
        s = self.state
        recent = timedelta(seconds=self.p.timing.reopen_within_s)
        own = s.failure_of(job.name)
        if own is not None and own.state != "closed" and (
                own.state in ACTIVE or own.state == "verifying" or now - (own.updated_at or own.opened_at) <= recent):
            return own
        owners = [s.incident(f.incident) for _, _, f in fenced]
        mine = [i for i in owners if i is not None and i.job == job.name]  # closed by a cancel: the fence holds
        if mine:
            return mine[0]
        other = next((i for i in owners if i is not None), None)
        if other is not None and other.job is None and other.state != "closed":
            return other  # a job-less fence: the run's failure is its cause again (belonging.takes_breach)
        if other is not None:
            what = ", ".join(self._describe(n, g, f) for n, g, f in fenced)
            self.out.extend(self.plan.notify(other, now, f"the scheduler started job {job.name} on hardware this "
                                                         f"incident fenced: {what}; the fence is not being enforced",
                                             "page"))
        return None

    def _describe(self, node: str, gpu: int | None, fence: Fence) -> str:
        what = f"{node}" if gpu is None else f"{node} GPU {gpu} ({self.state.topology.gpu_id(node, gpu)})"
        by = f"{'cordon_node' if gpu is None else 'quarantine_gpu'} {fence.command or '(by hand)'}"
        return f"{what}, fenced by {by} of incident {fence.incident} at {human(fence.since)} for {fence.reason}"
