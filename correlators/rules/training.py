"""Rules over what training processes and the trainer report: collectives, crashes, progress, checkpoints."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta

from correlators.attribution import exit_category
from correlators.findings import Finding
from correlators.lifecycle import DONE, IncidentLifecycle
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.rules.recovery import RecoveryRules
from correlators.timers import TimerKey, TimerName
from streams import events as ev

__all__ = ["TrainingRules"]

# Signals a process dies of by its own fault (native code crashed); SIGTERM, SIGKILL and SIGABRT
# are how a launcher or the NCCL watchdog tears the others down: consequences, not causes.
CRASH_SIGNALS = {4: "SIGILL", 7: "SIGBUS", 8: "SIGFPE", 11: "SIGSEGV"}


class TrainingRules:
    """Job-level sources: NCCL, CUDA and Python errors, worker exits, the trainer's steps, checkpoints and
    heartbeats. Failures go to the lifecycle; each step is also a chance for recovery to see progress."""

    def __init__(self, ctx: RuleContext, lifecycle: IncidentLifecycle, recovery: RecoveryRules) -> None:
        self.state = ctx.state
        self.p = ctx.policy
        self.life = lifecycle
        self.recovery = recovery
        self.queue = ctx.state.timers

    def event_handlers(self) -> Mapping[str, EventHandler]:
        return {
            "nccl_timeout": self._on_nccl_timeout, "nccl_progress": self._on_nccl_progress,
            "nccl_error": self._on_nccl_error, "cuda_oom": self._on_cuda_oom, "cuda_error": self._on_cuda_error,
            "app_error": self._on_app_error, "worker_exit": self._on_worker_exit,
            "train_step": self._on_train_step, "trainer_heartbeat": self._on_trainer_heartbeat,
            "checkpoint_saved": self._on_checkpoint_saved, "checkpoint_failed": self._on_checkpoint_failed,
            "checkpoint_loaded": self._on_checkpoint_loaded,
        }

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        return {"hang": OnTimer(self._timer_hang, at_end=False),
                "stale": OnTimer(self._timer_stale, at_end=False)}

    # --- collectives and crashes ------------------------------------------------------
    def _on_nccl_timeout(self, e: ev.Event, b: ev.NcclTimeout) -> None:
        self._collective(e, None)

    def _on_nccl_progress(self, e: ev.Event, b: ev.NcclProgress) -> None:
        self._collective(e, b.last_enqueued)

    def _on_nccl_error(self, e: ev.Event, b: ev.NcclError) -> None:
        self._collective(e, None)

    def _collective(self, e: ev.Event, last_enqueued: int | None) -> None:
        if not e.job:
            return
        inc = self.life.failure(e.job, Finding("network_timeout", e.ts, None, reason="collective timed out",
                                               evidence=e.id))
        inc.reports.add(e.rank, last_enqueued)
        if inc.category == "network_timeout":
            job = self.state.topology.jobs.get(e.job)
            node, gpus = inc.reports.culprit(job) if job else (None, [])
            if (node, set(gpus)) != (inc.node, inc.gpus):
                inc.node, inc.gpus = node, set(gpus)
                ranks = inc.reports.culprit_ranks(job) if job else []
                inc.summary = f"collective timeout; rank(s) {ranks} never arrived" if ranks else inc.summary
                self.life.emit(inc, e.ts)

    def _on_cuda_oom(self, e: ev.Event, b: ev.CudaOom) -> None:
        self._crash(e, "cuda_oom", f"CUDA out of memory on rank {e.rank}")

    def _on_cuda_error(self, e: ev.Event, b: ev.CudaError) -> None:
        self._crash(e, "software_crash", f"CUDA error on rank {e.rank}: {b.error}")

    def _on_app_error(self, e: ev.Event, b: ev.AppError) -> None:
        self._crash(e, "software_crash", f"rank {e.rank} raised {b.exception}")

    def _on_worker_exit(self, e: ev.Event, b: ev.WorkerExit) -> None:
        if not e.job:
            return
        if b.exitcode > 0:
            why = f": {b.error.splitlines()[0][:200]}" if b.error else ""
            self._crash(e, "software_crash", f"rank {e.rank} exited with code {b.exitcode}{why}")
        elif b.exitcode == -9 and e.node and self._near(self.state.host_oom.get(e.node), e.ts):
            self._crash(e, "software_crash", f"rank {e.rank} killed by the host OOM killer")
        elif -b.exitcode in CRASH_SIGNALS:
            self._crash(e, "software_crash", f"rank {e.rank} died of {b.signal or CRASH_SIGNALS[-b.exitcode]}")
        elif (inc := self.state.failure_of(e.job)) is not None:
            inc.add_evidence(e.id)  # killed by a signal: a consequence, not a cause

    def _crash(self, e: ev.Event, category: str, reason: str) -> None:
        if not e.job:
            return
        node, gpus = self._rank_place(e.job, e.rank, e.node)
        self.life.failure(e.job, Finding(exit_category(category) or category, e.ts, node, gpus, reason, e.id))

    def _rank_place(self, job: str, rank: int | None, node: str | None) -> tuple[str | None, list[int]]:
        j = self.state.topology.jobs.get(job)
        if j is not None and rank is not None and rank in j.place_of:
            n, g = j.place_of[rank]
            return n, [g]
        return node, []

    def _near(self, then: datetime | None, now: datetime) -> bool:
        return then is not None and abs((now - then).total_seconds()) <= self.p.timing.hardware_lookback_s

    # --- the trainer's own reports ------------------------------------------------------
    def _on_train_step(self, e: ev.Event, b: ev.TrainStep) -> None:
        if not e.job:
            return
        t = self.p.thresholds
        prog = self.state.job_progress(e.job)
        prog.on_step(e.ts, b.step, b.loss, b.samples_per_s, t.loss_plateau_s)
        if b.loss is not None and not math.isfinite(b.loss):
            self.life.condition(e.job, None, "loss_anomaly", [], e.ts, f"loss is {b.loss} at step {b.step}", e.id)
        elif prog.loss_plateaued(t.loss_plateau_s, t.loss_min_improvement):
            self.life.condition(e.job, None, "loss_anomaly", [], e.ts,
                                f"loss has not improved for {t.loss_plateau_s:.0f}s", e.id)
        gap = prog.usual_step_gap() or 0.0
        self.queue.arm("hang", (e.job,), (prog.last_step_ts or e.ts)
                       + timedelta(seconds=max(t.hang_min_s, t.hang_factor * gap)))
        self.recovery.check_progress(e.job, e.ts)

    def _on_trainer_heartbeat(self, e: ev.Event, b: ev.TrainerHeartbeat) -> None:
        """The trainer is alive. Recorded in the job's progress (``heartbeat_ts``) for a hang rule that
        tells a trainer stuck inside a step from one that is gone; no decision reads it yet."""
        if e.job:
            self.state.job_progress(e.job).on_heartbeat(e.ts)

    def _timer_hang(self, key: TimerKey, due: datetime) -> None:
        name = str(key[0])
        job = self.state.topology.jobs.get(name)
        inc = self.state.failure_of(name)
        if job is None or not job.running or (inc is not None and inc.state not in DONE):
            return
        if any(n in self.state.silent for n in job.nodes):
            return  # a silent node explains it; the silence rules decide
        last = self.state.job_progress(job.name).last_step_ts
        self.life.failure(job.name, Finding("training_hang", due, None,
                                            reason=f"no training step since {last.isoformat() if last else '?'}"))

    def _on_checkpoint_saved(self, e: ev.Event, b: ev.CheckpointSaved) -> None:
        if not e.job:
            return
        self.state.job_progress(e.job).on_checkpoint_saved(e.ts, b.step, b.path)
        for cat in ("checkpoint_failure", "checkpoint_stale"):
            inc = self.state.condition(e.job, None, cat)
            if inc is not None and inc.state not in DONE:
                self.life.set_state(inc, "resolved", e.ts)
        self.arm_stale(e.job, e.ts)

    def _on_checkpoint_failed(self, e: ev.Event, b: ev.CheckpointFailed) -> None:
        if not e.job:
            return
        self.state.job_progress(e.job).checkpoint_failures += 1
        self.life.condition(e.job, None, "checkpoint_failure", [], e.ts,
                            f"checkpoint write failed at step {b.step}: {b.error[:200]}", e.id)

    def _on_checkpoint_loaded(self, e: ev.Event, b: ev.CheckpointLoaded) -> None:
        inc = self.state.failure_of(e.job or "")
        if inc is not None and inc.state == "verifying" and b.step is not None:
            inc.restored_step = b.step

    def arm_stale(self, job: str, now: datetime) -> None:
        """(Re)start the wait for the job's next good checkpoint (when its policy names an interval)."""
        j = self.state.topology.jobs.get(job)
        interval = j.spec.checkpoint.interval_s if j and j.spec.checkpoint else None
        if interval:
            self.queue.arm_after("stale", (job,), now, self.p.thresholds.checkpoint_stale_factor * interval)

    def _timer_stale(self, key: TimerKey, due: datetime) -> None:
        job = self.state.topology.jobs.get(str(key[0]))
        if job is None or not job.running:
            return
        ongoing = self.state.condition(job.name, None, "checkpoint_failure")
        failing = self.state.failure_of(job.name)
        if (ongoing and ongoing.state not in DONE) or (failing and failing.state not in DONE):
            return  # an open incident already explains the missing checkpoints
        ck = self.state.job_progress(job.name).newest_checkpoint
        since = ck.ts.isoformat() if ck else "the job started"
        self.life.condition(job.name, None, "checkpoint_stale", [], due, f"no good checkpoint since {since}",
                            None)
