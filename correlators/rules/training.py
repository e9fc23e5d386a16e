"""Rules over what training processes and the trainer report: collectives, crashes, progress, checkpoints.

* **Collectives** name the ranks that never arrived; the incident's culprit and its text are
  recomputed whenever the reports change (a text never says a rank is missing once it reported).
* **Crashes** are software unless hardware explains them; a rank that dies on a GPU or node already
  fenced dies of that hardware's known fault. A signal is a consequence of a known failure (its teardown);
  a crash signal (SIGSEGV, SIGBUS, ...) is a cause, and so is a SIGKILL that is the job's first word of a
  failure (an OOM killer whose line was lost, a kill from outside). A restarted run that dies before its
  first step because its checkpoint would not load continues the incident whose restart it was
  (:mod:`correlators.rules.load_failures`).
* **Hangs** are timed against the job's own cadence: no step for max(``hang_min_s``, ``hang_factor`` x
  the longest recent step interval) plus its longest checkpoint save; found sooner (``hang_check``)
  when telemetry corroborates it -- every GPU of the job sampled since its last step busy at low power,
  ranks spinning in a collective. **Cold start** (:mod:`correlators.rules.hang_witness`): until the run
  has shown ``hang_min_intervals`` step intervals the clock alone decides nothing -- after at least
  ``hang_factor`` x ``hang_min_s`` a verdict needs a witness (the GPUs, the trainer's heartbeat), and the
  incident names it.
* **Checkpoints** go to the job's book (:mod:`correlators.checkpoints`): lineage, failures, where.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta

from correlators.attribution import exit_category
from correlators.clock import source_key
from correlators.findings import HARDWARE_CATEGORIES, Finding
from correlators.job_progress import JobProgress
from correlators.lifecycle import ACTIVE, DONE, IncidentLifecycle
from correlators.restart_gate import human
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.rules.hang_witness import cadence_known, gpu_witness, heartbeat_witness, spinning
from correlators.rules.hardware import HardwareRules
from correlators.rules.held_writes import HeldWrites
from correlators.rules.load_failures import died_loading
from correlators.rules.verification import VerificationRules
from correlators.timers import TimerKey, TimerName
from correlators.topology import Job
from streams import events as ev

__all__ = ["TrainingRules"]

# Signals a process dies of by its own fault (native code crashed); SIGTERM, SIGKILL and SIGABRT are how a
# launcher or the NCCL watchdog tears the others down: consequences, not causes -- but a SIGKILL before any
# failure of the job is known is the failure (TrainingRules._on_worker_exit).
CRASH_SIGNALS = {4: "SIGILL", 7: "SIGBUS", 8: "SIGFPE", 11: "SIGSEGV"}


class TrainingRules:
    """Job-level sources: NCCL, CUDA and Python errors, worker exits, the trainer's steps, checkpoints and
    heartbeats. Failures go to the lifecycle; each step is also a chance for recovery to see progress."""

    def __init__(self, ctx: RuleContext, lifecycle: IncidentLifecycle, verification: VerificationRules,
                 hardware: HardwareRules, held: HeldWrites) -> None:
        self.state = ctx.state
        self.p = ctx.policy
        self.life = lifecycle
        self.verification = verification
        self.hardware = hardware
        self.held = held
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
                "hang_check": OnTimer(self._timer_hang_check, at_end=False),
                "stale": OnTimer(self._timer_stale, at_end=False)}

    # --- collectives and crashes ------------------------------------------------------
    def _on_nccl_timeout(self, e: ev.Event, b: ev.NcclTimeout) -> None:
        self._collective(e, None)

    def _on_nccl_progress(self, e: ev.Event, b: ev.NcclProgress) -> None:
        self._collective(e, b.last_enqueued)

    def _on_nccl_error(self, e: ev.Event, b: ev.NcclError) -> None:
        self._collective(e, None)

    def _collective(self, e: ev.Event, last_enqueued: int | None) -> None:
        if not e.job or self._after_its_end(e.job, e.id):
            return
        inc = self.life.failure(e.job, Finding("network_timeout", e.ts, None, reason="collective timed out",
                                               evidence=e.id))
        inc.reports.add(e.rank, last_enqueued)
        if inc.category == "network_timeout":
            job = self.state.topology.jobs.get(e.job)
            node, gpus = inc.reports.culprit(job) if job else (None, [])
            ranks = inc.reports.culprit_text(job) if job else "[]"  # str() of the culprit ranks, kept as reports come
            summary = f"collective timeout; rank(s) {ranks} never arrived" if ranks != "[]" else inc.summary
            if (node, set(gpus)) != (inc.node, inc.gpus) or summary != inc.summary:
                # recomputed whenever the reports change: a rank that reported is never said to be missing
                inc.node, inc.gpus, inc.summary = node, set(gpus), summary
                now = max(self.state.clock or e.ts, e.ts)  # decided now, whenever the late report was written
                self.life.emit(inc, now)
                self.life.immediate(inc, now)  # a notify already out said other facts: say the current ones

    def _on_cuda_oom(self, e: ev.Event, b: ev.CudaOom) -> None:
        self._crash(e, "cuda_oom", f"CUDA out of memory on rank {e.rank}")

    def _on_cuda_error(self, e: ev.Event, b: ev.CudaError) -> None:
        self._crash(e, "software_crash", f"CUDA error on rank {e.rank}: {b.error}", f"{b.error} {b.message}")

    def _on_app_error(self, e: ev.Event, b: ev.AppError) -> None:
        self._crash(e, "software_crash", f"rank {e.rank} raised {b.exception}", f"{b.exception}: {b.message}")

    def _on_worker_exit(self, e: ev.Event, b: ev.WorkerExit) -> None:
        if not e.job:
            return
        known = self.state.failure_of(e.job)  # the job's failure, if one is known already
        if b.exitcode > 0:
            why = f": {b.error.splitlines()[0][:200]}" if b.error else ""
            self._crash(e, "software_crash", f"rank {e.rank} exited with code {b.exitcode}{why}", b.error or "")
        elif b.exitcode == -9 and e.node and self._near(self.state.host_oom.get(e.node), e.ts):
            self._crash(e, "software_crash", f"rank {e.rank} killed by the host OOM killer")
        elif -b.exitcode in CRASH_SIGNALS:
            self._crash(e, "software_crash", f"rank {e.rank} died of {b.signal or CRASH_SIGNALS[-b.exitcode]}")
        elif b.exitcode == -9 and (known is None or known.state not in ACTIVE):
            # SIGKILL as the first word of a failure is its cause: the teardown of a known failure sends SIGTERM
            # and SIGKILLs only what outlives it, after the first exit
            self._crash(e, "software_crash", f"rank {e.rank} was killed (SIGKILL) with nothing said: the OOM killer "
                        "whose kernel line did not reach faultline, or a kill from outside; see the node's kernel log")
        elif known is not None:
            known.add_evidence(e.id)  # killed by a signal: a consequence, not a cause

    def _crash(self, e: ev.Event, category: str, reason: str, text: str = "") -> None:
        if not e.job or self._after_its_end(e.job, e.id):
            return
        node, gpus = self._rank_place(e.job, e.rank, e.node)
        category = exit_category(category) or category
        if category == "software_crash" and died_loading(self.state, self.p, self.life, e.job, e.ts, text or reason, e.id):
            return
        fenced = self._fenced_cause(node, gpus)
        if fenced is not None and category in ("software_crash", "network_timeout"):
            category, reason = fenced[0], f"{reason}, on hardware fenced for {fenced[0]} ({fenced[1]})"
            if node is not None and node in self.state.ledger.nodes:
                gpus = []  # the whole node is what was fenced: blame it, not the rank's GPU
        self.life.failure(e.job, Finding(category, e.ts, node, gpus, reason, e.id))
        if node is not None:  # on a node whose own parts failed: the node's fault too, whatever else it is
            self.hardware.rank_crashed(node, e.ts, e.id)

    def _after_its_end(self, name: str, evidence: str) -> bool:
        """True when ``name``'s run is :attr:`~correlators.topology.Job.over`: the report is evidence of the
        job's last incident, if it has one, and opens nothing (a cancelled job is never restarted)."""
        job = self.state.topology.jobs.get(name)
        if job is None or not job.over:
            return False
        if (inc := self.state.failure_of(name)) is not None:
            inc.add_evidence(evidence)
        return True

    def _fenced_cause(self, node: str | None, gpus: list[int]) -> tuple[str, str] | None:
        """(category, incident) of the fence on the rank's GPU (or node), when it is a hardware fault's."""
        if node is None:
            return None
        ledger = self.state.ledger
        fence = ledger.nodes.get(node) or next((ledger.gpus.get(node, {}).get(g) for g in gpus
                                                if g in ledger.gpus.get(node, {})), None)
        if fence is None or fence.reason not in HARDWARE_CATEGORIES:
            return None
        owner = self.state.incident(fence.incident)
        # the owner's cause where its own culprit is this hardware (it may have grown since the fence); a fence it
        # placed for a second culprit is that culprit's cause, not the incident's
        own = owner is not None and owner.category in HARDWARE_CATEGORIES and any(
            n == node and (not held or not gpus or held & set(gpus)) for n, held in owner.hardware())
        return (owner.category if own and owner is not None else fence.reason), fence.incident

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
        last = prog.last_step_ts or e.ts
        gap, save = prog.longest_step_gap(), self._save_allowance(e.job, prog, last)
        if gap is None:  # no interval known yet: the floor times the factor
            hang, busy = t.hang_factor * t.hang_min_s, t.hang_factor * t.hang_min_s
        else:
            hang, busy = max(t.hang_min_s, t.hang_factor * gap), max(t.hang_busy_min_s, t.hang_busy_factor * gap)
        if not cadence_known(prog, t):  # cold start: never sooner than the factor times the floor (and witnessed)
            hang = t.hang_factor * max(t.hang_min_s, gap or 0.0)
        prog.hang_wait_s = hang + save
        self.queue.arm("hang", (e.job,), last + timedelta(seconds=hang + save))
        self.queue.arm("hang_check", (e.job,), last + timedelta(seconds=busy + save))
        self.verification.check_progress(e.job, e.ts)

    def _save_allowance(self, job: str, prog: JobProgress, last: datetime) -> float:
        """How long a checkpoint save may hold the steps back: the longest save seen; before one was timed,
        when the job is due for a checkpoint (its policy's interval), as long as an unknown cadence."""
        if prog.save_seconds:
            return prog.longest_save()
        j = self.state.topology.jobs.get(job)
        interval = j.spec.checkpoint.interval_s if j is not None and j.spec.checkpoint else None
        saved = prog.checkpoints.saved
        since = saved[-1].ts if saved else prog.run_started
        if interval and since is not None and (last - since).total_seconds() >= 0.9 * interval:
            return self.p.thresholds.hang_factor * self.p.thresholds.hang_min_s
        return 0.0

    def _on_trainer_heartbeat(self, e: ev.Event, b: ev.TrainerHeartbeat) -> None:
        """The trainer is alive (``heartbeat_ts``: a hang's text tells a trainer stuck inside a step from one
        that is gone); one saying it has been in one step longer than the hang bound witnesses a cold-start
        hang at once."""
        if not e.job:
            return
        prog = self.state.job_progress(e.job)
        prog.on_heartbeat(e.ts, b.step, b.in_step_s)
        job = self._hanging(e.job)
        if job is None or prog.hang_wait_s is None or cadence_known(prog, self.p.thresholds):
            return
        why = heartbeat_witness(prog, prog.hang_wait_s)
        if why is not None:
            self._cold_hang(job, prog, max(e.ts, self.state.clock or e.ts), why)

    def _hanging(self, name: str) -> Job | None:
        """The job, when it is running, has no open failure and no silent node (whose rules decide)."""
        job = self.state.topology.jobs.get(name)
        inc = self.state.failure_of(name)
        if job is None or not job.running or (inc is not None and inc.state not in DONE):
            return None
        if any(n in self.state.silent for n in job.nodes):
            return None
        return job

    def _timer_hang(self, key: TimerKey, due: datetime) -> None:
        job = self._hanging(str(key[0]))
        if job is None:
            return
        prog = self.state.job_progress(job.name)
        last = prog.last_step_ts
        if last is not None and not cadence_known(prog, self.p.thresholds):
            t = self.p.thresholds
            bound = prog.hang_wait_s or t.hang_factor * t.hang_min_s
            why = heartbeat_witness(prog, bound) or gpu_witness(self.state, job, last, due, t)
            if why is not None:
                self._cold_hang(job, prog, due, why)
            else:  # the clock alone does not decide: look again (less often as the wait grows)
                again = max(self._sample_interval(job), (due - last).total_seconds() / 4)
                self.queue.arm("hang", key, due + timedelta(seconds=again))
            return
        alive = prog.heartbeat_ts
        how = ("its trainer is alive (heartbeat " + human(alive) + ") but stuck" if alive and last and alive > last
               else "its trainer is silent too" if alive else "")
        over = f" (over its {prog.hang_wait_s:.0f}s bound: hang_factor x its longest step interval)" \
            if prog.hang_wait_s else ""
        self.life.failure(job.name, Finding("training_hang", due, None, reason="no training step since "
                                            f"{human(last) if last else '?'}{over}" + (f": {how}" if how else "")))

    def _cold_hang(self, job: Job, prog: JobProgress, at: datetime, why: str) -> None:
        """A hang before the job's cadence is known: only ever on a witness, which the incident names."""
        t = self.p.thresholds
        last = human(prog.last_step_ts) if prog.last_step_ts else "?"
        self.life.failure(job.name, Finding(
            "training_hang", at, None, reason=f"no training step since {last}, cadence not yet known "
            f"({prog.run_intervals} of {t.hang_min_intervals} step intervals), so not on the clock alone: {why}"))

    def _timer_hang_check(self, key: TimerKey, due: datetime) -> None:
        """Steps stopped a while ago: do the job's GPUs say the ranks spin in a collective (busy, low power)?"""
        job = self._hanging(str(key[0]))
        prog = self.state.job_progress(str(key[0]))
        if job is None or prog.last_step_ts is None:
            return
        t = self.p.thresholds
        verdict = spinning(self.state, job, prog.last_step_ts, t)
        if verdict is True and not cadence_known(prog, t):
            self._cold_hang(job, prog, due, gpu_witness(self.state, job, prog.last_step_ts, due, t) or "spinning")
        elif verdict is True:
            self.life.failure(job.name, Finding(
                "training_hang", due, None, reason=f"no training step since {human(prog.last_step_ts)} while every "
                f"GPU of the job is busy (>= {t.busy_util_pct:g}% utilisation) at under {t.low_power_fraction:.0%} "
                "of its training power: ranks spinning in a collective"))
        elif verdict is None and (hang := self.queue.due("hang", (job.name,))) is not None:
            later = due + timedelta(seconds=self._sample_interval(job))
            if later < hang:
                self.queue.arm("hang_check", (job.name,), later)  # not enough readings since the stop yet

    def _sample_interval(self, job: Job) -> float:
        cads = [c for n in job.nodes if (nv := self.state.nvml.get(n)) is not None and (c := nv.cadence())]
        return max(5.0, min(cads)) if cads else 30.0

    def _on_checkpoint_saved(self, e: ev.Event, b: ev.CheckpointSaved) -> None:
        if not e.job:
            return
        s = self.state  # a lagging or screened source's save is also dated by when the cell heard of it
        key = source_key(e.node, e.source)  # (CheckpointBook.restart_point: heard by the failure is after it)
        heard = s.clock if s.sources.lags(key) or s.sources.screened_now(key) else None
        s.job_progress(e.job).on_checkpoint_saved(e.ts, b.step, b.path, e.node, self._node_local(b.path),
                                                  b.seconds, heard, s.sources.stamp)
        for cat in ("checkpoint_failure", "checkpoint_stale"):
            inc = self.state.condition(e.job, None, cat)
            if inc is not None and inc.state not in DONE:
                self.life.set_state(inc, "resolved", e.ts)
        self.arm_stale(e.job, e.ts)

    def _on_checkpoint_failed(self, e: ev.Event, b: ev.CheckpointFailed) -> None:
        if not e.job:
            return
        prog = self.state.job_progress(e.job)
        book = prog.checkpoints
        if book.loading is not None and not prog.run_steps and b.step in (None, book.loading) \
                and (b.path is None or book.loading_path is None or b.path == book.loading_path) \
                and book.run_started is not None and e.ts >= book.run_started:
            book.loaded_failed(b.error[:200] or "the trainer reported it failed")  # a load, not a write
            return
        book.on_failed(b.step, b.path, e.ts, e.node, self.state.sources.stamp)  # the line's own stamp
        prog.checkpoint_failures += 1
        self.held.failed(e.job, Finding("checkpoint_failure", e.ts, None, [],
                                        f"checkpoint write failed at step {b.step}: {b.error[:200]}", e.id), b.error)

    def _on_checkpoint_loaded(self, e: ev.Event, b: ev.CheckpointLoaded) -> None:
        if not e.job or b.step is None:
            return
        # loaded, it is proven readable: a restart point of this run even if its save was never seen
        self.state.job_progress(e.job).checkpoints.on_loaded(b.step, b.path, e.ts, e.node, self._node_local(b.path))
        inc = self.state.failure_of(e.job)
        if inc is not None and inc.state == "verifying":
            inc.restored_step = b.step

    def _node_local(self, path: str | None) -> bool:
        """Written under a node-local prefix of the policy: it lives and dies with its node."""
        return path is not None and any(path == x or path.startswith(x.rstrip("/") + "/")
                                        for x in self.p.checkpoints.node_local_prefixes)

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
