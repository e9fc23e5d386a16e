"""Incident lifecycle: open, refine, publish (or reopen), emit. Restarts live in ``rules/recovery``.

One failure incident per job and root cause. A failure opens *held* when its
cause is not hardware (a crash, a timeout, a hang): it is judged once it has
settled, because the hardware that caused it often reports a moment later (a
late kernel line, a node whose silence is still being timed). Hardware causes
publish at once: fencing is urgent. When a job fails again for the cause of a
recent incident of its own (a restart loop), that incident is reopened rather
than a second one opened; so is the incident a failure is known to continue
(the job's restart did not load its checkpoint, or the scheduler put the job back
on hardware that incident fenced: :attr:`~correlators.topology.Job.breach`).

Hardware evidence that arrives while an incident is open belongs to the hardware
it names: more of the same cause is more culprit hardware; another cause on
other hardware is a second culprit (:class:`~correlators.incident_state.OtherFault`)
fenced by its own category's rule, a stronger one takes the incident over and
the previous culprit becomes the second. Every round of an incident (the first
failure, each failure again) opens its restart gate
(:class:`~correlators.restart_gate.GateJudge`).

:class:`IncidentLifecycle` is the collaborator every rule set shares (it is
given to them, not inherited): the rules say what they found
(:meth:`~IncidentLifecycle.failure`, :meth:`~IncidentLifecycle.condition`),
the lifecycle decides which incident that is and what is published.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from correlators.belonging import explained_by, fence_owner, note_repeat, takes_breach
from correlators.culprits import add_other, join_hardware
from correlators.findings import HARDWARE_CATEGORIES, PRIORITY, Finding
from correlators.incident_state import ACTIVE, OpenIncident, stable_id
from correlators.pinned import PINNED, pinned_node, pinned_text
from correlators.planner import Planner
from correlators.restart_gate import GateJudge, waiting_text
from correlators.root_causes import second_incidents
from correlators.rules.base import RuleContext

__all__ = ["ACTIVE", "DONE", "IncidentLifecycle", "VersionWatcher"]

DONE = ("resolved", "closed")
FINISHED = ("resolved", "closed", "escalated")


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

    @property
    def gate(self) -> GateJudge:
        """The restart gate's judge over the same state (it keeps nothing: made when asked for)."""
        return GateJudge(self.state, self.p)

    # --- failure incidents: one per job at a time, refined to the strongest cause -------
    def failure(self, job: str, f: Finding) -> OpenIncident:
        """Record that ``job`` failed for ``f``: a new incident, or the job's active one refined."""
        s = self.state
        inc = s.failure_of(job)
        if inc is not None and inc.state in ACTIVE:
            self._refine(inc, f)
            return s.incidents[s.failure[job]]
        carrier = self._continued(job, f)
        if carrier is not None:
            return self._again(carrier, f)
        inc = self._new(job, None, f)
        inc.held = f.category not in HARDWARE_CATEGORIES
        j = s.topology.jobs.get(job)
        inc.run = j.starts if j is not None else 0
        s.failure[job] = inc.ref
        # settle from when we learnt of it: a late line gives the evidence after it the same time
        start = max(f.ts, s.clock or f.ts)
        self.queue.arm_after("settle", (inc.id,), start, self.p.timing.settle_s)
        inc.settle_deadline = start + timedelta(seconds=self.p.timing.max_settle_s)
        self.gate.open(inc, s.topology.jobs.get(job), f.ts, s.clock or f.ts)
        if not inc.held:
            self.publish(inc, s.clock or f.ts)
        return s.incidents[s.failure[job]]

    def _continued(self, job: str, f: Finding) -> OpenIncident | None:
        """The incident this failure continues, if one is known: the restart that did not load, or the run
        the scheduler started on hardware an incident had fenced."""
        s = self.state
        j = s.topology.jobs.get(job)
        for inc_id in (f.belongs_to, j.breach if j is not None else None):
            inc = s.incident(inc_id) if inc_id else None
            breach = j is not None and inc_id == j.breach  # a fence's incident carries the run, even closed
            if inc is not None and (inc.state != "closed" or breach) and (inc.job == job or takes_breach(inc, j)):
                if inc.job != job:  # a job-less fence's incident takes the run it breached: the job's now
                    inc.job = job
                    s.job_history.setdefault(job, []).append(inc.ref)
                return inc
        held = s.failure_of(job)  # waiting for a person, and the job has not run again since: the same failure
        if held is not None and held.state == "escalated" and j is not None and held.run == j.starts:
            return held
        return None

    def _again(self, inc: OpenIncident, f: Finding) -> OpenIncident:
        """``inc``'s job failed again in a way that is ``inc``'s own: a new round of it (an escalated one
        only gathers the evidence: a person decides now)."""
        s = self.state
        now = s.clock or f.ts
        inc.add_evidence(f.evidence)
        s.failure[inc.job or ""] = inc.ref
        if inc.state == "escalated":  # a person decides the restart; new broken hardware is fenced all the same
            if f.category in HARDWARE_CATEGORIES and any(join_hardware(self.state, self.p, inc, f)):
                self.emit(inc, now)
                self.immediate(inc, now)
                self.out.extend(self.plan.notify(inc, now, f"{f.reason}: fenced too; the incident still waits "
                                                           "for a person before any restart", "page"))
            return inc
        if f.category in HARDWARE_CATEGORIES:
            join_hardware(self.state, self.p, inc, f)
        self.queue.cancel("verify", (inc.id,))
        self._new_round(inc, f.ts, now, f"failed again: {f.reason}")
        self.immediate(inc, now)
        return inc

    def after_end(self, inc: OpenIncident, f: Finding) -> None:
        """A hardware verdict on what ``inc``'s failure ran on, come after the job's run ended (it was cancelled
        while the incident waited for the verdict): the verdict is that failure's cause. The incident takes it
        and fences the hardware in its own name -- one incident for the job and the cause -- and stays closed:
        nothing restarts a run that ended."""
        now = self.state.clock or f.ts
        inc.add_evidence(f.evidence)
        new_hardware, taken = join_hardware(self.state, self.p, inc, f)
        if not (new_hardware or taken):
            return
        inc.opened_at = min(inc.opened_at, f.ts)
        inc.summary = f"{inc.summary}; known after the job's run ended: fenced, not restarted"
        if inc.held:  # closed before it was told: it is the job's incident now
            inc.held = False
            self.state.job_history.setdefault(inc.job or "", []).append(inc.ref)
        self.emit(inc, now)
        self.immediate(inc, now)

    def _new_round(self, inc: OpenIncident, failure_at: datetime, now: datetime, why: str) -> None:
        """Back to open: settle again and judge the job's hardware again before the next restart."""
        self.set_state(inc, "open", now, why)
        self.queue.arm_after("settle", (inc.id,), now, self.p.timing.settle_s)
        inc.settle_deadline = now + timedelta(seconds=self.p.timing.max_settle_s)
        self.gate.open(inc, self.state.topology.jobs.get(inc.job or ""), failure_at, now)

    def _refine(self, inc: OpenIncident, f: Finding) -> None:
        inc.add_evidence(f.evidence)
        now = self.state.clock or f.ts
        changed = False
        if f.ts < inc.opened_at:
            inc.opened_at, changed = f.ts, True
            self.gate.earlier(inc, f.ts)
        if PRIORITY[f.category] > PRIORITY[inc.category]:
            self._extend_settle(inc)
        new_hardware, taken = join_hardware(self.state, self.p, inc, f) if f.category in HARDWARE_CATEGORIES else (False, False)
        if PRIORITY[f.category] > PRIORITY[inc.category] and not taken:  # a cause of no hardware of its own
            inc.category, inc.more = f.category, {}
            inc.node, inc.gpus = f.node, set(f.gpus)
            inc.severity, inc.summary = self.p.rule(f.category).severity, f.reason
            taken = True
        changed = changed or taken or new_hardware
        told = ""
        if new_hardware and inc.state in ("restarting", "awaiting_approval"):
            if inc.avoided(f.node, set(f.gpus)):
                told = f"{f.reason}: the restart already left it out"
            else:  # the restart already asked for does not avoid this hardware: fence it, then restart again
                self.queue.arm_after("settle", (inc.id,), now, self.p.timing.settle_s / 2)
                self.set_state(inc, "open", now, f"more hardware after the restart: {f.reason}")
                self.gate.open(inc, self.state.topology.jobs.get(inc.job or ""), f.ts, now)
        if inc.held and inc.category in HARDWARE_CATEGORIES:
            self.publish(inc, now)
        elif changed and not inc.held:
            self.emit(inc, now)
            self.immediate(inc, now)
            if told:  # fenced after the restart that avoids it: say so (no second restart needed)
                self.out.extend(self.plan.notify(inc, now, told, inc.severity))

    def _extend_settle(self, inc: OpenIncident) -> None:
        clock = self.state.clock
        if inc.state in ("restarting", "awaiting_approval") or inc.settle_deadline is None or clock is None:
            return
        current = self.queue.due("settle", (inc.id,))
        if current is None:
            return
        wanted = max(current, clock + timedelta(seconds=self.p.timing.settle_s / 2))
        self.queue.arm("settle", (inc.id,), max(clock, min(wanted, inc.settle_deadline)))  # never in the past

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
        for o in inc.others:
            add_other(self.state, prev, o.category, o.node, o.gpus, o.reason, o.ts)
        prev.reports = inc.reports
        prev.settle_deadline = inc.settle_deadline
        self.gate.hand_over(inc, prev)  # the round of the new failure, with what was heard since it
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
                  actions_only: tuple[str, ...] | None = None, severity: str | None = None,
                  now: datetime | None = None) -> OpenIncident:
        """Record a condition of ``job`` (or, without a job, of ``node``'s hardware): new, or more evidence
        (``now``: when it is decided, if later than ``ts``, when it happened: a held write)."""
        at = max(ts, self.state.clock or ts) if now is None else now  # decided now, whenever it happened
        subject = node if job is None else None
        owner = fence_owner(self.state, node, gpus, category) if job is None else None
        if owner is not None:  # a repeat on hardware fenced for this very cause: the fence's evidence
            owner.add_evidence(evidence)
            if note_repeat(owner, reason):
                self.emit(owner, at)
            return owner
        cause = explained_by(self.causes_for_job(job), category, node or node_hint, ts,
                             self.p.timing.hardware_lookback_s) if job is not None else None
        if cause is not None:  # a consequence of the job's hardware root cause: its evidence, not a cause
            cause.add_evidence(evidence)
            note = f"{reason} (a consequence of {cause.category}, not a second cause)"
            if note not in cause.summary:
                cause.summary = f"{cause.summary}; {note}"
                self.emit(cause, at)
            return cause
        inc = self.state.condition(job, subject, category)
        if inc is not None and inc.state not in DONE:
            inc.add_evidence(evidence)
            if inc.blame(node or node_hint, set(gpus)):
                self.emit(inc, at)
                self.immediate(inc, at, actions_only)
            return inc
        f = Finding(category, ts, node or node_hint, gpus, reason, evidence)
        inc = self._new(job, node, f)
        inc.severity = severity or inc.severity
        if job:
            self.state.job_history.setdefault(job, []).append(inc.ref)
        self.state.set_condition(job, subject, category, inc)
        self.emit(inc, at)
        self.immediate(inc, at, actions_only)
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
        cmds = self.plan.immediate(inc, now, only)
        if inc.tell_at is not None and not self.queue.armed("tell", (inc.id,)):
            self.queue.arm("tell", (inc.id,), max(now, inc.tell_at))  # the facts changed too soon: tell them then
        self.out.extend(cmds)
        held = self.plan.blast.held_reasons(cmds)
        if held:  # the incident says why its fences wait for a person
            why = f"blast radius: {len(held)} fence(s) wait for approval ({held[0]})"
            inc.summary = f"{inc.summary}; {why}" if inc.summary else why
        if cmds and inc.state == "open" and inc.category in HARDWARE_CATEGORIES:
            self.set_state(inc, "mitigating", now)
        elif held:
            self.emit(inc, now)

    def pin(self, inc: OpenIncident, now: datetime) -> None:
        """Before its restart is decided (the reports are in): a culprit the evidence pins to one node is
        cordoned, so the gate counts it fenced and the restart leaves it out (:mod:`correlators.pinned`)."""
        node = pinned_node(self.state, inc)
        if node is None or self.state.ledger.is_fenced(node):
            return
        cmds = self.plan.fence_node(inc, node, now)
        if cmds:
            inc.summary = f"{inc.summary}; {pinned_text(self.state, inc, node)}"
            self.out.extend(cmds)
            self.emit(inc, now)
            self.immediate(inc, now, ("notify",))

    def tell(self, inc: OpenIncident, now: datetime) -> None:
        """The ``tell`` timer: the facts that changed inside the notify interval are told now (once)."""
        inc.tell_at = None
        if not inc.held and inc.state not in FINISHED:
            self.out.extend(self.plan.immediate(inc, now, ("notify",)))

    def emit(self, inc: OpenIncident, now: datetime) -> None:
        """A new version of the incident; published unless it is held. Its summary ends with what its
        restart gate waits for, while it waits (the current fact, never kept in the summary itself)."""
        inc.version += 1
        inc.updated_at = now
        if inc.held:
            return
        topo = self.state.topology
        gpu_ids = [topo.gpu_id(inc.node, i) for i in sorted(inc.gpus)] if inc.node else []
        waiting = waiting_text(inc.gate.waiting) if inc.gate is not None and not inc.gate.passed else ""
        pin = pinned_node(self.state, inc) if inc.category not in HARDWARE_CATEGORIES else None
        fence = self.state.ledger.nodes.get(pin) if pin is not None else None
        pinned = pinned_text(self.state, inc, pin) if pin is not None and fence and fence.incident == inc.id \
            and PINNED not in inc.summary else ""
        summary = "; ".join(x for x in (inc.summary, pinned, waiting) if x)
        self.out.append(inc.to_model(gpu_ids, topo.gpu_id, summary))
        self.out.extend(second_incidents(inc, inc.version, topo.gpu_id, lambda c: self.p.rule(c).severity))
        if self.watcher is not None:
            self.watcher.on_version(inc, now)

    def set_state(self, inc: OpenIncident, state: str, now: datetime, why: str = "") -> None:
        if inc.state != state:
            inc.state = state
            if why:
                inc.summary = f"{inc.summary}; {why}" if inc.summary else why
            if state in FINISHED:
                self.gate.close(inc)
            self.emit(inc, now)

    def open_for_job(self, job: str) -> list[OpenIncident]:
        """The job's incidents not finished yet, its held failure included."""
        live = [i for i in self.state.history(job) if i.state not in FINISHED]
        held = self.state.failure_of(job)
        return live + ([held] if held is not None and held.held else [])

    def causes_for_job(self, job: str) -> list[OpenIncident]:
        """What may explain a consequence in ``job`` (:func:`~correlators.belonging.explained_by`): the job's
        incidents not finished -- or closed by the end of its run, when it has not run again since (a cancel
        heard between the node's verdict and the write it failed does not make the write a cause) -- then the
        job-less hardware incidents of its nodes (a node whose agent fell silent is known as the node's
        before the job's own incident names it)."""
        s = self.state
        j = s.topology.jobs.get(job)
        nodes = [] if j is None else j.nodes
        own = [s.incidents[ref] for n in nodes for ref in s.node_conditions.get(n, {}).values()]
        ended = [i for i in s.history(job) if i.state == "closed"] if j is not None and j.over else []
        return self.open_for_job(job) + ended + [i for i in own if i.job is None and i.state != "closed"]
