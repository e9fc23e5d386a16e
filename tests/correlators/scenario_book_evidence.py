"""Scenarios of "evidence belongs to the right incident" (issue #25): repeats on fenced hardware belong to
the fence; a node the collectives pin down is fenced and left out, and its owner told once per change that
matters; a consequence is not a second cause; one ticket per physical thing to repair; two root causes in
one job are two incidents.

Registered into :data:`scenario_book.SCENARIOS` (imported at the end of that module).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from builder import Capture
from scenario_book import expect, fleet, restart, scenario

S = tuple[Capture, dict[str, Any]]
Check = Callable[[dict[str, Any], Capture], list[str]]
DBE = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


def _incidents(out: dict[str, Any], job: str | None) -> list[dict[str, Any]]:
    return [i for i in out["incidents"] if i["job"] == job]


def _says(job: str | None, *words: str) -> Check:
    """The (first) incident of ``job`` says which rule decided: every one of ``words`` is in its summary."""
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        incs = _incidents(out, job)
        if not incs:
            return [f"no incident of job {job}"]
        text = " ".join(i.get("summary") or "" for i in incs)
        return [f"the incident of {job} does not say {w!r}: {text}" for w in words if w not in text]
    return check


def _both(*checks: Check) -> Check:
    return lambda out, cap: [bad for c in checks for bad in c(out, cap)]


# --- 2: repeats on fenced hardware belong to the fence ----------------------------------------------------
def _fenced_gpu_then_idle(duration: float = 4000) -> Capture:
    """GPU 3 of n1 falls off the bus under job pt; pt comes back on n1's other GPUs and n2, and recovers."""
    cap = fleet("n1", "n2", "n3", duration=duration).job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 3, 79).crash(901.5, "pt", rank=3)
    cap.job("pt", {"n1": [0, 1, 2, 4, 5, 6, 7], "n2": list(range(8))}, at=1000)
    return cap


def _fence_keeps(node: str, gpu: int | None, category: str) -> dict[str, Any]:
    fence = {"type": "quarantine_gpu", "node": node, "gpu": gpu} if gpu is not None else \
        {"type": "cordon_node", "node": node}
    return expect(
        incidents=[{"job": "pt", "category": category, "culprit_node": node,
                    **({"culprit_gpus": [gpu]} if gpu is not None else {})}],
        must=[fence, {"type": "open_ticket", "node": node}],
        unique=[fence, {"type": "open_ticket"}, restart("pt")],
        _check=_says("pt", "again while fenced", "belong to this fence"),
    )


@scenario
def fenced_gpu_repeats_its_xid_after_the_incident_resolved() -> S:
    """The quarantined GPU goes on logging XID 79 while idle, long after its incident was resolved: the
    repeats are the fence's evidence, no job-less incident, no second ticket."""
    cap = _fenced_gpu_then_idle()
    for t in (2500, 2800, 3100):
        cap.xid(t, "n1", 3, 79)
    return cap, _fence_keeps("n1", 3, "gpu_off_bus")


@scenario
def fenced_gpu_repeats_while_its_job_recovers() -> S:
    """The same XID 79 again a minute after the job came back elsewhere, late and sent twice."""
    cap = _fenced_gpu_then_idle(duration=2400)
    cap.xid(1060, "n1", 3, 79).late(15).dup(2)
    cap.xid(1900, "n1", 3, 79, prefix="syslog")
    return cap, _fence_keeps("n1", 3, "gpu_off_bus")


@scenario
def fenced_gpu_repeats_its_double_bit_errors() -> S:
    """GPU 5 of n2 was quarantined for a double-bit ECC error; idle and fenced, its DBE counter keeps rising."""
    cap = fleet("n1", "n2", "n3", duration=3600).job("pt", ["n1", "n2"])
    cap.xid(900, "n2", 5, 48).metric(900.5, "n2", 5, ecc_dbe_volatile=1, ecc_dbe_aggregate=1)
    cap.crash(901, "pt", rank=13, error=DBE)
    cap.job("pt", {"n1": list(range(8)), "n3": list(range(8))}, at=1000)
    cap.metric(2400, "n2", 5, ecc_dbe_volatile=3, ecc_dbe_aggregate=3)
    cap.xid(2400.2, "n2", 5, 48)
    cap.metric(3000, "n2", 5, ecc_dbe_volatile=7, ecc_dbe_aggregate=7)
    return cap, _fence_keeps("n2", 5, "gpu_memory_fault")


@scenario
def cordoned_power_supply_reports_again() -> S:
    """n2 was cordoned for its power supply (four GPUs of one domain lost); idle and cordoned, its BMC logs
    the supply's failure again and again: the fence's, not a new job-less power incident."""
    cap = fleet("n1", "n2", "n3", duration=3600).job("pt", ["n1", "n2"])
    cap.sel(899.9, "n2", "psu")
    for k, g in enumerate([4, 5, 6, 7]):
        cap.xid(900 + 0.001 * k, "n2", g, 79)
    cap.crash(902, "pt", rank=12, error="RuntimeError: CUDA error: unspecified launch failure")
    cap.job("pt", ["n1", "n3"], at=1000)
    cap.sel(2000, "n2", "psu", rec=0x2B).sel(2900, "n2", "psu_ac", rec=0x2C)
    return cap, _fence_keeps("n2", None, "power_supply_fault")


@scenario
def idle_hardware_not_fenced_is_news() -> S:
    """The rule is about the fenced hardware only: while quarantined GPU 3 of n1 repeats its XID, GPU 6 of
    idle n3 (not fenced) reports double-bit errors -- a new job-less incident, fenced on its own."""
    cap = _fenced_gpu_then_idle()
    cap.xid(2500, "n1", 3, 79)
    cap.metric(2800, "n3", 6, ecc_dbe_volatile=2, ecc_dbe_aggregate=2)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]},
                   {"job": None, "category": "gpu_memory_fault", "culprit_node": "n3", "culprit_gpus": [6]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 3}, {"type": "quarantine_gpu", "node": "n3", "gpu": 6}],
        unique=[{"type": "quarantine_gpu", "node": "n1", "gpu": 3}, restart("pt")],
        must_not=[{"type": "cordon_node"}],
    )

