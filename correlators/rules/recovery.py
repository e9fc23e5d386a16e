"""Recovery: restart a failed job once its failure has settled and its hardware has a verdict.

The order of checks when an incident's ``settle`` timer fires:

1. the incident is still active, its category restarts, its restart is not already out;
2. the job's restart budget, then the checkpoints: ``restarts.load_failures`` restarts in a row whose
   checkpoint did not load stop for a person (escalated, with a notify);
3. the restart gate (:mod:`correlators.restart_gate`): every node and GPU of the failed allocation is
   healthy, fenced or suspect -- else it waits (the incident says for what, until when), up to
   ``gate.max_wait_s``, after which what is still without a verdict is excluded;
4. the cluster-wide rate limit (a recovery storm is staggered);
5. a run the scheduler started on its own since the failure (a requeue), on nothing this restart would
   leave out and nothing fenced, is not killed by a restart: it is verified as a restart's run would be;
6. the restart: from the newest valid checkpoint of the job's current lineage outside the failure
   domain of what the restart leaves out (:mod:`correlators.checkpoints`), excluding every fenced GPU
   and node and what the gate excluded, each with why, for the size the job's elasticity allows and
   its GPU class. Its reason and params say what it excluded and what its checkpoint choice cost. A cause
   not blamed on hardware (:data:`UNKNOWN_CAUSES`) restarts on its own ``unknown_cause_auto_restarts``
   times in any ``restarts.unknown_cause_window_s``; past that the restart waits for a person's approval.

Whether the restarted job then really recovers is :mod:`correlators.rules.verification`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from correlators.findings import HARDWARE_CATEGORIES, NODE_CATEGORIES
from correlators.incident_state import OpenIncident
from correlators.lifecycle import ACTIVE, IncidentLifecycle
from correlators.node_parts import failed_beside, failed_parts
from correlators.pinned import blamed_unfenced
from correlators.planner import Planner
from correlators.restart_gate import GateDecision, human, waiting_text
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.rules.verification import VerificationRules
from correlators.timers import TimerKey, TimerName
from correlators.topology import Job

__all__ = ["RecoveryRules"]

UNKNOWN_CAUSES = frozenset({"software_crash", "network_timeout", "training_hang"})
UNKNOWN_RESTARTS_KEPT = 16  # restart times of unknown causes kept per job (those in the policy's window)
# Causes that live in a place: failing again on the same node means the node is suspect.
PLACED_CAUSES = (HARDWARE_CATEGORIES | {"network_timeout"}) - NODE_CATEGORIES


class RecoveryRules:
    """Settle -> gate -> restart. No event of its own: the lifecycle arms ``settle``."""

    def __init__(self, ctx: RuleContext, lifecycle: IncidentLifecycle, planner: Planner,
                 verification: VerificationRules) -> None:
        self.state = ctx.state
        self.p = ctx.policy
        self.out = ctx.out
        self.life = lifecycle
        self.plan = planner
        self.verification = verification
        self.queue = ctx.state.timers

    def event_handlers(self) -> Mapping[str, EventHandler]:
        return {}

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        return {"settle": OnTimer(self._timer_settle, at_end=True),
                "tell": OnTimer(self._timer_tell, at_end=True)}

    def _timer_tell(self, key: TimerKey, due: datetime) -> None:
        """A notify held back by ``timing.notify_min_interval_s`` (the lifecycle's rate limit) goes now."""
        inc = self.state.incident(str(key[0]))
        if inc is not None:
            self.life.tell(inc, due)

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
            self.life.gate.close(inc)
            return
        budget = job.spec.max_restarts
        used = max(self.state.restarts.get(job.name, 0), job.starts - 1)
        if budget is not None and used >= budget:
            self._stop(inc, due, f"restart budget exhausted ({used}/{budget}): a person must decide",
                       "restart budget exhausted")
            return
        if inc.load_failures >= self.p.restarts.load_failures:
            self._stop(inc, due, f"{inc.load_failures} restarts in a row could not load their checkpoint: check "
                       "the checkpoint storage, then restart by hand", "checkpoints fail to load")
            return
        decision = self.life.gate.decide(inc, due)
        if not decision.ready:
            self._wait(inc, decision, due)
            return
        # every detector has spoken (a silent node is node_down by now). A node of the job whose own parts
        # failed is node_hardware_fault, fenced by its rule -- judged before the collectives' pin, so a node
        # that both logged a SEL and left its ranks behind carries its hardware cause, not only the timeout's
        for f in failed_parts(self.state, inc, self.p.timing.hardware_lookback_s):
            self.life.failure(job.name, f)
            for other in failed_beside(self.state, f, job.name, self.p.timing.hardware_lookback_s):
                self.life.failure(other, f)  # the node's fault is the cause of their failure too
        # a culprit the collectives pin to one live node is cordoned now, before the restart, which leaves every
        # cordoned node out
        self.life.pin(inc, due)
        window = self.p.restarts.per_s
        log = self.state.restart_log
        while log and (due - log[0]).total_seconds() >= window:
            log.popleft()
        if len(log) >= self.p.restarts.burst:
            later = log[0] + timedelta(seconds=window)
            self.queue.arm("settle", (inc.id,), later)  # staggered: a recovery storm waits its turn
            return
        self._restart(inc, job, due, decision)

    def _relaunched(self, inc: OpenIncident, job: Job, now: datetime, nodes: set[str],
                    gpus: set[tuple[str, int]]) -> bool:
        """The scheduler started the job again since this round's failure, on nothing this restart would leave
        out and nothing fenced: no restart kills that run; it proves its progress as a restart's would."""
        started = self.state.job_progress(job.name).checkpoints.run_started
        round_at = inc.gate.failure_at if inc.gate is not None else inc.opened_at
        if not job.running or started is None or started <= round_at:
            return False
        ledger = self.state.ledger
        for alloc in job.spec.allocation:
            if alloc.node in nodes or ledger.is_fenced(alloc.node) or any(
                    (alloc.node, g) in gpus or ledger.is_fenced(alloc.node, g) for g in alloc.gpus):
                return False
        self.life.gate.close(inc)
        self.verification.verify_run(inc, started, now, f"the scheduler started {job.name} again at {human(started)}, "
                                     "on none of what a restart would leave out: no restart; verifying its progress")
        return True

    def _stop(self, inc: OpenIncident, now: datetime, message: str, why: str) -> None:
        self.out.extend(self.plan.notify(inc, now, message, "page"))
        self.life.set_state(inc, "escalated", now, why)

    def _wait(self, inc: OpenIncident, decision: GateDecision, now: datetime) -> None:
        """The gate waits: the incident says for what (a new version when that changes), look again then."""
        text = waiting_text(decision.waiting)
        if inc.gate is not None and text != inc.gate.shown:
            inc.gate.shown = text
            self.life.emit(inc, now)
        if decision.wake is not None:
            self.queue.arm("settle", (inc.id,), decision.wake)

    @staticmethod
    def _cutoff(inc: OpenIncident) -> tuple[datetime, tuple[datetime, datetime] | None]:
        """Checkpoints completed by the incident's first evidence are restart points, and, once the job ran
        again after its restart, those saved since then up to this round's failure."""
        round_at = inc.gate.failure_at if inc.gate is not None else inc.opened_at
        rerun = (inc.reran, round_at) if inc.reran is not None and inc.reran > inc.opened_at else None
        return min(inc.opened_at, round_at), rerun

    def _restart(self, inc: OpenIncident, job: Job, now: datetime, decision: GateDecision) -> None:
        s = self.state
        reasons: list[str] = []
        approval = False
        extra_nodes: list[str] = []
        if inc.node is not None and inc.node in inc.earlier_nodes and inc.category in PLACED_CAUSES:
            reasons.append(f"{inc.category} on {inc.node} again after a restart: excluding the node")
            extra_nodes.append(inc.node)
        left_out = [x for x in decision.excluded if x.gpu is None]
        extra_nodes += [x.node for x in left_out]
        extra_gpus = [(x.node, x.gpu) for x in decision.excluded if x.gpu is not None]
        nodes, gpus = blamed_unfenced(inc)  # what the evidence blames but nothing fences (a rank behind)
        if nodes or gpus:
            reasons.append("leaving out what the evidence blames, not fenced: " + "; ".join(
                [*nodes, *(f"{n} GPU {g}" for n, g in gpus)]) + f" ({inc.category})")
        extra_nodes += [n for n in nodes if n not in extra_nodes]
        extra_gpus += [x for x in gpus if x not in extra_gpus]
        if self._relaunched(inc, job, now, set(extra_nodes), set(extra_gpus)):
            return
        if decision.excluded:
            reasons.append("leaving out " + "; ".join(
                f"{x.node}{'' if x.gpu is None else f' GPU {x.gpu}'} ({x.why})" for x in decision.excluded))
        if inc.category in UNKNOWN_CAUSES:
            window = self.p.restarts.unknown_cause_window_s
            recent = [t for t in s.unknown_restarts.get(job.name, ()) if (now - t).total_seconds() < window]
            if len(recent) >= self.p.unknown_cause_auto_restarts:
                approval = True
                reasons.append(f"cause unknown and already retried ({len(recent)} restart(s) of an unknown cause "
                               f"in the last {window / 3600:g} h): needs approval")
            s.unknown_restarts[job.name] = [*recent, now][-UNKNOWN_RESTARTS_KEPT:]
        progress = s.job_progress(job.name)
        lost = set(extra_nodes) | {n for n in job.nodes if s.ledger.is_fenced(n)}
        ck, skipped = progress.checkpoints.restart_point(lost, *self._cutoff(inc))
        checkpoint = {"path": ck.path, "step": ck.step} if ck else None
        if ck is not None and ck.origin == "loaded":  # the rule that decided it (checkpoints.py, "Loaded")
            reasons.append(f"restarting from step {ck.step}, the checkpoint the run loaded (no save since)")
        extra: dict[str, Any] = {}
        if decision.excluded:
            extra["gate"] = {"excluded": [{"node": x.node, "gpu": None if x.gpu is None else s.topology.gpu_id(
                x.node, x.gpu), "verdict": x.verdict, "why": x.why} for x in decision.excluded]}
        if skipped:
            newest = skipped[0]
            steps = newest.step - (ck.step if ck else 0)
            hours = round(((newest.ts - ck.ts) if ck else timedelta()).total_seconds() * job.world_size / 3600, 3)
            extra["checkpoint_skipped"] = [{"step": k.step, "why": k.why} for k in skipped]
            extra["checkpoint_cost"] = {"steps": steps, "gpu_hours": hours}
            cost = (f"restarting from step {ck.step}" if ck else "restarting from the start") + \
                f" costs {steps} more steps ({hours} GPU-hours) than the newest checkpoint: " + \
                "; ".join(f"step {k.step} {k.why}" for k in skipped)
            reasons.append(cost)
            inc.summary = f"{inc.summary}; {cost}" if cost not in inc.summary else inc.summary
        cmd = self.plan.restart(inc, job, checkpoint, now, approval, "; ".join(reasons) or inc.category,
                                extra_nodes, extra_gpus, extra)
        inc.restart_attempts += 1
        s.restarts[job.name] = s.restarts.get(job.name, 0) + 1
        s.restart_log.append(now)
        inc.restored_step = ck.step if ck else 0
        if inc.baseline_throughput is None:
            inc.baseline_throughput, inc.baseline_gpus = progress.baseline_throughput(), job.world_size
        if ck:  # the one definition (README, "Lost GPU-hours"): checkpoint to failure, not to this restart
            lost_s = max(0.0, (inc.opened_at - ck.ts).total_seconds())
            inc.lost_gpu_hours = round(lost_s * job.world_size / 3600, 3)
        inc.restart_from = ck.step if ck else None
        inc.restart_path = ck.path if ck else None
        self.life.gate.close(inc)
        if inc.gate is not None:
            inc.gate.restarted = True
        self.out.append(cmd)
        self.life.set_state(inc, "awaiting_approval" if approval else "restarting", now)
