"""Witnesses of a hang: what, besides the clock, says a job's steps stopped because the job is stuck.

A hang is timed against the job's own step cadence (:mod:`correlators.rules.training`). The cadence is
*known* once the current run has shown ``thresholds.hang_min_intervals`` step-to-step intervals (the wait
from the run's start to its first step is start-up -- loading, compiling, the first collective -- not a
cadence). The rule, **cold start**: until then the clock alone never decides; a hang verdict needs a
witness that the job is not merely slow:

* **the GPUs** -- most of the job's GPUs were sampled since its last step and every such reading is
  either *spinning* (busy, >= ``busy_util_pct``, at under ``low_power_fraction`` of the GPU's power while
  the run trained: ranks waiting in a collective) or *idle* (utilisation <= ``hang_idle_util_pct`` in
  every reading of the later half of the wait: nothing runs on them); one reading of real work refutes it;
* **the trainer** -- its heartbeat says it has been in one step for longer than the hang bound ("in step
  N for T s"; a heartbeat that names only its step is timed from the last step report, and only when it
  names that step or the next: a trainer that reports every 10th step may be well past it).

A run that has not stepped at all has no hang timer (a slow first step is start-up); and a job whose
cadence is unknown is never restarted from nothing on the clock's word alone.

Pure functions over the engine's state; the training rules call them.
"""

from __future__ import annotations

import statistics
from datetime import datetime

from correlators.job_progress import JobProgress
from correlators.policy import Thresholds
from correlators.state import EngineState
from correlators.topology import Job

__all__ = ["cadence_known", "gpu_witness", "heartbeat_witness", "spinning"]


def cadence_known(prog: JobProgress, t: Thresholds) -> bool:
    """The current run has shown enough step-to-step intervals for the clock alone to judge a hang."""
    return prog.run_intervals >= t.hang_min_intervals


def spinning(state: EngineState, job: Job, stopped: datetime, t: Thresholds) -> bool | None:
    """True: most of the job's GPUs were sampled since ``stopped`` and every such reading is busy at low
    power (against the GPU's own readings before, while the run trained); False: a reading says otherwise;
    None: too few yet."""
    seen = 0
    places = list(job.rank_of)
    started = state.job_progress(job.name).run_started
    for node, idx in places:
        health = state.health.get(node, {}).get(idx)
        readings = list(health.recent) if health is not None else []
        after = [r for r in readings if r[0] > stopped]
        before = [r[2] for r in readings if r[0] <= stopped and r[2] is not None
                  and (started is None or r[0] >= started)]
        if not after:
            continue
        if not before:
            return None
        seen += 1
        training = statistics.median(before)
        for _, util, power in after:
            if util is None or power is None or util < t.busy_util_pct or power > t.low_power_fraction * training:
                return False
    return True if places and seen * 2 >= len(places) else None


def _idle(state: EngineState, job: Job, stopped: datetime, t: Thresholds) -> bool:
    """Most of the job's GPUs were sampled since ``stopped`` (the later half of the wait) and every such
    reading is idle."""
    places = list(job.rank_of)
    seen = 0
    for node, idx in places:
        health = state.health.get(node, {}).get(idx)
        after = [r for r in (health.recent if health is not None else ()) if r[0] > stopped]
        if not after:
            continue
        if any(util is None or util > t.hang_idle_util_pct for _, util, _ in after):
            return False
        seen += 1
    return bool(places) and seen * 2 >= len(places)


def gpu_witness(state: EngineState, job: Job, stopped: datetime, now: datetime, t: Thresholds) -> str | None:
    """What the job's GPUs say about the stop, when they say it is a hang (None: they do not, or not yet)."""
    if spinning(state, job, stopped, t) is True:
        return (f"every GPU of the job is busy (>= {t.busy_util_pct:g}% utilisation) at under "
                f"{t.low_power_fraction:.0%} of its training power: ranks spinning in a collective")
    if _idle(state, job, stopped + (now - stopped) / 2, t):
        return f"every GPU of the job sampled lately is idle (<= {t.hang_idle_util_pct:g}% utilisation)"
    return None


def heartbeat_witness(prog: JobProgress, bound_s: float) -> str | None:
    """The trainer's newest heartbeat, when it says the job has been in one step longer than ``bound_s``."""
    last, hb, in_step = prog.last_step_ts, prog.heartbeat_ts, prog.heartbeat_in_step_s
    if last is None or hb is None or hb <= last or in_step is None or in_step < bound_s:
        return None
    step = prog.heartbeat_step
    which = f"step {step}" if step is not None else "its current step"
    return f"its trainer says it has been in {which} for {in_step:.0f}s (over the {bound_s:.0f}s bound)"
