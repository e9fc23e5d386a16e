"""Inventory and the scheduler: which GPUs a node has, which job runs where, when a job starts and ends.

The topology these build is the join every other rule needs: signals arrive
keyed by where they were seen (node, GPU), incidents by job. A job that
starts again after a restart is what recovery waits for (it then has to prove
progress, and it loads the checkpoint the restart named: a new lineage); a
run placed on fenced hardware is a finding of its own (:mod:`.placement`); a
job that fails with no cause known yet is a software crash until a better cause
turns up; a job that ends otherwise closes its incidents.
"""

from __future__ import annotations

from collections.abc import Mapping

from correlators.findings import Finding
from correlators.lifecycle import IncidentLifecycle
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.rules.placement import PlacementRules
from correlators.rules.training import TrainingRules
from correlators.rules.verification import VerificationRules
from correlators.timers import TimerName
from correlators.topology import JobEnd, Launch
from streams import events as ev

__all__ = ["SchedulerRules"]

FINISHED = frozenset({"resolved", "closed", "escalated"})


class SchedulerRules:
    """Topology (inventory) and job lifecycles (scheduler lines)."""

    def __init__(self, ctx: RuleContext, lifecycle: IncidentLifecycle, verification: VerificationRules,
                 placement: PlacementRules, training: TrainingRules) -> None:
        self.state = ctx.state
        self.life = lifecycle
        self.verification = verification
        self.placement = placement
        self.training = training
        self.queue = ctx.state.timers

    def event_handlers(self) -> Mapping[str, EventHandler]:
        return {"inventory": self._on_inventory, "job_started": self._on_job_started,
                "job_ended": self._on_job_ended, "launch_config": self._on_launch_config}

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        return {}

    def _on_inventory(self, e: ev.Event, b: ev.Inventory) -> None:
        if e.node:
            self.state.topology.apply_inventory(e.node, b)

    def _on_launch_config(self, e: ev.Event, b: ev.LaunchConfig) -> None:
        """The job's launcher says what it forms (nodes of ``nproc_per_node``): restarts are sized by it."""
        if e.job:
            self.state.topology.launch.setdefault(e.job, Launch()).merge(b)

    def _on_job_started(self, e: ev.Event, b: ev.JobStarted) -> None:
        if not e.job:
            return
        job = self.state.topology.apply_job_started(e.job, b)
        restarted = self.verification.start_verifying(e.job, e.ts)
        loading = restarted.restart_from if restarted is not None else None
        self.state.job_progress(e.job).on_run_start(e.ts, loading, restarted.restart_path if restarted else None)
        self.placement.on_started(job, e.ts, e.source)
        self.training.arm_stale(e.job, e.ts)

    def _on_job_ended(self, e: ev.Event, b: ev.JobEnded) -> None:
        job = self.state.topology.jobs.get(e.job or "")
        if job is None:
            return
        if job.over:  # the run ended already (cancelled, finished): the first end is the run's, a later one its echo
            if (inc := self.state.failure_of(job.name)) is not None:
                inc.add_evidence(e.id)
            return
        job.running = False
        job.ended = JobEnd(e.ts, b.status)
        self.queue.cancel("hang", (job.name,))
        self.queue.cancel("stale", (job.name,))
        if b.status == "failed":
            inc = self.state.failure_of(job.name)
            if inc is None or inc.state in FINISHED or inc.state == "verifying":
                self.life.failure(job.name, Finding("software_crash", e.ts, e.node, reason="job failed",
                                                    evidence=e.id))
            else:
                inc.add_evidence(e.id)
        else:
            for inc in self.life.open_for_job(job.name):
                self.life.set_state(inc, "closed", e.ts)
