"""What a job's own reports say: steps, throughput, loss, checkpoints, and that the trainer is alive."""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from correlators.state_fields import Bounded, Instant

__all__ = ["Checkpoint", "JobProgress"]

STEP_GAPS = 50  # the step cadence is the median of this many gaps
THROUGHPUT_READINGS = 30  # the baseline throughput is the median of this many readings


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
    newest_checkpoint: Checkpoint | None = None
    checkpoint_failures: int = 0
    # The newest trainer heartbeat: the training process is alive (between steps, a long
    # checkpoint, a slow first step). No rule reads it yet; it is here for a hang rule that tells
    # a trainer stuck inside a step (alive, no step) from one that is gone (silent).
    heartbeat_ts: Instant | None = None

    def on_heartbeat(self, ts: datetime) -> None:
        if self.heartbeat_ts is None or ts > self.heartbeat_ts:
            self.heartbeat_ts = ts

    def on_step(self, ts: datetime, step: int, loss: float | None, samples_per_s: float | None,
                loss_window_s: float) -> None:
        if self.last_step_ts is not None and ts > self.last_step_ts:
            self.step_gaps.append((ts - self.last_step_ts).total_seconds())
        if self.last_step_ts is None or ts >= self.last_step_ts:
            self.last_step, self.last_step_ts = step, ts
        if samples_per_s is not None and math.isfinite(samples_per_s):
            self.throughput.append(samples_per_s)
        if loss is not None and math.isfinite(loss):
            self.losses.append((ts, loss))
            while self.losses and (ts - self.losses[0][0]).total_seconds() > loss_window_s:
                self.losses.popleft()

    def on_checkpoint_saved(self, ts: datetime, step: int, path: str | None) -> None:
        if self.newest_checkpoint is None or step >= self.newest_checkpoint.step:
            self.newest_checkpoint = Checkpoint(step, path, ts)
        self.checkpoint_failures = 0

    def usual_step_gap(self) -> float | None:
        return statistics.median(self.step_gaps) if self.step_gaps else None

    def baseline_throughput(self) -> float | None:
        return statistics.median(self.throughput) if self.throughput else None

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
