"""Incident lifecycle: open, refine, publish (or reopen), emit. Restarts live in ``rules/recovery``.

One failure incident per job and root cause. A failure opens *held* when its
cause is not hardware (a crash, a timeout, a hang): it is judged once it has
settled, because the hardware that caused it often reports a moment later (a
late kernel line, a node whose silence is still being timed). Hardware causes
publish at once: fencing is urgent. When a job fails again for the cause of a
recent incident of its own (a restart loop), that incident is reopened rather
than a second one opened.

:class:`IncidentLifecycle` is the collaborator every rule set shares (it is
given to them, not inherited): the rules say what they found
(:meth:`~IncidentLifecycle.failure`, :meth:`~IncidentLifecycle.condition`),
the lifecycle decides which incident that is and what is published.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from correlators.findings import HARDWARE_CATEGORIES, PRIORITY, Finding
from correlators.incident_state import OpenIncident, stable_id
from correlators.planner import Planner
from correlators.rules.base import RuleContext

__all__ = ["ACTIVE", "DONE", "IncidentLifecycle", "VersionWatcher"]

ACTIVE = ("open", "mitigating", "restarting", "awaiting_approval")
DONE = ("resolved", "closed")


class VersionWatcher(Protocol):
    """A rule set told of every published incident version, before the lifecycle goes on (so a fence it
    decides precedes the restart the incident asks for next): :class:`~correlators.rules.lemons.LemonRules`."""

    def on_version(self, inc: OpenIncident, now: datetime) -> None: ...


class IncidentLifecycle:
    """Failure and condition incidents over the engine's state; what they publish goes to the outbox."""

    def __init__(self, ctx: RuleContext, planner: Planner, watcher: VersionWatcher | None = None) -> None:
        self.state = ctx.state
        self.p = ctx.policy
        self.out = ctx.out
        self.plan = planner
        self.queue = ctx.state.timers
        self.watcher = watcher

    # --- failure incidents: one per job at a time, refined to the strongest cause -------
    def failure(self, job: str, f: Finding) -> OpenIncident:
        """Record that ``job`` failed for ``f``: a new incident, or the job's active one refined."""
        s = self.state
        inc = s.failure_of(job)
        if inc is not None and inc.state in ACTIVE:
            self._refine(inc, f)
            return s.incidents[s.failure[job]]
        inc = self._new(job, None, f)
        inc.held = f.category not in HARDWARE_CATEGORIES
        s.failure[job] = inc.ref
        # settle from when we learnt of it: a late line gives the evidence after it the same time
        start = max(f.ts, s.clock or f.ts)
        self.queue.arm_after("settle", (inc.id,), start, self.p.timing.settle_s)
        inc.settle_deadline = start + timedelta(seconds=self.p.timing.max_settle_s)
        if not inc.held:
            self.publish(inc, s.clock or f.ts)
        return s.incidents[s.failure[job]]

    def _refine(self, inc: OpenIncident, f: Finding) -> None:
        inc.add_evidence(f.evidence)
        now = self.state.clock or f.ts
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
            self.set_state(inc, "open", now, f"more hardware after the restart: {f.reason}")
            self.queue.arm_after("settle", (inc.id,), now, self.p.timing.settle_s / 2)
        if inc.held and inc.category in HARDWARE_CATEGORIES:
            self.publish(inc, now)
        elif changed and not inc.held:
            self.emit(inc, now)
            self.immediate(inc, now)

    def _fenced(self, f: Finding) -> bool:
        """Is the hardware of ``f`` out of service already (its node cordoned, or every GPU quarantined)?"""
        ledger = self.state.ledger
        if f.node is None or ledger.is_fenced(f.node):
            return f.node is not None
        return bool(f.gpus) and all(ledger.is_fenced(f.node, g) for g in f.gpus)

    def _extend_settle(self, inc: OpenIncident) -> None:
        clock = self.state.clock
        if inc.state in ("restarting", "awaiting_approval") or inc.settle_deadline is None or clock is None:
            return
        current = self.queue.due("settle", (inc.id,))
        if current is None:
            return
        wanted = max(current, clock + timedelta(seconds=self.p.timing.settle_s / 2))
        self.queue.arm("settle", (inc.id,), min(wanted, inc.settle_deadline))

    def publish(self, inc: OpenIncident, now: datetime) -> OpenIncident:
        """Make a held (or new) failure incident public, or fold it into the job's incident of the same cause."""
        inc.held = False
        job = inc.job or ""
        prev = self._reopenable(inc, now)
        for old in self.state.history(job):
            if old.state == "verifying" and old is not prev:
                self.queue.cancel("verify", (old.id,))
                self.set_state(old, "escalated", now, f"failed again while proving progress: {inc.category}")
        if prev is not None:
            return self._reopen(prev, inc, now)
        self.state.job_history.setdefault(job, []).append(inc.ref)
        self.emit(inc, now)
        self.immediate(inc, now)
        return inc

    def _reopenable(self, inc: OpenIncident, now: datetime) -> OpenIncident | None:
        window = self.p.timing.reopen_within_s
        for h in reversed(self.state.history(inc.job or "")):
            if h is inc or h.category != inc.category or h.state in ACTIVE or h.state == "closed":
                continue
            if (now - (h.updated_at or h.opened_at)).total_seconds() <= window:
                return h
        return None

    def _reopen(self, prev: OpenIncident, inc: OpenIncident, now: datetime) -> OpenIncident:
        """The job failed again for ``prev``'s cause: ``prev`` takes the new round over."""
        due = self.queue.due("settle", (inc.id,))
        self.queue.cancel("settle", (inc.id,))
        self.queue.cancel("verify", (prev.id,))
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
        self.state.failure[prev.job or ""] = prev.ref
        self.state.drop(inc)  # nothing names it any more: the job's failure is prev now
        self.set_state(prev, "open", now, f"failed again: {inc.summary}")
        if due is not None:  # else: called from inc's own settle, which goes on with prev
            self.queue.arm("settle", (prev.id,), due)
        self.immediate(prev, now)
        return prev

    # --- condition incidents: a job (or job-less hardware) keeps running -----------------
    def condition(self, job: str | None, node: str | None, category: str, gpus: list[int],
                  ts: datetime, reason: str, evidence: str | None, node_hint: str | None = None,
                  actions_only: tuple[str, ...] | None = None, severity: str | None = None) -> OpenIncident:
        """Record a condition of ``job`` (or, without a job, of ``node``'s hardware): new, or more evidence."""
        subject = node if job is None else None
        inc = self.state.condition(job, subject, category)
        if inc is not None and inc.state not in DONE:
            inc.add_evidence(evidence)
            if inc.blame(node or node_hint, set(gpus)):
                self.emit(inc, ts)
                self.immediate(inc, ts, actions_only)
            return inc
        f = Finding(category, ts, node or node_hint, gpus, reason, evidence)
        inc = self._new(job, node, f)
        inc.severity = severity or inc.severity
        if job:
            self.state.job_history.setdefault(job, []).append(inc.ref)
        self.state.set_condition(job, subject, category, inc)
        self.emit(inc, ts)
        self.immediate(inc, ts, actions_only)
        return inc

    # --- shared ------------------------------------------------------------------------
    def _new(self, job: str | None, node: str | None, f: Finding) -> OpenIncident:
        inc = OpenIncident(
            id=stable_id("inc", job, node, f.category, f.ts.isoformat(), f.evidence),
            job=job, category=f.category, opened_at=f.ts,
            severity=self.p.rule(f.category).severity, node=f.node, gpus=set(f.gpus), summary=f.reason,
        )
        inc.add_evidence(f.evidence)
        return self.state.hold(inc)

    def immediate(self, inc: OpenIncident, now: datetime, only: tuple[str, ...] | None = None) -> None:
        """Issue the incident's non-restart actions not issued yet (fences first); a held incident issues none."""
        if inc.held:
            return
        cmds = self.plan.immediate(inc, now)
        if only is not None:
            cmds = [c for c in cmds if c.type in only]
        self.out.extend(cmds)
        if cmds and inc.state == "open" and inc.category in HARDWARE_CATEGORIES:
            self.set_state(inc, "mitigating", now)

    def emit(self, inc: OpenIncident, now: datetime) -> None:
        """A new version of the incident; published unless it is held."""
        inc.version += 1
        inc.updated_at = now
        if inc.held:
            return
        topo = self.state.topology
        gpu_ids = [topo.gpu_id(inc.node, i) for i in sorted(inc.gpus)] if inc.node else []
        self.out.append(inc.to_model(gpu_ids))
        if self.watcher is not None:
            self.watcher.on_version(inc, now)

    def set_state(self, inc: OpenIncident, state: str, now: datetime, why: str = "") -> None:
        if inc.state != state:
            inc.state = state
            if why:
                inc.summary = f"{inc.summary}; {why}" if inc.summary else why
            self.emit(inc, now)

    def open_for_job(self, job: str) -> list[OpenIncident]:
        """The job's incidents not finished yet, its held failure included."""
        live = [i for i in self.state.history(job) if i.state not in ("resolved", "closed", "escalated")]
        held = self.state.failure_of(job)
        return live + ([held] if held is not None and held.held else [])
