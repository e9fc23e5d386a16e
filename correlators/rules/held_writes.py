"""A checkpoint write that failed is held until its job's hardware has spoken (issue #25, class 5).

A consequence is not a second cause: a write that fails because its node died (an I/O error, a
connection reset) is that node's evidence, not a ``checkpoint_failure`` of its own -- and the write's
failure is often logged *before* the node's hardware evidence (the trainer on the surviving nodes
reports at once; the dead node is known only once its silence is timed). Opening the incident at once
would page the storage team for a storage system that was fine. So a write that failed for anything but
its own storage (space, quota, a read-only or forbidden path: :func:`own_storage`) is held: the
``hold_write`` timer looks again every ``CHECK_S`` and

* folds it into the job's hardware incident once there is one within ``hardware_lookback_s`` of it, or
  into the job-less one of a node of the job (its agent fell silent before the job's incident named it:
  the lifecycle's ``causes_for_job`` and :func:`~correlators.belonging.explained_by`, asked through
  ``condition``);
* publishes it as a ``checkpoint_failure`` once ``gate.late_line_s`` has passed (a late kernel line has
  had its chance) and every node of the job has vouched for itself since the write failed (a heartbeat
  after it, not silent) or has no verdict on its way (no silence or judge timer armed: nothing will
  speak for it, and no fault of its own parts near the write waits to be judged for this job -- at its
  restart, also when another job's incident fenced the node first:
  :func:`~correlators.node_parts.unjudged_fault`); at the latest after ``MAX_HOLD_S``.

Kept in :attr:`~correlators.state.EngineState.held_writes` (the job -> its held findings), so a
snapshot and a takeover hold the same writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from correlators.belonging import explained_by
from correlators.findings import Finding
from correlators.lifecycle import IncidentLifecycle
from correlators.node_parts import unjudged_fault
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.timers import TimerKey, TimerName

__all__ = ["CHECK_S", "MAX_HOLD_S", "HeldWrites", "own_storage"]

CHECK_S = 15.0
MAX_HOLD_S = 3600.0
#: What a write failing on its own storage says (its storage's fault, whatever the hardware does).
STORAGE_WORDS = ("no space", "enospc", "errno 28", "quota", "edquot", "errno 122", "read-only", "erofs", "errno 30",
                 "permission denied", "eacces", "errno 13")


def own_storage(error: str) -> bool:
    """Did the write fail on its own storage (space, quota, permission), not because its writer died?"""
    text = error.lower()
    return any(w in text for w in STORAGE_WORDS)


class HeldWrites:
    """Failed checkpoint writes waiting for their job's hardware to speak."""

    def __init__(self, ctx: RuleContext, lifecycle: IncidentLifecycle) -> None:
        self.state = ctx.state
        self.p = ctx.policy
        self.life = lifecycle
        self.queue = ctx.state.timers

    def event_handlers(self) -> Mapping[str, EventHandler]:
        return {}

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        return {"hold_write": OnTimer(self._timer, at_end=True)}

    def failed(self, job: str, f: Finding, error: str) -> None:
        """A checkpoint write of ``job`` failed (``f``): judged now when its storage says why, else held."""
        if own_storage(error):
            self._decide(job, f, None)
            return
        self.state.held_writes.setdefault(job, []).append(f)
        if not self.queue.armed("hold_write", (job,)):
            self.queue.arm_after("hold_write", (job,), max(f.ts, self.state.clock or f.ts), CHECK_S)

    def _decide(self, job: str, f: Finding, now: datetime | None) -> None:
        self.life.condition(job, None, f.category, [], f.ts, f.reason, f.evidence, now=now)

    def _timer(self, key: TimerKey, due: datetime) -> None:
        job = str(key[0])
        keep = []
        for f in self.state.held_writes.pop(job, []):
            late = due >= f.ts + timedelta(seconds=self.p.gate.late_line_s)  # a late kernel line had its chance
            if self._explained(job, f) or late and not self._waiting(job, f.ts) \
                    or due >= f.ts + timedelta(seconds=MAX_HOLD_S):
                self._decide(job, f, due)  # folded into the hardware incident, or a checkpoint_failure of its own
            else:
                keep.append(f)
        if keep:
            self.state.held_writes[job] = keep
            self.queue.arm_after("hold_write", (job,), due, CHECK_S)

    def _explained(self, job: str, f: Finding) -> bool:
        return explained_by(self.life.causes_for_job(job), f.category, None, f.ts,
                            self.p.timing.hardware_lookback_s) is not None

    def _waiting(self, job: str, since: datetime) -> bool:
        """Is a node of the job unheard since ``since`` with a verdict on it still to come?"""
        j = self.state.topology.jobs.get(job)
        s = self.state
        for node in j.nodes if j is not None else []:
            if unjudged_fault(s, node, since, self.p.timing.hardware_lookback_s, job):
                return True  # its own parts failed as the write did: the restart will judge it, if nothing before
            beat = s.heartbeat.get(node)  # fenced or not: a job still running on a node is judged by its silence
            if beat is None or (node not in s.silent and beat.last >= since):
                continue
            if self.queue.armed("silence", (node,)) or self.queue.armed("judge", (node,)):
                return True
        return False
