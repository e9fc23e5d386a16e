"""The pure parts of ``faultline bench --real-job``: the seeded fault schedule, ETTR accounting, the prediction.

Schedule (:func:`schedule`): the run of ``duration_s`` is cut into ``n = max(1, round(duration_s / mtbf_s))``
equal windows, one fault in each, at a uniform moment of the window's middle (its 25 %..75 %), so a fault
does not strike a job still coming back from the one before. The kinds are a seeded shuffle of ``kinds``
repeated, so every kind appears once ``n >= len(kinds)``. A ``predictable`` fault warns first: its warning
starts ``lead_s`` before the fatal moment, on the GPU slot its rank runs on then (it may start in an earlier
window, never in the run's first 5 %; where it cannot, that window gets the next kind).
The same schedule is played to both arms.

ETTR (:func:`account`): the useful step-seconds are the steps that were not later redone, nor lost -- the
job's progress at the end: the step it has reached if it is still running then, else the step of the newest
checkpoint it would come back from (work since then is lost, whether or not the run was long enough to
redo it) -- times the job's step time (the median gap between consecutive steps of one run). Step numbers
are the job's own progress (a restart resumes after its checkpoint's step), so a step run twice counts once.
ETTR is that over the arm's wall time, at most 1.

Prediction (:func:`predict`): faultline's goodput model (:func:`faultline.bench.goodput.ettr`) for the same
run: ``ETTR = (T - L - S_n * S) / T`` with ``T`` the wall time, ``S`` the measured save time,
``S_n = (T - L) / I`` the saves made, and the lost time ``L = launch + D + sum over faults of W_f``:
``launch`` the first start's measured time to its first step, ``D`` the measured time the job was not
running after that (:func:`down_s`), ``W_f`` the expected work lost since the last checkpoint, ``I / 2`` for a
checkpoint interval ``I``, for each fault that killed or stopped a worker while the job was stepping (0 for a warned fault whose
checkpoint-now was saved before it struck). The times down are measured; what the model contributes is the
work lost per fault and the cost of saves. The MTBF is the schedule's (``T / n``).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from faultline.bench.goodput import Assumptions, ettr

__all__ = ["KINDS", "Fault", "Accounting", "schedule", "runs", "account", "downtime_s", "down_s", "stepping_at", "predict"]

KINDS = ("sigkill", "xid", "hang", "predictable")
"""``sigkill``: a rank is killed (SIGKILL), the hardware is fine. ``xid``: a fatal XID 79 on the GPU slot
of a rank, whose worker dies; the slot stays broken until repaired. ``hang``: a rank stops stepping
(SIGSTOP). ``predictable``: that GPU slot runs hot with thermal slowdown for ``lead_s``, then a fatal XID."""


@dataclass(frozen=True)
class Fault:
    at_s: float       # the fatal moment, seconds from the arm's start
    kind: str         # one of KINDS
    rank: int         # the rank struck (xid, predictable: the GPU slot that rank runs on then)
    lead_s: float = 0.0  # predictable: the warning starts this long before ``at_s``

    @property
    def warn_s(self) -> float:
        return self.at_s - self.lead_s


def schedule(seed: int, duration_s: float, mtbf_s: float, ranks: int, kinds: Sequence[str] = KINDS,
             lead_s: float = 345.0) -> list[Fault]:
    """The seeded fault schedule (the rule is the module's)."""
    r = random.Random(seed)
    n = max(1, round(duration_s / mtbf_s))
    width = duration_s / n
    order = list(kinds)
    r.shuffle(order)
    faults: list[Fault] = []
    k = 0
    for w in range(n):
        start = w * width
        at = start + r.uniform(0.25, 0.75) * width
        for _ in range(len(order)):
            kind = order[k % len(order)]
            k += 1
            if kind != "predictable" or at - lead_s >= 0.05 * duration_s:
                break
        else:
            continue
        faults.append(Fault(round(at, 1), kind, r.randrange(ranks), lead_s if kind == "predictable" else 0.0))
    return faults


Step = tuple[float, int]  # (seconds from the arm's start, step number), rank 0's


def runs(steps: Sequence[Step], gap_factor: float = 5.0) -> list[list[Step]]:
    """Rank 0's steps cut into runs: a new run where the step number is not the one after the last, or
    where the gap is over ``gap_factor`` times the median gap (a resume just after a save)."""
    if not steps:
        return []
    gaps = [b[0] - a[0] for a, b in zip(steps, steps[1:], strict=False) if b[1] == a[1] + 1]
    usual = statistics.median(gaps) if gaps else 0.0
    out: list[list[Step]] = [[steps[0]]]
    for prev, cur in zip(steps, steps[1:], strict=False):
        if cur[1] != prev[1] + 1 or (usual > 0 and cur[0] - prev[0] > gap_factor * usual):
            out.append([])
        out[-1].append(cur)
    return out


@dataclass(frozen=True)
class Accounting:
    wall_s: float
    step_s: float           # the job's step time: the median gap inside a run
    steps_run: int          # every step run, redone ones included
    useful_steps: int       # the job's progress at the end (the steps neither redone nor lost)
    ettr: float

    @property
    def redone_steps(self) -> int:
        return self.steps_run - self.useful_steps


def account(steps: Sequence[Step], wall_s: float, saved: Sequence[Step] = ()) -> Accounting:
    """ETTR of an arm from rank 0's steps and its checkpoint saves (``saved``: when, which step) inside its
    wall time (the rule is the module's)."""
    inside = sorted((t, s) for t, s in steps if 0 <= t <= wall_s)
    cut = runs(inside)
    gaps = [b[0] - a[0] for run in cut for a, b in zip(run, run[1:], strict=False)]
    step_s = statistics.median(gaps) if gaps else 0.0
    progress = 0
    if cut:
        last_t, last_step = cut[-1][-1]
        if wall_s - last_t <= max(5 * step_s, 1.0):  # still running at the end: its work is there
            progress = last_step
        else:  # down at the end: it comes back from its newest checkpoint, the rest is lost
            progress = max((s for t, s in saved if t <= wall_s and s <= last_step), default=0)
    return Accounting(wall_s, step_s, len(inside), progress,
                      min(1.0, progress * step_s / wall_s) if wall_s > 0 else 0.0)


def downtime_s(steps: Sequence[Step], at_s: float, wall_s: float) -> float:
    """From a fault to the first step of a run that started after it (to the end of the run, ``wall_s``,
    when the job never stepped again)."""
    for run in runs(sorted(steps)):
        if run[0][0] > at_s:
            return min(run[0][0], wall_s) - at_s
    return max(0.0, wall_s - at_s)


def down_s(steps: Sequence[Step], wall_s: float) -> float:
    """The time the job was not stepping after it first stepped: every gap between two runs (less the one
    step time a run's last step took), and from the last step to the end when it was down then."""
    cut = runs(sorted((t, s) for t, s in steps if 0 <= t <= wall_s))
    if not cut:
        return 0.0
    gaps = [b[0] - a[0] for run in cut for a, b in zip(run, run[1:], strict=False)]
    step_s = statistics.median(gaps) if gaps else 0.0
    down = sum(max(0.0, b[0][0] - a[-1][0] - step_s) for a, b in zip(cut, cut[1:], strict=False))
    tail = wall_s - cut[-1][-1][0]
    return down + (tail if tail > max(5 * step_s, 1.0) else 0.0)


def stepping_at(steps: Sequence[Step], at_s: float, step_s: float) -> bool:
    """Whether the job was stepping when a fault struck (a step in the ``5 x step_s`` before it): only
    then does the fault lose the work since the checkpoint."""
    return any(at_s - max(5 * step_s, 1.0) <= t <= at_s for t, _ in steps)


def predict(wall_s: float, faults: int, interval_s: float, save_s: float, launch_s: float, down: float,
            saved_before: int = 0) -> float:
    """The goodput model's ETTR for this run (the formula is the module's): ``faults`` that struck the job
    while it was stepping, of which ``saved_before`` lost no work (a checkpoint-now saved before them),
    ``down`` the measured time it was not running after its launch."""
    lost_s = launch_s + down + (faults - saved_before) * interval_s / 2
    a = Assumptions(gpus=1, days=wall_s / 86_400, checkpoint_interval_s=interval_s, checkpoint_save_s=save_s)
    return ettr(a, lost_s / 3600)
