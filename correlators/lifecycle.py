"""Incident lifecycle: open, refine, fence, restart, verify, close."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from correlators.findings import HARDWARE_CATEGORIES, NODE_CATEGORIES, PRIORITY, Finding
from correlators.incident_state import OpenIncident, stable_id

if TYPE_CHECKING:
    from correlators.engine import Correlator

__all__ = ["Lifecycle"]

ACTIVE = ("open", "mitigating", "restarting", "awaiting_approval")
UNKNOWN_CAUSES = frozenset({"software_crash", "network_timeout", "training_hang"})


class Lifecycle:
    """Incident handling mixed into :class:`~correlators.engine.Correlator`."""

    # --- failure incidents: one per job at a time, refined to the strongest cause -------
    def _failure(self: Correlator, job: str, f: Finding) -> OpenIncident | None:
        inc = self.failure.get(job)
        if inc is not None and inc.state == "verifying":
            self._set_state(inc, "escalated", f.ts, "failed again while proving progress")
            inc = None
        if inc is None or inc.state not in ACTIVE:
            inc = self._open(job, None, f, failure=True)
            self.failure[job] = inc
            self.timers.arm_after("settle", (inc.id,), f.ts, self.p.timing.settle_s)
            inc.settle_deadline = f.ts + timedelta(seconds=self.p.timing.max_settle_s)
            self._immediate(inc, f.ts)
            return inc
        inc.add_evidence(f.evidence)
        changed = False
        if f.ts < inc.opened_at:
            inc.opened_at, changed = f.ts, True
        if PRIORITY[f.category] > PRIORITY[inc.category]:
            inc.category, inc.node, inc.gpus = f.category, f.node, set(f.gpus)
            inc.severity, inc.summary, changed = self.p.rule(f.category).severity, f.reason, True
            self._extend_settle(inc)
        elif f.category == inc.category and f.node == inc.node and not set(f.gpus) <= inc.gpus:
            inc.gpus |= set(f.gpus)
            changed = True
        if changed:
            self._emit(inc, self.clock or f.ts)
            self._immediate(inc, self.clock or f.ts)
        return inc

    def _extend_settle(self: Correlator, inc: OpenIncident) -> None:
        if inc.restart_attempts or inc.settle_deadline is None or self.clock is None:
            return
        current = self.timers.due("settle", (inc.id,))
        if current is None:
            return
        wanted = max(current, self.clock + timedelta(seconds=self.p.timing.settle_s / 2))
        self.timers.arm("settle", (inc.id,), min(wanted, inc.settle_deadline))

    # --- condition incidents: a job (or job-less hardware) keeps running -----------------
    def _condition(self: Correlator, job: str | None, node: str | None, category: str, gpus: list[int],
                   ts: datetime, reason: str, evidence: str | None, node_hint: str | None = None,
                   actions_only: tuple[str, ...] | None = None) -> OpenIncident:
        key = (job, node if job is None else None, category)
        inc = self.conditions.get(key)
        if inc is not None and inc.state not in ("resolved", "closed"):
            inc.add_evidence(evidence)
            if not set(gpus) <= inc.gpus:
                inc.gpus |= set(gpus)
                self._emit(inc, ts)
            return inc
        f = Finding(category, ts, node or node_hint, gpus, reason, evidence)
        inc = self._open(job, node, f, failure=False)
        self.conditions[key] = inc
        self._immediate(inc, ts, actions_only)
        return inc

    # --- shared ------------------------------------------------------------------------
    def _open(self: Correlator, job: str | None, node: str | None, f: Finding, failure: bool) -> OpenIncident:
        inc = OpenIncident(
            id=stable_id("inc", job, node, f.category, f.ts.isoformat(), f.evidence),
            job=job, category=f.category, opened_at=f.ts,
            severity=self.p.rule(f.category).severity, node=f.node, gpus=set(f.gpus), summary=f.reason,
        )
        inc.add_evidence(f.evidence)
        self.incidents[inc.id] = inc
        if job:
            self.job_history[job].append(inc)
        self._emit(inc, f.ts)
        return inc

    def _immediate(self: Correlator, inc: OpenIncident, now: datetime,
                   only: tuple[str, ...] | None = None) -> None:
        cmds = self.plan.immediate(inc, now)
        if only is not None:
            cmds = [c for c in cmds if c.type in only]
        self._out.extend(cmds)
        if cmds and inc.state == "open" and inc.category in HARDWARE_CATEGORIES:
            self._set_state(inc, "mitigating", now)

    def _emit(self: Correlator, inc: OpenIncident, now: datetime) -> None:
        inc.version += 1
        inc.updated_at = now
        gpu_ids = [self.topo.gpu_id(inc.node, i) for i in sorted(inc.gpus)] if inc.node else []
        self._out.append(inc.to_model(gpu_ids))

    def _set_state(self: Correlator, inc: OpenIncident, state: str, now: datetime, why: str = "") -> None:
        if inc.state != state:
            inc.state = state
            if why:
                inc.summary = f"{inc.summary}; {why}" if inc.summary else why
            self._emit(inc, now)

    def _open_for_job(self: Correlator, job: str) -> list[OpenIncident]:
        return [i for i in self.job_history.get(job, []) if i.state not in ("resolved", "closed", "escalated")]

    # --- restart, once the failure has settled --------------------------------------------
    def _timer_settle(self: Correlator, key: tuple, due: datetime) -> None:
        inc = self.incidents.get(key[0])
        if inc is None or inc.state not in ACTIVE or inc.job is None:
            return
        if "restart_job" not in self.p.rule(inc.category).actions:
            return
        job = self.topo.jobs.get(inc.job)
        if job is None:
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
            self.timers.arm("settle", key, later)  # staggered: a recovery storm waits its turn
            return
        self._restart(inc, job, due)

    def _restart(self: Correlator, inc: OpenIncident, job, now: datetime) -> None:  # type: ignore[no-untyped-def]
        reasons: list[str] = []
        approval = False
        extra_nodes: list[str] = []
        repeat = [h for h in self.job_history[job.name][:-1]
                  if h is not inc and h.node is not None and h.node == inc.node and h.category == inc.category]
        if repeat:
            reasons.append(f"same {inc.category} on {inc.node} as before: excluding it")
            if inc.category not in NODE_CATEGORIES and inc.node:
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
        if ck:
            inc.lost_gpu_hours = round((now - ck.ts).total_seconds() * job.world_size / 3600, 3)
        self._out.append(cmd)
        self._set_state(inc, "awaiting_approval" if approval else "restarting", now)

    # --- verify the restarted job really progresses ---------------------------------------
    def _check_progress(self: Correlator, job: str, now: datetime) -> None:
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

    def _timer_verify(self: Correlator, key: tuple, due: datetime) -> None:
        inc = self.incidents.get(key[0])
        if inc is None or inc.state != "verifying":
            return
        self._out.extend(self.plan.notify(inc, due, "restarted job is not progressing", "page"))
        self._set_state(inc, "escalated", due, "no progress after restart")
