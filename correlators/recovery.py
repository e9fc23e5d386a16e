"""Recovery: restart a failed job once its failure has settled, then verify it progresses.

The restart is issued after every fence of its incident (the planner issues
fences immediately, the restart only when the ``settle`` timer fires), asks
for the newest good checkpoint, excludes every fenced GPU and node, respects
the job's restart budget and the cluster-wide rate limit (a recovery storm is
staggered), and waits while one of the job's nodes is silent but not yet
judged (its verdict may name hardware the restart must avoid).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from correlators.findings import HARDWARE_CATEGORIES, NODE_CATEGORIES
from correlators.incident_state import OpenIncident
from correlators.lifecycle import ACTIVE, Lifecycle
from correlators.topology import Job

__all__ = ["Recovery"]

UNKNOWN_CAUSES = frozenset({"software_crash", "network_timeout", "training_hang"})
# Causes that live in a place: failing again on the same node means the node is suspect.
PLACED_CAUSES = (HARDWARE_CATEGORIES | {"network_timeout"}) - NODE_CATEGORIES


class Recovery(Lifecycle):
    """Restart and verification, mixed into :class:`~correlators.engine.Correlator`."""

    def _timer_settle(self, key: tuple, due: datetime) -> None:
        inc = self.incidents.get(key[0])
        if inc is None or inc.state not in ACTIVE or inc.job is None:
            return
        if inc.state in ("restarting", "awaiting_approval"):
            return  # this round's restart is out
        if inc.held:
            inc = self._publish(inc, due)
        job = self.topo.jobs.get(inc.job or "")
        if job is None or "restart_job" not in self.p.rule(inc.category).actions:
            return
        if self._awaiting_verdict(job, due, inc):
            return
        budget = job.spec.max_restarts
        used = max(self.restarts[job.name], job.starts - 1)
        if budget is not None and used >= budget:
            self._out.extend(self.plan.notify(inc, due, f"restart budget exhausted ({used}/{budget}): "
                                              "a person must decide", "page"))
            self._set_state(inc, "escalated", due, "restart budget exhausted")
            return
        window = self.p.restarts.per_s
        while self.restart_log and (due - self.restart_log[0]).total_seconds() >= window:
            self.restart_log.popleft()
        if len(self.restart_log) >= self.p.restarts.burst:
            later = self.restart_log[0] + timedelta(seconds=window)
            self.timers.arm("settle", (inc.id,), later)  # staggered: a recovery storm waits its turn
            return
        self._restart(inc, job, due)

    def _awaiting_verdict(self, job: Job, due: datetime, inc: OpenIncident) -> bool:
        """A node of the job is silent and not yet judged: wait for the verdict (up to max_settle_s)."""
        waiting = [self.timers.due("judge", (n,)) for n in job.nodes if n in self.silent]
        later = [t for t in waiting if t is not None and t > due]
        limit = inc.settle_deadline
        if not later or (limit is not None and due >= limit):
            return False
        wake = max(later) + timedelta(seconds=self.p.timing.fence_debounce_s + 0.001)
        self.timers.arm("settle", (inc.id,), min(wake, limit) if limit else wake)
        return True

    def _restart(self, inc: OpenIncident, job: Job, now: datetime) -> None:
        reasons: list[str] = []
        approval = False
        extra_nodes: list[str] = []
        if inc.node is not None and inc.node in inc.earlier_nodes and inc.category in PLACED_CAUSES:
            reasons.append(f"{inc.category} on {inc.node} again after a restart: excluding the node")
            extra_nodes.append(inc.node)
        if inc.category in UNKNOWN_CAUSES:
            if self.unknown_restarts[job.name] >= self.p.unknown_cause_auto_restarts:
                approval = True
                reasons.append("cause unknown and already retried: needs approval")
            self.unknown_restarts[job.name] += 1
        ck = self.progress[job.name].newest_checkpoint
        checkpoint = {"path": ck.path, "step": ck.step} if ck else None
        cmd = self.plan.restart(inc, job, checkpoint, now, approval, "; ".join(reasons) or inc.category,
                                extra_nodes)
        inc.restart_attempts += 1
        self.restarts[job.name] += 1
        self.restart_log.append(now)
        inc.restored_step = ck.step if ck else 0
        inc.baseline_throughput = self.progress[job.name].baseline_throughput()
        if ck:  # the one definition (README, "Lost GPU-hours"): checkpoint to failure, not to this restart
            inc.lost_gpu_hours = round(max(0.0, (inc.opened_at - ck.ts).total_seconds()) * job.world_size / 3600, 3)
        self._out.append(cmd)
        self._set_state(inc, "awaiting_approval" if approval else "restarting", now)

    # --- verify the restarted job really progresses ---------------------------------------
    def _check_progress(self, job: str, now: datetime) -> None:
        inc = self.failure.get(job)
        if inc is None or inc.state != "verifying":
            return
        prog = self.progress[job]
        if prog.last_step is None or prog.last_step < (inc.restored_step or 0) + self.p.timing.progress_steps:
            return
        base, current = inc.baseline_throughput, prog.baseline_throughput()
        if base and current and current < base * self.p.timing.progress_throughput:
            return
        self.timers.cancel("verify", (inc.id,))
        self._set_state(inc, "resolved", now, f"progressing again at step {prog.last_step}")

    def _timer_verify(self, key: tuple, due: datetime) -> None:
        inc = self.incidents.get(key[0])
        if inc is None or inc.state != "verifying":
            return
        self._out.extend(self.plan.notify(inc, due, "restarted job is not progressing", "page"))
        self._set_state(inc, "escalated", due, "no progress after restart")
