"""Incident lifecycle: open, refine, publish (or reopen), emit. Restarts live in ``recovery``.

One failure incident per job and root cause. A failure opens *held* when its
cause is not hardware (a crash, a timeout, a hang): it is judged once it has
settled, because the hardware that caused it often reports a moment later (a
late kernel line, a node whose silence is still being timed). Hardware causes
publish at once: fencing is urgent. When a job fails again for the cause of a
recent incident of its own (a restart loop), that incident is reopened rather
than a second one opened.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from correlators.findings import HARDWARE_CATEGORIES, PRIORITY, Finding
from correlators.incident_state import OpenIncident, stable_id
from correlators.state import CorrelatorState

__all__ = ["Lifecycle", "ACTIVE"]

ACTIVE = ("open", "mitigating", "restarting", "awaiting_approval")


class Lifecycle(CorrelatorState):
    """Incident handling mixed into :class:`~correlators.engine.Correlator`."""

    # --- failure incidents: one per job at a time, refined to the strongest cause -------
    def _failure(self, job: str, f: Finding) -> OpenIncident:
        inc = self.failure.get(job)
        if inc is not None and inc.state in ACTIVE:
            self._refine(inc, f)
            return self.failure[job]
        inc = self._new(job, None, f)
        inc.held = f.category not in HARDWARE_CATEGORIES
        self.failure[job] = inc
        # settle from when we learnt of it: a late line gives the evidence after it the same time
        start = max(f.ts, self.clock or f.ts)
        self.timers.arm_after("settle", (inc.id,), start, self.p.timing.settle_s)
        inc.settle_deadline = start + timedelta(seconds=self.p.timing.max_settle_s)
        if not inc.held:
            self._publish(inc, self.clock or f.ts)
        return self.failure[job]

    def _refine(self, inc: OpenIncident, f: Finding) -> None:
        inc.add_evidence(f.evidence)
        now = self.clock or f.ts
        changed = new_hardware = False
        if f.ts < inc.opened_at:
            inc.opened_at, changed = f.ts, True
        if PRIORITY[f.category] > PRIORITY[inc.category]:
            inc.category, inc.node, inc.gpus, inc.more = f.category, f.node, set(f.gpus), {}
            inc.severity, inc.summary, changed = self.p.rule(f.category).severity, f.reason, True
            new_hardware = f.category in HARDWARE_CATEGORIES and not self._fenced(f)
            self._extend_settle(inc)
        elif f.category == inc.category and f.category in HARDWARE_CATEGORIES:
            new_hardware = inc.blame(f.node, set(f.gpus))
            changed = changed or new_hardware
        if new_hardware and inc.state in ("restarting", "awaiting_approval"):
            # the restart already asked for does not avoid this hardware: fence it, then restart again
            self._set_state(inc, "open", now, f"more hardware after the restart: {f.reason}")
            self.timers.arm_after("settle", (inc.id,), now, self.p.timing.settle_s / 2)
        if inc.held and inc.category in HARDWARE_CATEGORIES:
            self._publish(inc, now)
        elif changed and not inc.held:
            self._emit(inc, now)
            self._immediate(inc, now)

    def _fenced(self, f: Finding) -> bool:
        """Is the hardware of ``f`` out of service already (its node cordoned, or every GPU quarantined)?"""
        if f.node is None or self.ledger.is_fenced(f.node):
            return f.node is not None
        return bool(f.gpus) and all(self.ledger.is_fenced(f.node, g) for g in f.gpus)

    def _extend_settle(self, inc: OpenIncident) -> None:
        if inc.state in ("restarting", "awaiting_approval") or inc.settle_deadline is None or self.clock is None:
            return
        current = self.timers.due("settle", (inc.id,))
        if current is None:
            return
        wanted = max(current, self.clock + timedelta(seconds=self.p.timing.settle_s / 2))
        self.timers.arm("settle", (inc.id,), min(wanted, inc.settle_deadline))

    def _publish(self, inc: OpenIncident, now: datetime) -> OpenIncident:
        """Make a held (or new) failure incident public, or fold it into the job's incident of the same cause."""
        inc.held = False
        job = inc.job or ""
        prev = self._reopenable(inc, now)
        for old in self.job_history[job]:
            if old.state == "verifying" and old is not prev:
                self.timers.cancel("verify", (old.id,))
                self._set_state(old, "escalated", now, f"failed again while proving progress: {inc.category}")
        if prev is not None:
            return self._reopen(prev, inc, now)
        self.job_history[job].append(inc)
        self._emit(inc, now)
        self._immediate(inc, now)
        return inc

    def _reopenable(self, inc: OpenIncident, now: datetime) -> OpenIncident | None:
        window = self.p.timing.reopen_within_s
        for h in reversed(self.job_history[inc.job or ""]):
            if h is inc or h.category != inc.category or h.state in ACTIVE or h.state == "closed":
                continue
            if (now - (h.updated_at or h.opened_at)).total_seconds() <= window:
                return h
        return None

    def _reopen(self, prev: OpenIncident, inc: OpenIncident, now: datetime) -> OpenIncident:
        """The job failed again for ``prev``'s cause: ``prev`` takes the new round over."""
        self.incidents.pop(inc.id, None)
        due = self.timers.due("settle", (inc.id,))
        self.timers.cancel("settle", (inc.id,))
        self.timers.cancel("verify", (prev.id,))
        for ev_id in inc.evidence:
            prev.add_evidence(ev_id)
        prev.earlier_nodes |= {n for n, _ in prev.hardware()}
        if inc.node is not None and inc.node != prev.node and prev.node is not None:
            prev.more.setdefault(prev.node, set()).update(prev.gpus)
            prev.node, prev.gpus = inc.node, set(inc.gpus) | prev.more.pop(inc.node, set())
        else:
            prev.blame(inc.node, inc.gpus)
        for n, g in inc.more.items():
            prev.blame(n, g)
        prev.reports = inc.reports
        prev.settle_deadline = inc.settle_deadline
        self.failure[prev.job or ""] = prev
        self._set_state(prev, "open", now, f"failed again: {inc.summary}")
        if due is not None:  # else: called from inc's own settle, which goes on with prev
            self.timers.arm("settle", (prev.id,), due)
        self._immediate(prev, now)
        return prev

    # --- condition incidents: a job (or job-less hardware) keeps running -----------------
    def _condition(self, job: str | None, node: str | None, category: str, gpus: list[int],
                   ts: datetime, reason: str, evidence: str | None, node_hint: str | None = None,
                   actions_only: tuple[str, ...] | None = None, severity: str | None = None) -> OpenIncident:
        key = (job, node if job is None else None, category)
        inc = self.conditions.get(key)
        if inc is not None and inc.state not in ("resolved", "closed"):
            inc.add_evidence(evidence)
            if inc.blame(node or node_hint, set(gpus)):
                self._emit(inc, ts)
                self._immediate(inc, ts, actions_only)
            return inc
        f = Finding(category, ts, node or node_hint, gpus, reason, evidence)
        inc = self._new(job, node, f)
        inc.severity = severity or inc.severity
        if job:
            self.job_history[job].append(inc)
        self.conditions[key] = inc
        self._emit(inc, ts)
        self._immediate(inc, ts, actions_only)
        return inc

    # --- shared ------------------------------------------------------------------------
    def _new(self, job: str | None, node: str | None, f: Finding) -> OpenIncident:
        inc = OpenIncident(
            id=stable_id("inc", job, node, f.category, f.ts.isoformat(), f.evidence),
            job=job, category=f.category, opened_at=f.ts,
            severity=self.p.rule(f.category).severity, node=f.node, gpus=set(f.gpus), summary=f.reason,
        )
        inc.add_evidence(f.evidence)
        self.incidents[inc.id] = inc
        return inc

    def _immediate(self, inc: OpenIncident, now: datetime,
                   only: tuple[str, ...] | None = None) -> None:
        if inc.held:
            return
        cmds = self.plan.immediate(inc, now)
        if only is not None:
            cmds = [c for c in cmds if c.type in only]
        self._out.extend(cmds)
        if cmds and inc.state == "open" and inc.category in HARDWARE_CATEGORIES:
            self._set_state(inc, "mitigating", now)

    def _emit(self, inc: OpenIncident, now: datetime) -> None:
        inc.version += 1
        inc.updated_at = now
        if inc.held:
            return
        gpu_ids = [self.topo.gpu_id(inc.node, i) for i in sorted(inc.gpus)] if inc.node else []
        self._out.append(inc.to_model(gpu_ids))

    def _set_state(self, inc: OpenIncident, state: str, now: datetime, why: str = "") -> None:
        if inc.state != state:
            inc.state = state
            if why:
                inc.summary = f"{inc.summary}; {why}" if inc.summary else why
            self._emit(inc, now)

    def _open_for_job(self, job: str) -> list[OpenIncident]:
        live = [i for i in self.job_history.get(job, []) if i.state not in ("resolved", "closed", "escalated")]
        held = self.failure.get(job)
        return live + ([held] if held is not None and held.held else [])
