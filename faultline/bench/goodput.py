"""Goodput model: GPU-hours lost to interruptions, torchrun-style restarts vs faultline's own decisions.

A Monte Carlo replay of the Llama 3 run's interruption record (16,384 GPUs,
54 days, 419 unexpected interruptions; "The Llama 3 Herd of Models", table 5)
under two recovery policies. Every assumption is a field of :class:`Assumptions`
and is printed with the result.

Per interruption, the whole synchronous job loses: the work since its last
checkpoint (uniform over the checkpoint interval), plus the time until it runs
again. What differs between the policies is that time:

* baseline (torchrun-style): detection by the collective timeout for hangs or at
  once for crashes, then an in-place restart chain; if the hardware stays
  broken, the restart fails again the same way, up to ``max_restarts``, and a
  person finally removes the bad node by hand.
* faultline: when the failure is known, whether its hardware is fenced, when the
  restart is issued, whether it waits for a person's approval and which way the job
  comes back (``params.mode``) are *measured*: :mod:`faultline.bench.interruptions`
  generates each cause's signals for a running job and runs the real engine over
  them (twice per cause, three hours apart: the engine restarts a cause it cannot
  blame on hardware on its own ``unknown_cause_auto_restarts`` times in the policy's
  ``restarts.unknown_cause_window_s``, then asks a person; the interruptions are
  spread uniformly over the run, and one within the window of the job's last such
  restart is judged as the second time was). The way back costs what the engine's
  default policy says that mode costs (``restart_modes``, :mod:`correlators.restart_mode`),
  see :func:`way_back`; a cause no restart answers waits for a person, who restarts
  it as torchrun would. ``faultline_ettr`` is this arm: the engine's modes are in it.

checkpoint_now (a stated assumption, zero unless given): ``predicted_share`` is, per
cause, the share of its occurrences preceded by a precursor that faultline answers
with ``checkpoint_now`` in time; such an occurrence loses ``checkpoint_save_s`` of
work instead of up to an interval. Only the causes whose precursor the real engine
answers in time (:func:`faultline.bench.precursors.forewarned`) may have a share.
The draws of which occurrences are forewarned come from their own random stream, so
a share of 0 leaves every other draw, and the result, as it was.

Where the time goes: every interruption's GPU-hours are split into :data:`PHASES` (lost work, detection,
fencing and gate, approval wait, requeue, reload, a person's repair), per cause and policy
(:func:`breakdown`); ``compare`` reports their means over the seeds in ``where_the_time_goes``.

Effective training time ratio (ETTR) is the share of the run's wall time spent
training: the run minus what interruptions lose minus the time checkpoints
block training (``checkpoint_save_s`` each), over the run.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from typing import Any

from correlators.policy import Policy, load_policy
from correlators.restart_mode import RestartModes
from faultline.bench.interruptions import CauseTiming, Timing, as_json, measure_all
from faultline.bench.precursors import forewarned, verify
from sinks.checkpoint_advice import YOUNG_RULE, young_interval_s

__all__ = ["Cause", "LLAMA3_TAXONOMY", "PHASES", "Assumptions", "breakdown", "simulate", "compare", "ettr",
           "way_back", "mtbf_s", "checkpoint_now_sensitivity", "advised"]


@dataclass(frozen=True)
class Cause:
    name: str
    count: int
    hardware: bool  # stays broken after a restart in place
    hang: bool      # shows up as a hang (found by the collective timeout), not a crash


# Unexpected interruptions over 54 days (Llama 3 paper, table 5). "hardware" marks the causes
# whose hardware is still broken when the job restarts in place.
LLAMA3_TAXONOMY: tuple[Cause, ...] = (
    Cause("faulty_gpu", 148, True, False),
    Cause("gpu_hbm3_memory", 72, True, False),
    Cause("software_bug", 54, False, False),
    Cause("network_switch_cable", 35, True, True),
    Cause("host_maintenance", 32, False, False),
    Cause("gpu_sram_memory", 19, True, False),
    Cause("gpu_system_processor", 17, True, False),
    Cause("nic", 7, True, True),
    Cause("nccl_watchdog_timeout", 7, False, True),
    Cause("silent_data_corruption", 6, True, False),
    Cause("gpu_thermal_interface_sensor", 6, True, False),
    Cause("ssd", 3, True, False),
    Cause("power_supply", 3, True, False),
    Cause("server_chassis", 2, True, False),
    Cause("io_network", 2, True, True),
    Cause("dependency", 2, False, False),
    Cause("other_software", 2, False, False),
    Cause("host_oom", 2, False, False),
)


@dataclass(frozen=True)
class Assumptions:
    gpus: int = 16_384
    days: float = 54
    checkpoint_interval_s: float = 1800  # a realistic interval for a run this size
    collective_timeout_s: float = 600    # NCCL watchdog default: how long a hang takes to surface
    torchrun_restart_s: tuple[float, float] = (60, 120)  # published range of torchrun's restart chain
    max_restarts: int = 3
    human_fix_s: tuple[float, float] = (1800, 5400)  # a person removes a bad node by hand (page to fix)
    job_reload_s: float = 300            # load the checkpoint and warm up, either way
    software_approval_s: tuple[float, float] = (900, 3600)  # a restart that waits for a person's approval
    spare_capacity: bool = True          # healthy spares exist to restart on (the job is fixed-size)
    # the job is launched by torchrun (torchelastic), which can restart its workers in process: the same
    # launcher the baseline's restarts in place assume; the engine sees it and may choose in_process
    in_process_launcher: bool = True
    checkpoint_save_s: float = 30.0      # training blocked per checkpoint save (either policy), for ETTR
    seed: int = 1
    # cause -> share of its occurrences forewarned in time by a precursor faultline answers with checkpoint_now
    # (an assumption; none unless given, and only for the causes precursors.forewarned() verifies)
    predicted_share: dict[str, float] = field(default_factory=dict)
    # the window the engine counts restarts of unknown causes over (None: its default policy's, 6 h)
    unknown_cause_window_s: float | None = None
    taxonomy: tuple[Cause, ...] = field(default=LLAMA3_TAXONOMY)
    # cause -> what the engine did (None: measured by running it, faultline/bench/interruptions.py)
    timings: dict[str, CauseTiming] | None = None


Phases = dict[str, float]

PHASES = ("lost_work", "detection", "fencing_gate", "approval_wait", "requeue", "reload", "human_repair")
"""Where an interruption's GPU-hours go: the work since the last checkpoint; the time until the failure is
known (the engine's first incident; for torchrun, the collective timeout of a hang); fencing and the restart
gate, until the restart command; a person's approval of it; the way back (torchrun's restart chain; for
faultline, the restart mode's seconds -- all of them for in_process, whose seconds include its reload); the
checkpoint reload and warm-up where the way back does not include it; a person's repair (no restart
decided, no spare, or a restart in place spent on broken hardware)."""


def _phases() -> Phases:
    return dict.fromkeys(PHASES, 0.0)


def _lost_progress_s(a: Assumptions, r: random.Random) -> float:
    return r.uniform(0, a.checkpoint_interval_s)


def _baseline_s(c: Cause, a: Assumptions, r: random.Random) -> Phases:
    """Downtime under torchrun-style restarts in place, by phase (its futile restarts on broken hardware
    count in detection, requeue and reload like the first)."""
    p = _phases()
    p["detection"] += a.collective_timeout_s if c.hang else 0.0
    p["requeue"] += r.uniform(*a.torchrun_restart_s)
    p["reload"] += a.job_reload_s
    if c.hardware:  # the restart lands on the same broken hardware: it fails again, up to the budget
        for _ in range(a.max_restarts):
            p["detection"] += a.collective_timeout_s if c.hang else 30.0
            p["requeue"] += r.uniform(*a.torchrun_restart_s)
            p["reload"] += a.job_reload_s
        p["human_repair"] += r.uniform(*a.human_fix_s)
        p["requeue"] += r.uniform(*a.torchrun_restart_s)
        p["reload"] += a.job_reload_s
    return p


def way_back(mode: str, modes: RestartModes, a: Assumptions) -> tuple[float, float]:
    """(requeue, reload) seconds of a restart the engine sent back by ``mode``: the mode's seconds from the
    policy (``restart_modes``), and the checkpoint reload ``job_reload_s`` on top where they do not include it.
    The policy's ``in_process_s`` is a torchelastic re-rendezvous *and reload* (:mod:`correlators.restart_mode`),
    so an in-process restart adds none; ``spare_s`` and ``requeue_s`` are the placement and the queue, and the
    job loads its checkpoint after either."""
    if mode == "in_process":
        return modes.in_process_s, 0.0
    return (modes.spare_s if mode == "spare" else modes.requeue_s), a.job_reload_s


def _faultline_s(c: Cause, a: Assumptions, r: random.Random, t: Timing, modes: RestartModes) -> Phases:
    """Downtime when faultline acts as the engine decided (``t``: this occurrence's measured timing), by phase:
    detection to the first incident, fencing and gate from there to the restart command, then approval, and
    the way back the engine chose (:func:`way_back`). A person's repair where no restart was decided (then
    the person restarts the job as torchrun would), or no spare is left. An in-process restart of a cause
    whose hardware stays broken lands on it again (an assumption of the model, not measured): it fails once
    more, found as the baseline finds it; the restart of that repeat waits for a person's approval (the
    engine restarts an unknown cause on its own once in its window) and leaves the node out (a placed cause on
    the same node again after a restart: ``recovery.PLACED_CAUSES``), back on a spare, or requeued
    without one."""
    p = _phases()
    if t.restart_s is None:  # no restart decided: a person finds the failure and restarts the job
        p["detection"] = t.detect_s if t.detect_s is not None else (a.collective_timeout_s if c.hang else 0.0)
        p["human_repair"] = r.uniform(*a.human_fix_s)
        p["requeue"] = r.uniform(*a.torchrun_restart_s)
        p["reload"] = a.job_reload_s
    else:
        p["detection"] = min(t.detect_s if t.detect_s is not None else t.restart_s, t.restart_s)
        p["fencing_gate"] = t.restart_s - p["detection"]
        if t.restart_needs_approval:
            p["approval_wait"] = r.uniform(*a.software_approval_s)
        p["requeue"], p["reload"] = way_back(t.restart_mode or "requeue", modes, a)
        if c.hardware and t.restart_mode == "in_process":  # back on the broken part: it fails again
            p["detection"] += a.collective_timeout_s if c.hang else 30.0
            p["approval_wait"] += r.uniform(*a.software_approval_s)  # the unknown cause's own restart is spent
            requeue, reload = way_back("spare" if a.spare_capacity else "requeue", modes, a)
            p["requeue"] += requeue  # the node the cause struck again after a restart is left out
            p["reload"] += reload
    if c.hardware and not a.spare_capacity:
        p["human_repair"] += r.uniform(*a.human_fix_s)  # nowhere else to run: wait for the repair
    return p


@cache
def _engine_policy() -> Policy:
    """The engine's default policy (its restart modes, its unknown-cause budget), read once per process: the
    model asks for it on every seed of every arm."""
    return load_policy(None)


def _unknown_cause(t: CauseTiming) -> bool:
    """A cause the engine restarts on its own the first time only (its budget is per job and window, all such
    causes)."""
    return t.first.restart_needs_approval is False and t.again.restart_needs_approval is True


def _shares(a: Assumptions) -> dict[str, float]:
    """``predicted_share`` checked: shares in [0, 1], and none for a cause the engine does not forewarn."""
    given = {c: v for c, v in a.predicted_share.items() if v}
    if any(not 0 <= v <= 1 for v in given.values()):
        raise ValueError(f"predicted shares must be in [0, 1]: {given}")
    unverified = sorted(set(given) - set(forewarned()))
    if unverified:
        raise ValueError(f"no checkpoint_now in time from the engine for {unverified}: their share stays 0")
    return given


def breakdown(a: Assumptions) -> tuple[dict[str, float], dict[str, dict[str, Phases]]]:
    """:func:`simulate`'s totals, and the same GPU-hours per policy, per cause, per phase of :data:`PHASES`
    (they add up to the totals)."""
    timings = a.timings if a.timings is not None else measure_all(a.in_process_launcher, a.spare_capacity)
    engine = _engine_policy()
    modes, budget = engine.restart_modes, engine.unknown_cause_auto_restarts
    window = engine.restarts.unknown_cause_window_s if a.unknown_cause_window_s is None else a.unknown_cause_window_s
    shares = _shares(a)
    r = random.Random(a.seed)
    forewarn = random.Random(f"forewarned-{a.seed}")  # its own stream: shares leave the other draws alone
    events = [c for c in a.taxonomy for _ in range(c.count)]
    r.shuffle(events)
    span = random.Random(f"when-{a.seed}")  # when each strikes, in order: its own stream too
    when = sorted(span.uniform(0, a.days * 86_400) for _ in events)
    gpu_h = a.gpus / 3600
    spent: dict[str, dict[str, Phases]] = {p: {c.name: _phases() for c in a.taxonomy} for p in ("baseline", "faultline")}
    unknown_at: list[float] = []  # the job's restarts of causes not blamed on hardware: when
    for c, at in zip(events, when, strict=True):
        progress = _lost_progress_s(a, r)
        saved = forewarn.random() < shares.get(c.name, 0.0)  # checkpoint_now landed before the failure
        timing = timings[c.name]
        occurrence = timing.first
        if _unknown_cause(timing):  # on its own unknown_cause_auto_restarts times in the policy's window
            recent = sum(1 for t in unknown_at if at - t < window)
            occurrence = timing.again if recent >= budget else timing.first
            unknown_at.append(at)
        drawn = (("baseline", progress, _baseline_s(c, a, random.Random(r.random()))),
                 ("faultline", a.checkpoint_save_s if saved else progress,
                  _faultline_s(c, a, random.Random(r.random()), occurrence, modes)))
        for policy, lost_s, phases in drawn:
            into = spent[policy][c.name]
            into["lost_work"] += lost_s * gpu_h
            for phase, seconds in phases.items():
                into[phase] += seconds * gpu_h
    totals = {"interruptions": len(events),
              "baseline_lost_gpu_hours": sum(sum(v.values()) for v in spent["baseline"].values()),
              "faultline_lost_gpu_hours": sum(sum(v.values()) for v in spent["faultline"].values())}
    return totals, spent


def simulate(a: Assumptions) -> dict[str, float]:
    """Total GPU-hours lost under each policy (the same draw of interruptions for both)."""
    return breakdown(a)[0]


def ettr(a: Assumptions, lost_gpu_hours: float) -> float:
    """Effective training time ratio: the run's time training, after interruptions and checkpoint saves."""
    total_s = a.days * 86_400
    lost_s = lost_gpu_hours * 3600 / a.gpus
    saves = max(0.0, total_s - lost_s) / a.checkpoint_interval_s
    return max(0.0, total_s - lost_s - saves * a.checkpoint_save_s) / total_s


