"""Verification: a restarted job is recovered only once it holds its pre-failure throughput.

A recovery that merely runs is not one: a slow replacement or a degraded link can leave a job
stepping at half its speed for hours. Once the job starts again (``job_started`` after the
restart went out) its incident is *verifying*, and it is resolved when all of these hold:

* it has stepped ``timing.progress_steps`` past the checkpoint it restarted from;
* its loss is finite in the new run;
* its throughput -- the median of the new run's last few ``samples_per_s`` readings -- is at least
  ``timing.progress_throughput`` of the pre-failure baseline (the median before the failure, scaled
  to the new run's size when an elastic job shrank), and has stayed there for ``timing.verify_hold_s``.

A run that steps but stays below that share for ``timing.verify_shortfall_s`` is escalated with a
notify naming the shortfall (a slow recovery that catches up within it resolves); one that makes
no progress within ``timing.verify_timeout_s`` is escalated too. Without throughput readings the
steps alone decide, as before. A job whose trainer reports no throughput proves progress by steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from correlators.incident_state import OpenIncident
from correlators.lifecycle import IncidentLifecycle
from correlators.planner import Planner
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.timers import TimerKey, TimerName

__all__ = ["VerificationRules"]


class VerificationRules:
    """Verifying -> resolved or escalated. The scheduler rules call :meth:`start_verifying` (the job started
    again), recovery :meth:`verify_run` (the scheduler had started it before a restart was due), the training
    rules :meth:`check_progress` (a step)."""

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
        return {"verify": OnTimer(self._timer_verify, at_end=False)}

    def start_verifying(self, job: str, now: datetime) -> OpenIncident | None:
        """The job started again: a failure whose restart went out now has to prove progress (returned)."""
        inc = self.state.failure_of(job)
        if inc and inc.state in ("restarting", "awaiting_approval", "mitigating", "open") and inc.restart_attempts:
            self.verify_run(inc, now, now)
            return inc
        return None

    def verify_run(self, inc: OpenIncident, started: datetime, now: datetime, why: str = "") -> None:
        """``inc``'s job runs again since ``started`` (its restart's run, or one the scheduler started itself):
        it has to prove progress."""
        inc.verify_ok_since = inc.verify_short_since = None
        inc.reran = inc.reran or started
        self.life.set_state(inc, "verifying", now, why)
        self.queue.arm_after("verify", (inc.id,), now, self.p.timing.verify_timeout_s)

    def check_progress(self, job: str, now: datetime) -> None:
        """A training step of a verifying job: resolve, keep verifying, or escalate a shortfall."""
        inc = self.state.failure_of(job)
        if inc is None or inc.state != "verifying":
            return
        t = self.p.timing
        prog = self.state.job_progress(job)
        if prog.last_step is None or prog.last_step < (inc.restored_step or 0) + t.progress_steps:
            return
        if prog.run_loss_bad:
            inc.verify_ok_since = None
            return
        base, rate = self._baseline(inc), prog.run_rate()
        if not base or rate is None:
            self._resolve(inc, now, f"progressing again at step {prog.last_step}")
            return
        share = rate / base
        if share >= t.progress_throughput:
            inc.verify_short_since = None
            inc.verify_ok_since = inc.verify_ok_since or now
            if (now - inc.verify_ok_since).total_seconds() >= t.verify_hold_s:
                self._resolve(inc, now, f"progressing again at step {prog.last_step}, {rate:.0f} samples/s "
                                        f"({share:.0%} of the {base:.0f} before the failure)")
            return
        inc.verify_ok_since = None
        inc.verify_short_since = inc.verify_short_since or now
        slow_for = (now - inc.verify_short_since).total_seconds()
        if slow_for >= t.verify_shortfall_s:
            self._escalate(inc, now, f"the restarted job runs at {rate:.0f} samples/s, {share:.0%} of the {base:.0f} "
                                     f"before the failure, for {slow_for / 60:.0f} min (recovered means at least "
                                     f"{t.progress_throughput:.0%} held {t.verify_hold_s / 60:g} min): look for a slow "
                                     "replacement or a degraded link", "recovery below its pre-failure throughput")

    def _baseline(self, inc: OpenIncident) -> float | None:
        """The pre-failure throughput, scaled to the size the job runs at now (an elastic job that shrank by
        a node is held to the share of the baseline its GPUs can do)."""
        base, before = inc.baseline_throughput, inc.baseline_gpus
        job = self.state.topology.jobs.get(inc.job or "")
        if base is None or not before or job is None or not job.world_size:
            return base
        return base * min(1.0, job.world_size / before)

    def _resolve(self, inc: OpenIncident, now: datetime, why: str) -> None:
        self.queue.cancel("verify", (inc.id,))
        inc.load_failures = 0
        self.life.set_state(inc, "resolved", now, why)

    def _escalate(self, inc: OpenIncident, now: datetime, message: str, why: str) -> None:
        self.queue.cancel("verify", (inc.id,))
        self.out.extend(self.plan.notify(inc, now, message, "page"))
        self.life.set_state(inc, "escalated", now, why)

    def _timer_verify(self, key: TimerKey, due: datetime) -> None:
        inc = self.state.incident(str(key[0]))
        if inc is None or inc.state != "verifying":
            return
        prog = self.state.job_progress(inc.job or "")
        base, rate = self._baseline(inc), prog.run_rate()
        if prog.run_steps and base and rate is not None and rate < base * self.p.timing.progress_throughput:
            self._escalate(inc, due, f"the restarted job runs at {rate:.0f} samples/s, {rate / base:.0%} of the "
                                     f"{base:.0f} before the failure", "recovery below its pre-failure throughput")
            return
        self._escalate(inc, due, "restarted job is not progressing", "no progress after restart")
