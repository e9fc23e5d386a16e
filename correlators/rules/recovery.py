"""Recovery: restart a failed job once its failure has settled, then verify it progresses.

The restart is issued after every fence of its incident (the planner issues
fences immediately, the restart only when the ``settle`` timer fires), asks
for the newest good checkpoint, excludes every fenced GPU and node, respects
the job's restart budget and the cluster-wide rate limit (a recovery storm is
staggered), and waits while one of the job's nodes is silent but not yet
judged (its verdict may name hardware the restart must avoid).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from correlators.findings import HARDWARE_CATEGORIES, NODE_CATEGORIES
from correlators.incident_state import OpenIncident
from correlators.lifecycle import ACTIVE, IncidentLifecycle
from correlators.planner import Planner
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.timers import TimerKey, TimerName
from correlators.topology import Job

__all__ = ["RecoveryRules"]

UNKNOWN_CAUSES = frozenset({"software_crash", "network_timeout", "training_hang"})
# Causes that live in a place: failing again on the same node means the node is suspect.
PLACED_CAUSES = (HARDWARE_CATEGORIES | {"network_timeout"}) - NODE_CATEGORIES


class RecoveryRules:
    """Settle -> restart -> verify. No event of its own: the other rule sets call :meth:`start_verifying`
    (a job started again) and :meth:`check_progress` (a training step)."""

    def __init__(self, ctx: RuleContext, lifecycle: IncidentLifecycle, planner: Planner) -> None:
        self.state = ctx.state
        self.p = ctx.policy
        self.out = ctx.out
        self.life = lifecycle
        self.plan = planner
        self.queue = ctx.state.timers

    def event_handlers(self) -> Mapping[str, EventHandler]:
        return {}

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        return {"settle": OnTimer(self._timer_settle, at_end=True),
                "verify": OnTimer(self._timer_verify, at_end=False)}

    def _timer_settle(self, key: TimerKey, due: datetime) -> None:
        inc = self.state.incident(str(key[0]))
        if inc is None or inc.state not in ACTIVE or inc.job is None:
            return
        if inc.state in ("restarting", "awaiting_approval"):
            return  # this round's restart is out
        if inc.held:
            inc = self.life.publish(inc, due)
        job = self.state.topology.jobs.get(inc.job or "")
        if job is None or "restart_job" not in self.p.rule(inc.category).actions:
            return
        if self._awaiting_verdict(job, due, inc):
            return
        budget = job.spec.max_restarts
        used = max(self.state.restarts.get(job.name, 0), job.starts - 1)
        if budget is not None and used >= budget:
            self.out.extend(self.plan.notify(inc, due, f"restart budget exhausted ({used}/{budget}): "
                                             "a person must decide", "page"))
            self.life.set_state(inc, "escalated", due, "restart budget exhausted")
            return
        window = self.p.restarts.per_s
        log = self.state.restart_log
        while log and (due - log[0]).total_seconds() >= window:
            log.popleft()
        if len(log) >= self.p.restarts.burst:
            later = log[0] + timedelta(seconds=window)
            self.queue.arm("settle", (inc.id,), later)  # staggered: a recovery storm waits its turn
            return
        self._restart(inc, job, due)

    def _awaiting_verdict(self, job: Job, due: datetime, inc: OpenIncident) -> bool:
        """A node of the job is silent and not yet judged: wait for the verdict (up to max_settle_s)."""
        waiting = [self.queue.due("judge", (n,)) for n in job.nodes if n in self.state.silent]
        later = [t for t in waiting if t is not None and t > due]
        limit = inc.settle_deadline
        if not later or (limit is not None and due >= limit):
            return False
        wake = max(later) + timedelta(seconds=self.p.timing.fence_debounce_s + 0.001)
        self.queue.arm("settle", (inc.id,), min(wake, limit) if limit else wake)
        return True

    def _restart(self, inc: OpenIncident, job: Job, now: datetime) -> None:
        s = self.state
        reasons: list[str] = []
        approval = False
        extra_nodes: list[str] = []
        if inc.node is not None and inc.node in inc.earlier_nodes and inc.category in PLACED_CAUSES:
            reasons.append(f"{inc.category} on {inc.node} again after a restart: excluding the node")
            extra_nodes.append(inc.node)
        if inc.category in UNKNOWN_CAUSES:
            if s.unknown_restarts.get(job.name, 0) >= self.p.unknown_cause_auto_restarts:
                approval = True
                reasons.append("cause unknown and already retried: needs approval")
            s.unknown_restarts[job.name] = s.unknown_restarts.get(job.name, 0) + 1
        progress = s.job_progress(job.name)
        ck = progress.newest_checkpoint
        checkpoint = {"path": ck.path, "step": ck.step} if ck else None
        cmd = self.plan.restart(inc, job, checkpoint, now, approval, "; ".join(reasons) or inc.category,
                                extra_nodes)
        inc.restart_attempts += 1
        s.restarts[job.name] = s.restarts.get(job.name, 0) + 1
        s.restart_log.append(now)
        inc.restored_step = ck.step if ck else 0
        inc.baseline_throughput = progress.baseline_throughput()
        if ck:  # the one definition (README, "Lost GPU-hours"): checkpoint to failure, not to this restart
            lost_s = max(0.0, (inc.opened_at - ck.ts).total_seconds())
            inc.lost_gpu_hours = round(lost_s * job.world_size / 3600, 3)
        self.out.append(cmd)
        self.life.set_state(inc, "awaiting_approval" if approval else "restarting", now)

    # --- verify the restarted job really progresses ---------------------------------------
    def start_verifying(self, job: str, now: datetime) -> None:
        """The job started again: a failure whose restart went out now has to prove progress."""
        inc = self.state.failure_of(job)
        if inc and inc.state in ("restarting", "awaiting_approval", "mitigating", "open"):
            if inc.restart_attempts:
                self.life.set_state(inc, "verifying", now)
                self.queue.arm_after("verify", (inc.id,), now, self.p.timing.verify_timeout_s)

    def check_progress(self, job: str, now: datetime) -> None:
        """A training step: a verifying failure is resolved once the job is past its restored step."""
        inc = self.state.failure_of(job)
        if inc is None or inc.state != "verifying":
            return
        prog = self.state.job_progress(job)
        if prog.last_step is None or prog.last_step < (inc.restored_step or 0) + self.p.timing.progress_steps:
            return
        base, current = inc.baseline_throughput, prog.baseline_throughput()
        if base and current and current < base * self.p.timing.progress_throughput:
            return
        self.queue.cancel("verify", (inc.id,))
        self.life.set_state(inc, "resolved", now, f"progressing again at step {prog.last_step}")

    def _timer_verify(self, key: TimerKey, due: datetime) -> None:
        inc = self.state.incident(str(key[0]))
        if inc is None or inc.state != "verifying":
            return
        self.out.extend(self.plan.notify(inc, due, "restarted job is not progressing", "page"))
        self.life.set_state(inc, "escalated", due, "no progress after restart")