def _medians(a: Assumptions, runs: int) -> dict[str, float]:
    return _medians_and_phases(a, runs)[0]


def _medians_and_phases(a: Assumptions, runs: int) -> tuple[dict[str, float], dict[str, Any]]:
    """The median totals over ``runs`` seeds, and where the time went: the mean GPU-hours per policy, per
    phase (``total``) and per cause and phase (``by_cause``), rounded to the GPU-hour. Means, because means
    add up across causes and phases as medians do not."""
    results = [breakdown(replace(a, seed=a.seed + i)) for i in range(runs)]
    medians = {k: sorted(r[0][k] for r in results)[runs // 2] for k in results[0][0]}
    where: dict[str, Any] = {"phases": list(PHASES), "runs": runs, "statistic": "mean GPU-hours over the seeds"}
    for policy in ("baseline", "faultline"):
        by_cause = {c: {p: round(sum(r[1][policy][c][p] for r in results) / runs) for p in PHASES}
                    for c in results[0][1][policy]}
        total = {p: round(sum(sum(r[1][policy][c][p] for c in r[1][policy]) for r in results) / runs)
                 for p in PHASES}
        where[policy] = {"total": total, "by_cause": by_cause}
    return medians, where


def _faultline_ettr(a: Assumptions, runs: int) -> float:
    return round(ettr(a, _medians(a, runs)["faultline_lost_gpu_hours"]), 4)


def mtbf_s(a: Assumptions) -> float:
    """The whole job's mean time between interruptions in the model: the run over its taxonomy's count."""
    return a.days * 86_400 / sum(c.count for c in a.taxonomy)


def _forewarned(a: Assumptions, share: float) -> Assumptions:
    return replace(a, predicted_share={c: share for c in forewarned()})


def checkpoint_now_sensitivity(a: Assumptions, runs: int, shares: tuple[float, ...] = (0, 0.25, 0.5)) -> list[Any]:
    """faultline's ETTR at ``a``'s interval when each of ``shares`` of the occurrences of every cause the
    engine forewarns (:func:`faultline.bench.precursors.forewarned`) is saved by ``checkpoint_now``."""
    return [{"predicted_share": share, "causes": list(forewarned()),
             "faultline_ettr": _faultline_ettr(_forewarned(a, share), runs)} for share in shares]


def advised(a: Assumptions, runs: int, saves: tuple[float, ...] = (30, 10, 5), share: float = 0.5) -> dict[str, Any]:
    """Young's interval (:func:`sinks.checkpoint_advice.young_interval_s`, the rule ``faultline report
    checkpoints`` advises) from the model's MTBF (:func:`mtbf_s`) and ``checkpoint_save_s``; faultline's ETTR
    there, without and with checkpoint-now at ``share``; and the same at each save time of ``saves``
    (asynchronous checkpointing blocks training for less), each at its own advised interval."""
    def at(save_s: float) -> dict[str, Any]:
        tau = young_interval_s(mtbf_s(a), save_s)
        here = replace(a, checkpoint_interval_s=tau, checkpoint_save_s=save_s)
        return {"checkpoint_save_s": save_s, "interval_s": round(tau, 1),
                "faultline_ettr": _faultline_ettr(here, runs),
                "faultline_ettr_checkpoint_now": _faultline_ettr(_forewarned(here, share), runs)}
    return {"rule": YOUNG_RULE, "mtbf_s": round(mtbf_s(a)),
            "predicted_share": share, **at(a.checkpoint_save_s), "by_save_time": [at(s) for s in saves]}


def compare(a: Assumptions | None = None, runs: int = 20,
            intervals: tuple[float, ...] = (600, 1800, 3600, 7200)) -> dict[str, Any]:
    """Median over ``runs`` seeds, with every assumption stated, the engine's measured timings, and ETTR at
    the assumed checkpoint interval and at each of ``intervals`` (the sensitivity to it).

    ``faultline_ettr`` is the faultline arm as the engine decides it, restart modes included (there is no
    separate figure "with modes"). ``checkpoint_now_sensitivity`` is that ETTR at the assumed interval for
    predicted shares 0, 0.25 and 0.5 (:func:`checkpoint_now_sensitivity`); ``advised`` is the job following
    the interval advice (:func:`advised`). Both take ``runs // 2`` seeds, as the interval sensitivity does."""
    a = a or Assumptions()
    timings = a.timings if a.timings is not None else measure_all(a.in_process_launcher, a.spare_capacity)
    a = replace(a, timings=timings)
    med, where = _medians_and_phases(a, runs)
    total_gpu_h = a.gpus * a.days * 24
    assumptions = {k: v for k, v in asdict(a).items() if k not in ("taxonomy", "timings")}
    assumptions["taxonomy"] = {c.name: {"count": c.count, "stays_broken": c.hardware, "hang": c.hang}
                               for c in a.taxonomy}
    engine = _engine_policy()
    assumptions["restart_modes_s"] = engine.restart_modes.model_dump()
    assumptions["unknown_cause_auto_restarts"] = {"restarts": engine.unknown_cause_auto_restarts,
                                                  "window_s": engine.restarts.unknown_cause_window_s}
    assumptions["checkpoint_now_lead_s"] = verify()  # per precursor: how early the real engine asked to save
    sensitivity = []
    for interval in intervals:
        at = replace(a, checkpoint_interval_s=interval)
        m = _medians(at, max(1, runs // 2))
        sensitivity.append({"checkpoint_interval_s": interval,
                            "baseline_ettr": round(ettr(at, m["baseline_lost_gpu_hours"]), 4),
                            "faultline_ettr": round(ettr(at, m["faultline_lost_gpu_hours"]), 4)})
    return {
        "baseline_lost_gpu_hours": round(med["baseline_lost_gpu_hours"]),
        "faultline_lost_gpu_hours": round(med["faultline_lost_gpu_hours"]),
        "ratio": round(med["baseline_lost_gpu_hours"] / med["faultline_lost_gpu_hours"], 2),
        "baseline_goodput": round(1 - med["baseline_lost_gpu_hours"] / total_gpu_h, 4),
        "faultline_goodput": round(1 - med["faultline_lost_gpu_hours"] / total_gpu_h, 4),
        "baseline_ettr": round(ettr(a, med["baseline_lost_gpu_hours"]), 4),
        "faultline_ettr": round(ettr(a, med["faultline_lost_gpu_hours"]), 4),
        "ettr_by_checkpoint_interval": sensitivity,
        "checkpoint_now_sensitivity": checkpoint_now_sensitivity(a, max(1, runs // 2)),
        "advised": advised(a, max(1, runs // 2)),
        "published_anchors": {"meta_llama3_effective_training_time": "> 0.90",
                              "bytedance_byterobust_ettr": 0.97},
        "where_the_time_goes": where,
        "interruptions": int(med["interruptions"]),
        "runs": runs,
        "faultline_timings_by_cause": as_json(timings),
        "assumptions": assumptions,
    }
