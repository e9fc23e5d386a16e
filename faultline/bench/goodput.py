"""Goodput model: GPU-hours lost to interruptions, torchrun-style restarts vs faultline's decisions.

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
* faultline: the fault is detected from its first signal (XID, exit, BMC), the
  hardware is fenced, and one restart runs on healthy resources after the
  settle window; software faults are retried once, then wait for a person.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Cause", "LLAMA3_TAXONOMY", "Assumptions", "simulate", "compare"]


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
    faultline_detect_s: float = 1.0      # first signal to fence (measured well under this by `faultline bench`)
    faultline_settle_s: float = 30       # the correlator's settle window before restarting (policy.yaml)
    faultline_hang_detect_s: float = 600  # a silent hang is still found by a timeout (training_hang/NCCL)
    software_approval_s: tuple[float, float] = (900, 3600)  # a second software failure waits for a person
    spare_capacity: bool = True          # healthy spares exist to restart on (the job is fixed-size)
    seed: int = 1
    taxonomy: tuple[Cause, ...] = field(default=LLAMA3_TAXONOMY)


def _lost_progress_s(a: Assumptions, r: random.Random) -> float:
    return r.uniform(0, a.checkpoint_interval_s)


def _baseline_s(c: Cause, a: Assumptions, r: random.Random) -> float:
    """Downtime under torchrun-style restarts in place."""
    detect = a.collective_timeout_s if c.hang else 0.0
    t = detect + r.uniform(*a.torchrun_restart_s) + a.job_reload_s
    if c.hardware:  # the restart lands on the same broken hardware: it fails again, up to the budget
        for _ in range(a.max_restarts):
            t += (a.collective_timeout_s if c.hang else 30.0) + r.uniform(*a.torchrun_restart_s) + a.job_reload_s
        t += r.uniform(*a.human_fix_s) + r.uniform(*a.torchrun_restart_s) + a.job_reload_s
    return t


def _faultline_s(c: Cause, a: Assumptions, r: random.Random, software_seen: dict[str, int]) -> float:
    """Downtime when faultline fences the hardware and restarts once elsewhere."""
    detect = a.faultline_hang_detect_s if c.hang else a.faultline_detect_s
    t = detect + a.faultline_settle_s + r.uniform(*a.torchrun_restart_s) + a.job_reload_s
    if c.hardware and not a.spare_capacity:
        t += r.uniform(*a.human_fix_s)
    if not c.hardware:
        software_seen[c.name] = software_seen.get(c.name, 0) + 1
        if software_seen[c.name] > 1:  # retried once automatically; then a person approves
            t += r.uniform(*a.software_approval_s)
    return t


def simulate(a: Assumptions) -> dict[str, float]:
    """Total GPU-hours lost under each policy (the same draw of interruptions for both)."""
    r = random.Random(a.seed)
    events = [c for c in a.taxonomy for _ in range(c.count)]
    r.shuffle(events)
    base = fl = 0.0
    software_seen: dict[str, int] = {}
    for c in events:
        progress = _lost_progress_s(a, r)
        base += progress + _baseline_s(c, a, random.Random(r.random()))
        fl += progress + _faultline_s(c, a, random.Random(r.random()), software_seen)
    gpu_h = a.gpus / 3600
    return {"interruptions": len(events), "baseline_lost_gpu_hours": base * gpu_h,
            "faultline_lost_gpu_hours": fl * gpu_h}


def compare(a: Assumptions | None = None, runs: int = 20) -> dict[str, Any]:
    """Median over ``runs`` seeds, with every assumption stated."""
    a = a or Assumptions()
    results = [simulate(Assumptions(**{**asdict(a), "seed": a.seed + i, "taxonomy": a.taxonomy}))
               for i in range(runs)]
    med = {k: sorted(r[k] for r in results)[runs // 2] for k in results[0]}
    total_gpu_h = a.gpus * a.days * 24
    assumptions = {k: v for k, v in asdict(a).items() if k != "taxonomy"}
    assumptions["taxonomy"] = {c.name: {"count": c.count, "stays_broken": c.hardware, "hang": c.hang}
                               for c in a.taxonomy}
    return {
        "baseline_lost_gpu_hours": round(med["baseline_lost_gpu_hours"]),
        "faultline_lost_gpu_hours": round(med["faultline_lost_gpu_hours"]),
        "ratio": round(med["baseline_lost_gpu_hours"] / med["faultline_lost_gpu_hours"], 2),
        "baseline_goodput": round(1 - med["baseline_lost_gpu_hours"] / total_gpu_h, 4),
        "faultline_goodput": round(1 - med["faultline_lost_gpu_hours"] / total_gpu_h, 4),
        "interruptions": int(med["interruptions"]),
        "runs": runs,
        "assumptions": assumptions,
    }
