"""Checkpoint advice from the archive: `faultline report checkpoints` (issue 29).

Per job (its latest run), from the archive's ``checkpoint_advice`` view (migration 9,
:mod:`sinks.archive.advice_views`), the rule:

* **interval** ``τ``: the median gap between the job's ``checkpoint_saved`` events (a median, so the
  gaps across a failure or a pause do not count); with fewer than two saves, the interval its
  ``job_started`` declared (``interval_source`` says which);
* **save time** ``δ``: the mean of its saves' reported ``seconds``;
* **MTBF** ``M``: the fleet's hardware failures (failure incidents whose category blames hardware)
  per GPU-hour of exposure (each node's GPUs from its first inventory to the end of the history),
  for the job's GPU model (the model of most of its nodes); with fewer than
  :data:`~sinks.archive.advice_views.MIN_FAILURES` of those, the whole fleet's; with fewer than that
  too, the published prior (Llama 3: 419 interruptions in 54 days on 16,384 GPUs). Failures strike
  each GPU independently, so the job's MTBF is ``1 / (rate × its GPUs)``. ``failures`` says how many
  failures the rate rests on (what the archive had, even where the prior was used);
* **advised interval** (Young): ``τ* = sqrt(2 · M · δ)``, clamped to [5 min, 24 h]. Daly's higher-order
  refinement moves it by under ``(1/3)·sqrt(δ / 2M)`` of itself (under 2 % whenever δ < M / 1,800),
  so the first-order rule is kept, and it is the exact minimum of the cost model below;
* **cost**: the share of the job's wall time lost to checkpointing, first order:
  ``W(τ) = δ / τ + (τ + δ) / (2M)`` -- the saves' overhead plus, per failure (one every ``M``), the
  work since the last checkpoint (on average half an interval, and the save under way). Restarts cost
  the same at any interval and are left out. GPU-hours per day: ``W(τ) × GPUs × 24`` (``W`` at most 1);
  ``cost_gpu_hours_per_day`` is ``W(τ) − W(τ*)`` of it, what following the advice wins back.
"""

from __future__ import annotations

import math
from typing import Any

from sinks.archive.advice_views import (
    MAX_INTERVAL_S,
    MIN_FAILURES,
    MIN_INTERVAL_S,
    PRIOR,
    PRIOR_RATE_PER_GPU_HOUR,
)
from sinks.archive.store import Archive

__all__ = ["COLUMNS", "RULE", "YOUNG_RULE", "checkpoint_advice", "young_interval_s"]

#: Young's interval, as said to people (the advice's first clause; :func:`young_interval_s` computes it).
YOUNG_RULE = "advised interval = sqrt(2 * MTBF * save time) (Young), clamped to [5 min, 24 h]"
RULE = (f"{YOUNG_RULE}; GPU-hours lost per "
        "day at interval t = (save/t + (t + save)/(2 * MTBF)) * GPUs * 24; cost = that at the job's interval "
        "minus that at the advised one")

COLUMNS = ("job", "gpus", "gpu_name", "saves", "interval_s", "interval_source", "save_s", "last_save_at",
           "mtbf_basis", "failures", "exposure_gpu_hours", "mtbf_h", "advised_interval_s",
           "lost_gpu_hours_per_day_now", "lost_gpu_hours_per_day_advised", "cost_gpu_hours_per_day")
"""What each job's row holds, in order (``--json`` and the table)."""


def young_interval_s(mtbf_s: float, save_s: float) -> float:
    """The advised interval of :data:`RULE` in seconds: Young's ``sqrt(2 · MTBF · save)``, clamped to
    [:data:`~sinks.archive.advice_views.MIN_INTERVAL_S`, :data:`~sinks.archive.advice_views.MAX_INTERVAL_S`]
    -- what the ``checkpoint_advice`` view computes in SQL (``advised_s``), for a model or a report that has
    the MTBF and the save time in hand."""
    return min(max(math.sqrt(2 * mtbf_s * save_s), MIN_INTERVAL_S), MAX_INTERVAL_S)


def checkpoint_advice(archive: Archive) -> dict[str, Any]:
    """Every job's advice, the costliest difference first, with the rule, the prior and the bounds."""
    rows = archive.query(f"SELECT {', '.join(COLUMNS)} FROM checkpoint_advice")
    return {
        "rule": RULE,
        "min_failures": MIN_FAILURES,
        "prior": {**PRIOR, "rate_per_gpu_hour": PRIOR_RATE_PER_GPU_HOUR},
        "bounds_s": [MIN_INTERVAL_S, MAX_INTERVAL_S],
        "jobs": rows,
    }
