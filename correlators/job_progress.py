"""What a job's own reports say: steps, throughput, loss, checkpoints, and that the trainer is alive.

Two horizons: the job as a whole (its cadence, its pre-failure throughput baseline, its
checkpoints: :class:`~correlators.checkpoints.CheckpointBook`) and its current *run* (since its
newest ``job_started``): how many steps, at what throughput, since when -- what a restart's
verification judges, and the steps a hang is timed against.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from correlators.checkpoints import CheckpointBook
from correlators.state_fields import Bounded, Instant

__all__ = ["Checkpoint", "JobProgress"]

STEP_GAPS = 50  # the step cadence is the median of this many gaps
THROUGHPUT_READINGS = 30  # the baseline throughput is the median of this many readings
RUN_READINGS = 5  # the current run's throughput is the median of this many (one slow step is not slowness)
SAVES = 8  # how long a checkpoint save takes: the longest of this many


@dataclass
class Checkpoint:
    step: int
    path: str | None
    ts: Instant


@dataclass
class JobProgress:
    last_step: int | None = None
    last_step_ts: Instant | None = None
    step_gaps: Annotated[deque[float], Bounded(STEP_GAPS)] = field(
        default_factory=lambda: deque(maxlen=STEP_GAPS))
    throughput: Annotated[deque[float], Bounded(THROUGHPUT_READINGS)] = field(
        default_factory=lambda: deque(maxlen=THROUGHPUT_READINGS))
    losses: Annotated[deque[tuple[Instant, float]], Bounded()] = field(default_factory=deque)  # loss_plateau_s
    checkpoints: CheckpointBook = field(default_factory=CheckpointBook)
    save_seconds: Annotated[deque[float], Bounded(SAVES)] = field(default_factory=lambda: deque(maxlen=SAVES))
    checkpoint_failures: int = 0
    # The newest trainer heartbeat: the training process is alive (between steps, a long
    # checkpoint, a slow first step); a hang rule reads it to tell a trainer stuck inside a step
    # (alive, no step) from one that is gone (silent).
    heartbeat_ts: Instant | None = None
    # What that heartbeat said, when it said it: the step the trainer is in and for how long (a hang's witness,
    # :mod:`correlators.rules.hang_witness`).
    heartbeat_step: int | None = None
    heartbeat_in_step_s: float | None = None
    # --- the current run
    run_started: Instant | None = None
    run_steps: int = 0
    run_first_step_ts: Instant | None = None
    run_throughput: Annotated[deque[float], Bounded(RUN_READINGS)] = field(
        default_factory=lambda: deque(maxlen=RUN_READINGS))
    run_loss_bad: bool = False  # the run's newest loss is NaN or infinite
    run_intervals: int = 0  # step-to-step intervals of this run (its start to its first step is start-up)
    hang_wait_s: float | None = None  # how long a stop may last before it is a hang, as set at the last step

    def on_heartbeat(self, ts: datetime, step: int | None = None, in_step_s: float | None = None) -> None:
        """The trainer is alive; ``step``/``in_step_s``: it says it is in that step, for that long. Without a
        duration, one that names the step after the last reported one has been in it since that report."""
        if self.heartbeat_ts is not None and ts <= self.heartbeat_ts:
            return
        if in_step_s is None and step is not None and self.last_step is not None and self.last_step_ts is not None \
                and self.last_step <= step <= self.last_step + 1 and ts > self.last_step_ts:
            in_step_s = (ts - self.last_step_ts).total_seconds()
        self.heartbeat_ts, self.heartbeat_step, self.heartbeat_in_step_s = ts, step, in_step_s

    def on_run_start(self, ts: datetime, loading: int | None, path: str | None) -> None:
        """A new run (``job_started``): its own counters start again; ``loading``: the step it is to load."""
        self.run_started, self.run_steps, self.run_first_step_ts, self.run_loss_bad = ts, 0, None, False
        self.run_intervals, self.hang_wait_s = 0, None
        self.run_throughput.clear()
        self.step_gaps.clear()  # the gap across a restart is no step interval
        self.checkpoints.on_run_start(ts, loading, path)

    def on_step(self, ts: datetime, step: int, loss: float | None, samples_per_s: float | None,
                loss_window_s: float) -> None:
        in_run = self.run_started is None or ts >= self.run_started
        since = self.last_step_ts
        if since is None or (self.run_started is not None and since < self.run_started):
            since = self.run_started  # the run's first step: its start up to it is the first interval
        if since is not None and ts > since and in_run:
            self.step_gaps.append((ts - since).total_seconds())
            if since != self.run_started or self.run_steps:
                self.run_intervals += 1  # from a step, not from the run's start
        if self.last_step_ts is None or ts >= self.last_step_ts:
            self.last_step, self.last_step_ts = step, ts
        if in_run:
            self.run_steps += 1
            if self.run_first_step_ts is None:
                self.run_first_step_ts = ts
            if loss is not None:
                self.run_loss_bad = not math.isfinite(loss)
        if samples_per_s is not None and math.isfinite(samples_per_s):
            self.throughput.append(samples_per_s)
            if in_run:
                self.run_throughput.append(samples_per_s)
        if loss is not None and math.isfinite(loss):
            self.losses.append((ts, loss))
            while self.losses and (ts - self.losses[0][0]).total_seconds() > loss_window_s:
                self.losses.popleft()

    def on_checkpoint_saved(self, ts: datetime, step: int, path: str | None, node: str | None = None,
                            local: bool = False, seconds: float | None = None, heard: datetime | None = None,
                            stamp: datetime | None = None) -> None:
        self.checkpoints.on_saved(ts, step, path, node, local, heard, stamp)
        if seconds is not None and math.isfinite(seconds) and seconds >= 0:
            self.save_seconds.append(seconds)
        self.checkpoint_failures = 0

    @property
    def newest_checkpoint(self) -> Checkpoint | None:
        """The newest valid checkpoint of the job's current lineage (:class:`CheckpointBook`)."""
        ck = self.checkpoints.newest()
        return Checkpoint(ck.step, ck.path, ck.ts) if ck else None

    def usual_step_gap(self) -> float | None:
        return statistics.median(self.step_gaps) if self.step_gaps else None

    def longest_step_gap(self) -> float | None:
        """The longest of the recent step intervals (a hang is timed against the slowest normal step)."""
        return max(self.step_gaps) if self.step_gaps else None

    def longest_save(self) -> float:
        return max(self.save_seconds) if self.save_seconds else 0.0

    def baseline_throughput(self) -> float | None:
        return statistics.median(self.throughput) if self.throughput else None

    def run_rate(self) -> float | None:
        """The current run's throughput: the median of its last few readings."""
        return statistics.median(self.run_throughput) if self.run_throughput else None

    def loss_plateaued(self, window_s: float, min_improvement: float) -> bool:
        """No improvement of at least ``min_improvement`` (a fraction) across a full window."""
        if len(self.losses) < 20:
            return False
        first_ts, last_ts = self.losses[0][0], self.losses[-1][0]
        if (last_ts - first_ts).total_seconds() < window_s * 0.95:
            return False
        q = max(1, len(self.losses) // 4)
        early = statistics.fmean(v for _, v in list(self.losses)[:q])
        late = statistics.fmean(v for _, v in list(self.losses)[-q:])
        return late > early * (1 - min_improvement)
