"""Scenarios of "evidence belongs to the right incident" (issue #25): repeats on fenced hardware belong to
the fence; a node the collectives pin down is fenced and left out, and its owner told once per change that
matters; a consequence is not a second cause; one ticket per physical thing to repair; two root causes in
one job are two incidents.

Registered into :data:`scenario_book.SCENARIOS` (imported at the end of that module).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from builder import Capture, at_iso
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
def a_cancelled_job_is_not_restarted_and_its_fence_keeps_the_repeats() -> S:
    """GPU 3 of n1 falls off the bus under pt; a person cancels pt before it runs again, while the fenced GPU
    logs XID 79 once more and the cancelled run's ranks die of CUDA errors: the fence's incident (closed by
    the cancel) keeps the repeat, the dying ranks are the cancel's tail -- no second incident, no restart of
    a cancelled job, no second ticket."""
    cap = fleet("n1", "n2", "n3", duration=1800).job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 3, 79).crash(901.5, "pt", rank=3)
    cap.xid(1000, "n1", 3, 79).scheduler(1000, "job_cancelled", "pt")
    cap.crash(1001.5, "pt", rank=3)  # its job_failed too: the scheduler echoes the end it reported
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 3}, {"type": "open_ticket", "node": "n1"}],
        unique=[{"type": "quarantine_gpu"}, {"type": "open_ticket"}, restart("pt")],
        must_not=[{"type": "cordon_node"}],
    )


def _cancelled_before_the_verdict(cancel_at: float, nvml: float) -> S:
    cap = fleet("n1", "n2", "n3", duration=1800, nvml=nvml).job("pt", ["n1", "n2"])
    cap.vanish(895, "n1", 3).crash(900, "pt", rank=3)  # no kernel line: NVML alone will tell, samples later
    cap.scheduler(cancel_at, "job_cancelled", "pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 3}, {"type": "open_ticket", "node": "n1"}],
        unique=[{"type": "quarantine_gpu"}, {"type": "open_ticket"}],
        must_not=[restart("pt"), {"type": "cordon_node"}],
    )


@scenario
def a_gpu_gone_from_nvml_after_the_cancel_is_the_cancelled_crashs_cause() -> S:
    """GPU 3 of n1 drops out of NVML with no kernel line; the rank on it dies, and its incident waits for NVML's
    verdict on the GPU; a person cancels pt before the verdict (samples every 2 minutes). The verdict, when it
    comes, is the crash's cause: pt's incident (closed by the cancel) takes it and quarantines the GPU -- one
    incident of pt, no job-less second one for the same GPU, and no restart of a cancelled job."""
    return _cancelled_before_the_verdict(1000, nvml=120.0)


@scenario
def a_crash_cancelled_before_it_was_told_still_gets_its_gpus_verdict() -> S:
    """As above, with the cancel two seconds after the crash: the crash's incident was not even told yet (it
    was settling). The verdict makes it pt's incident, told, fenced, not restarted."""
    return _cancelled_before_the_verdict(902, nvml=30.0)


@scenario
def a_node_found_dead_after_the_cancel_is_the_cancelled_crashs_cause() -> S:
    """n2 falls silent; pt's rank on n1 dies of the communicator's abort at once, and a person cancels pt before
    n2's silence is long enough to call it down. The node's verdict is the crash's cause: pt's incident takes it
    and cordons n2 -- one incident of pt, no restart of a cancelled job."""
    cap = fleet("n1", "n2", "n3", duration=1800).job("pt", ["n1", "n2"])
    cap.silence(900, "n2").crash(905, "pt", rank=0, error="torch.distributed.DistBackendError: NCCL communicator "
                                                         "was aborted on rank 0")
    cap.scheduler(915, "job_cancelled", "pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_down", "culprit_node": "n2"}],
        must=[{"type": "cordon_node", "node": "n2"}],
        unique=[{"type": "cordon_node"}],
        must_not=[restart("pt"), {"type": "quarantine_gpu"}, {"type": "cordon_node", "node": "n1"}],
    )


@scenario
def a_job_started_on_an_idle_fenced_gpu_fails_into_the_fences_incident() -> S:
    """Idle GPU 3 of n1 falls off the bus: a job-less incident quarantines it. The scheduler, not honouring the
    fence, starts pt on it; pt's rank there dies. The failure is the fence's cause again: the job-less
    incident takes the job and restarts it off the GPU -- no second incident for hardware already fenced."""
    cap = fleet("n1", "n2", "n3", duration=1800)
    cap.xid(300, "n1", 3, 79)
    cap.job("pt", ["n1", "n2"], at=400)
    cap.crash(460, "pt", rank=3)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 3}, restart("pt")],
        unique=[{"type": "quarantine_gpu"}, {"type": "open_ticket"}, restart("pt")],
        must_not=[{"type": "cordon_node"}],
    )


@scenario
def a_chatty_gpu_does_not_set_its_nodes_nvml_cadence() -> S:
    """NVML publishes on change, with a snapshot every 5 minutes: GPU 0 of n1, whose single-bit ECC count keeps
    rising, is sampled every 4 s while its seven siblings are sampled once a period. They are not gone: the
    node's cadence is its GPUs' own pace, one vote per GPU -- no gpu_off_bus, no power fault, no restart of the
    healthy job."""
    cap = fleet("n1", "n2", duration=1500, nvml=300.0).job("pt", ["n1", "n2"])
    for k in range(1, 120):
        cap.metric(30 + 4 * k, "n1", 0, ecc_sbe_volatile=k, ecc_sbe_aggregate=k)
    return cap, expect(incidents=[], must_not=[{"type": "restart_job"}, {"type": "cordon_node"},
                                              {"type": "quarantine_gpu"}])


@scenario
def a_cancelled_job_started_again_on_its_fenced_gpu_fails_into_its_incident() -> S:
    """GPU 3 of n1 falls off the bus under pt and is quarantined; a person cancels pt (the incident closes); the
    scheduler, not honouring the fence, starts pt on n1 and n2 again and the rank on GPU 3 dies. The fence
    outlives the incident its cancel closed: the failure is that incident's again, no second incident."""
    cap = fleet("n1", "n2", "n3", duration=1800).job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 3, 79).crash(901.5, "pt", rank=3)
    cap.scheduler(960, "job_cancelled", "pt")
    cap.job("pt", ["n1", "n2"], at=1100)
    cap.crash(1130, "pt", rank=3)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 3}, restart("pt")],
        unique=[{"type": "quarantine_gpu"}, {"type": "open_ticket"}],
        must_not=[{"type": "cordon_node"}],
    )


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



# --- 8: two root causes, two incidents ------------------------------------------------------------------
def _q(node: str, gpu: int) -> dict[str, Any]:
    return {"type": "quarantine_gpu", "node": node, "gpu": gpu}


def _linked(first: str, second: str) -> Check:
    """The second root cause's incident says which rule made it and names the incident whose restart serves
    it; the job's incident lists it among its faults, by that id."""
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        incs = {i["category"]: i for i in _incidents(out, "pt")}
        lead, other = incs.get(first), incs.get(second)
        if lead is None or other is None:
            return [f"want a {first} and a {second} incident of pt, got {sorted(incs)}"]
        bad = []
        if "a second root cause" not in other["summary"] or lead["id"] not in other["summary"]:
            bad.append(f"the {second} incident does not say which rule made it: {other['summary']}")
        if other["id"] not in [f.get("incident") for f in lead.get("faults", [])]:
            bad.append(f"the {first} incident does not name its second fault's incident: {lead.get('faults')}")
        restarts = [c for c in out["commands"] if c["type"] == "restart_job"]
        if restarts and restarts[0]["incident"] != lead["id"]:
            bad.append("the one restart should serve the job's incident (and so both)")
        return bad
    return check


def _two_causes(first: tuple[str, int, str], second: tuple[str, int, str], lead: tuple[str, int, str]) -> dict[str, Any]:
    other = second if lead == first else first
    return expect(
        incidents=[{"job": "pt", "category": lead[2], "culprit_node": lead[0], "culprit_gpus": [lead[1]]},
                   {"job": "pt", "category": other[2], "culprit_node": other[0], "culprit_gpus": [other[1]]}],
        must=[_q(first[0], first[1]), _q(second[0], second[1]),
              restart("pt", excludes_gpu=[first[0], first[1]]), restart("pt", excludes_gpu=[second[0], second[1]])],
        order=[[_q(first[0], first[1]), restart("pt")], [_q(second[0], second[1]), restart("pt")]],
        unique=[restart("pt"), _q(first[0], first[1]), _q(second[0], second[1])],
        must_not=[{"type": "cordon_node"}],
        _check=_linked(lead[2], other[2]),
    )


@scenario
def off_the_bus_then_double_bit_error_elsewhere() -> S:
    """A four-node job: GPU 2 of b03 falls off the bus and its rank dies; 18 s later GPU 5 of b01 reports a
    double-bit ECC error, NVML's counter with it. Two independent faults: two incidents, each with its own
    category and culprit, both quarantined before the one restart, which excludes both."""
    cap = fleet("b01", "b02", "b03", "b04", "b05").job("pt", ["b01", "b02", "b03", "b04"])
    cap.xid(900, "b03", 2, 79).crash(901, "pt", rank=18)
    cap.xid(918, "b01", 5, 48).metric(918.4, "b01", 5, ecc_dbe_volatile=1, ecc_dbe_aggregate=1)
    first, second = ("b03", 2, "gpu_off_bus"), ("b01", 5, "gpu_memory_fault")
    return cap, _two_causes(first, second, lead=first)


@scenario
def firmware_fault_then_nvlink_fault_on_another_node() -> S:
    """GSP times out on GPU 4 of n1 (XID 119) and the rank dies; 10 s later n2 GPU 0 logs a fatal NVLink error
    (XID 74), its line arriving late: two incidents, one restart leaving both GPUs out."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 4, 119).crash(901, "pt", rank=4, error="RuntimeError: CUDA error: unspecified launch failure")
    cap.xid(910, "n2", 0, 74).late(12)
    first, second = ("n1", 4, "gpu_firmware_fault"), ("n2", 0, "gpu_nvlink_fault")
    exp = _two_causes(first, second, lead=first)
    exp["must_not"] = [{"type": "cordon_node"}, {"type": "reset_gpu", "requires_approval": False}]
    return cap, exp


@scenario
def memory_fault_first_then_a_gpu_off_the_bus_on_the_same_node() -> S:
    """A double-bit error on GPU 1 of n1 crashes the job; GPU 6 of the same node falls off the bus 15 s later:
    two GPUs, two causes -- two incidents (the stronger cause leads the job's), both fenced, one restart."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 1, 48).crash(901, "pt", rank=1, error=DBE)
    cap.xid(915, "n1", 6, 79).dup(1)
    first, second = ("n1", 1, "gpu_memory_fault"), ("n1", 6, "gpu_off_bus")
    return cap, _two_causes(first, second, lead=second)


@scenario
def one_cause_on_two_gpus_is_one_incident() -> S:
    """Not two root causes: GPU 1 of n1 and GPU 6 of n2 both fall off the bus (different supplies) within
    seconds -- one cause, one incident blaming both, one restart excluding both."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 1, 79).crash(901, "pt", rank=1)
    cap.xid(906, "n2", 6, 79)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [1]}],
        must=[_q("n1", 1), _q("n2", 6), restart("pt", excludes_gpu=["n1", 1]), restart("pt", excludes_gpu=["n2", 6])],
        order=[[_q("n2", 6), restart("pt")]],
        unique=[restart("pt")],
    )


@scenario
def a_weaker_cause_on_the_blamed_gpu_is_no_second_incident() -> S:
    """GPU 3 of n1 falls off the bus; a double-bit error line for that same GPU follows: the same hardware,
    already blamed for a stronger cause -- one incident, one quarantine."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 3, 79).crash(901, "pt", rank=3)
    cap.xid(904, "n1", 3, 48).metric(904.5, "n1", 3, ecc_dbe_volatile=1, ecc_dbe_aggregate=1)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]}],
        must=[_q("n1", 3), restart("pt", excludes_gpu=["n1", 3])],
        unique=[restart("pt"), _q("n1", 3)],
    )


def _node_fenced_first(node: str, gpu: int | None = None) -> dict[str, Any]:
    """The node whose own parts failed is cordoned before the one restart, which leaves it out (and the GPU's
    quarantine, when a GPU failed beside it, precedes the restart too)."""
    cordon = {"type": "cordon_node", "node": node}
    fences = [cordon] + ([_q(node, gpu)] if gpu is not None else [])
    return expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": node}],
        must=[*fences, restart("pt", excludes_node=node)],
        order=[[f, restart("pt")] for f in fences],
        unique=[restart("pt"), cordon],
    )


@scenario
def memory_sel_beside_an_xid_on_the_same_node() -> S:
    """n1's BMC logs an uncorrectable memory error half a second before GPU 3 of n1 falls off the bus; the rank
    on GPU 3 dies of it. The crash is the GPU's -- and the node's own parts failed beside it: the GPU is
    quarantined and the node cordoned before the one restart (a hardware SEL is never left unjudged)."""
    cap = fleet("n1", "n2", "n3").bmc_polls(60).job("pt", ["n1", "n2"])
    cap.sel(899.5, "n1", "memory").xid(900, "n1", 3, 79).crash(901.5, "pt", rank=3)
    exp = _node_fenced_first("n1", 3)
    exp["_check"] = _cordoned_by("n1", at_iso(902))  # judged as the rank dies, not held to the restart
    return cap, exp


def _cordoned_by(node: str, by: str) -> Check:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        at = [datetime.fromisoformat(c["issued_at"].replace("Z", "+00:00")) for c in out["commands"]
              if c["type"] == "cordon_node" and c["target"]["node"] == node]
        return [] if at and min(at) <= datetime.fromisoformat(by) else [f"{node} cordoned at {at}, not by {by}"]
    return check


@scenario
def board_sel_on_a_node_whose_agent_stays_alive_while_the_job_fails_elsewhere() -> S:
    """n2's BMC logs a board fault, its agent goes on heartbeating; seconds later a rank on n1 raises and the job
    fails. No rank of n2 crashed and n2 never went silent, but a node with a hardware SEL is fenced before the
    next restart of the job that was using it: cordoned, left out."""
    cap = fleet("n1", "n2", "n3").bmc_polls(60).job("pt", ["n1", "n2"])
    cap.sel(895, "n2", "board").exception(900, "pt", rank=2).crash(900.5, "pt", rank=2, error="ValueError: bad batch")
    exp = _node_fenced_first("n2")
    exp["must_not"] = [{"type": "cordon_node", "node": "n1"}, {"type": "quarantine_gpu"}]
    return cap, exp


# --- 4: a zombie node is fenced and left out; its owner is told once per change ---------------------------
ZB = ["zb01", "zb02", "zb03", "zb04"]


def _notifies(out: dict[str, Any], job: str) -> list[dict[str, Any]]:
    return [c for c in out["commands"] if c["type"] == "notify" and c["target"]["job"] == job]


def _told_at_most(n: int) -> Check:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        told = _notifies(out, "pt")
        if len(told) > n:
            return [f"the owner was told {len(told)} times, want at most {n}: "
                    + " | ".join(str(c["params"]["message"])[:80] for c in told)]
        if told and "zb03 cordoned and excluded" not in str(told[-1]["params"]["message"]):
            return [f"the last notify does not tell the current facts: {told[-1]['params']['message']}"]
        return []
    return check


def _zombie_expect(gpus: tuple[int, int] | None = None, told: int = 2) -> dict[str, Any]:
    sized = {"gpus_min": gpus[0], "gpus_max": gpus[1]} if gpus else {}
    return expect(
        incidents=[{"job": "pt", "category": "network_timeout", "culprit_node": "zb03"}],
        must=[{"type": "cordon_node", "node": "zb03"}, restart("pt", excludes_node="zb03", **sized)],
        order=[[{"type": "cordon_node", "node": "zb03"}, restart("pt")]],
        unique=[restart("pt"), {"type": "cordon_node"}],
        must_not=[{"type": "cordon_node", "node": n} for n in ZB if n != "zb03"] + [{"type": "quarantine_gpu"}],
        _check=_both(_says("pt", "ranks 16–23 on zb03 never arrived; zb03 cordoned and excluded"), _told_at_most(told)),
    )


@scenario
def zombie_node_named_by_every_other_rank() -> S:
    """zb03's agent keeps heartbeating but its ranks stopped: every other rank's watchdog times out in the
    all-reduce, none of zb03's. The evidence pins the culprit to the node: cordoned, then the restart leaves it
    out; the owner hears it once."""
    cap = fleet(*ZB, "zb05").job("pt", ZB)
    cap.stop_training("pt", 890)
    cap.nccl_timeout(900, "pt", missing=range(16, 24))
    cap.scheduler(912, "job_failed", job="pt")
    return cap, _zombie_expect()


@scenario
def zombie_node_reports_trickle_in_late() -> S:
    """The same zombie, but zb04's watchdog lines reach the pipeline 33 s late, one after another: the list
    of missing ranks shrinks eight times in a second. One notify when the incident opens, one with the
    settled list, one when zb03 is cordoned (30 s apart) -- not one per shrinking list."""
    cap = fleet(*ZB, "zb05").job("pt", ZB)
    cap.stop_training("pt", 890)
    cap.nccl_timeout(900, "pt", only=range(0, 16))
    cap.nccl_timeout(901, "pt", only=range(24, 32)).late(33)
    return cap, _zombie_expect(told=3)


@scenario
def zombie_node_of_an_elastic_job() -> S:
    """An elastic job (16 to 32 GPUs): zb03 is the zombie; the restart leaves it out and asks for the 24
    GPUs the other three nodes hold."""
    cap = fleet(*ZB).job("pt", ZB, elastic=(16, 32))
    cap.stop_training("pt", 890)
    cap.nccl_timeout(900, "pt", missing=range(16, 24)).dup(2)
    for r in (0, 8, 24):
        cap.worker_exit(903, "pt", r, -6)
    return cap, _zombie_expect(gpus=(24, 24))


@scenario
def two_ranks_missing_on_a_node_pin_nothing() -> S:
    """Two of zb02's eight ranks never arrive, its other six report: a link or two processes, not the node --
    restarted, nothing fenced."""
    cap = fleet(*ZB).job("pt", ZB)
    cap.stop_training("pt", 890)
    cap.nccl_timeout(900, "pt", missing=[10, 13])
    cap.scheduler(912, "job_failed", job="pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "network_timeout", "culprit_node": "zb02"}],
        must=[restart("pt")],
        must_not=[{"type": "cordon_node"}, {"type": "quarantine_gpu"}, {"type": "drain_node"}],
    )


@scenario
def single_node_job_silent_ranks_pin_nothing() -> S:
    """A job on one node whose ranks half report: no other node to compare with, nothing to pin."""
    cap = fleet("zb01", "zb02").job("pt", ["zb01"])
    cap.stop_training("pt", 890)
    cap.nccl_timeout(900, "pt", missing=[4, 5, 6, 7])
    cap.scheduler(912, "job_failed", job="pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "network_timeout", "culprit_node": "zb01"}],
        must=[restart("pt")],
        must_not=[{"type": "cordon_node"}, {"type": "quarantine_gpu"}],
    )


@scenario
def a_rank_behind_in_a_collective_is_left_out_not_fenced() -> S:
    """Rank 5 never enqueued the collective every other rank of the job waits in (it times out one work item
    earlier): the evidence blames the GPU that rank ran on -- a link or a process, so nothing is fenced (no
    quarantine, no cordon), but the restart does not put the job back on it: GPU 5 of n1 is left out."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.stop_training("pt", 890)
    cap.nccl_timeout(900, "pt", behind=[5])
    cap.scheduler(912, "job_failed", job="pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "network_timeout", "culprit_node": "n1", "culprit_gpus": [5]}],
        must=[restart("pt", excludes_gpu=["n1", 5], gpus_min=16, gpus_max=16)],
        unique=[restart("pt")],
        must_not=[{"type": "cordon_node"}, {"type": "quarantine_gpu"}, {"type": "drain_node"}],
    )


# --- 5: a consequence is not a second cause ---------------------------------------------------------------
def _node_died_expect(node: str) -> dict[str, Any]:
    return expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": node}],
        must=[{"type": "cordon_node", "node": node}, restart("pt", excludes_node=node)],
        order=[[{"type": "cordon_node", "node": node}, restart("pt")]],
        unique=[restart("pt"), {"type": "open_ticket"}],
        _check=_says("pt", "a consequence of node_hardware_fault"),
    )


@scenario
def node_dies_during_a_checkpoint_write() -> S:
    """n1's BMC logs an uncorrectable memory error, the rank on n1 dies, and the checkpoint being written
    fails with an I/O error: the write's failure is the node's doing -- no checkpoint_failure incident,
    no storage ticket for a storage system that was fine."""
    cap = fleet("n1", "n2", "n3").bmc_polls(60).job("pt", ["n1", "n2"])
    cap.sel(899, "n1", "memory").crash(900, "pt", rank=3)
    cap.checkpoint_failed(900.5, "pt", 600, error="OSError: [Errno 5] Input/output error")
    return cap, _node_died_expect("n1")


@scenario
def checkpoint_write_fails_late_after_a_cpu_fault() -> S:
    """A CPU IERR on n2 and its rank's crash; the trainer's checkpoint_failed line arrives 20 s late."""
    cap = fleet("n1", "n2", "n3").bmc_polls(60).job("pt", ["n1", "n2"])
    cap.sel(899, "n2", "cpu").crash(900, "pt", rank=12)
    cap.checkpoint_failed(901, "pt", 600, error="OSError: [Errno 5] Input/output error").late(20)
    return cap, _node_died_expect("n2")


@scenario
def checkpoint_failure_long_after_a_fault_is_its_own() -> S:
    """The window is the rule: a checkpoint write that runs out of space an hour after the job recovered
    from a GPU fault is a checkpoint_failure of its own."""
    cap = fleet("n1", "n2", "n3", duration=6000).job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 3, 79).crash(901.5, "pt", rank=3)
    cap.job("pt", {"n1": [0, 1, 2, 4, 5, 6, 7], "n2": list(range(8))}, at=1000)
    cap.checkpoint_failed(4600, "pt", 9000)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]},
                   {"job": "pt", "category": "checkpoint_failure"}],
        must=[{"type": "notify", "job": "pt"}],
    )


@scenario
def checkpoint_write_fails_before_its_node_is_known_dead() -> S:
    """n1 stops answering at 895 s (no SEL, the BMC says power on: node_down once its silence is timed, some 45 s
    later); the checkpoint being written fails with an I/O error at 897 s -- logged before anything says n1 is
    gone. The write's failure waits for the job's hardware to speak, then is folded into the node's incident:
    no checkpoint_failure incident, no storage ticket."""
    cap = fleet("n1", "n2", "n3").bmc_polls(60).job("pt", ["n1", "n2"])
    cap.silence(895, "n1").bmc_power(915, "n1")
    cap.checkpoint_failed(897, "pt", 600, error="OSError: [Errno 5] Input/output error")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_down", "culprit_node": "n1"}],
        must=[{"type": "cordon_node", "node": "n1"}, restart("pt", excludes_node="n1")],
        unique=[restart("pt"), {"type": "open_ticket"}],
        _check=_says("pt", "a consequence of node_down"),
    )


@scenario
def checkpoint_write_out_of_space_beside_a_dead_node_is_its_own() -> S:
    """The same death, but the write failed for lack of space: its own storage's fault, whatever the node did
    -- a checkpoint_failure of its own, judged at once (beside the node's incident)."""
    cap = fleet("n1", "n2", "n3").bmc_polls(60).job("pt", ["n1", "n2"])
    cap.silence(895, "n1").bmc_power(915, "n1")
    cap.checkpoint_failed(897, "pt", 600)
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_down", "culprit_node": "n1"},
                   {"job": "pt", "category": "checkpoint_failure", "opened_by": at_iso(897)}],
        must=[{"type": "cordon_node", "node": "n1"}, {"type": "notify", "job": "pt"}],
    )


# --- 6: one ticket per physical thing to repair -----------------------------------------------------------
def _pdu_fleet() -> Capture:
    """n1 GPUs 4-7 and n2 GPUs 0-3 are fed by one PDU, ``pdu-7``; job a on n1's half, job b on n2's."""
    cap = Capture(duration=1800)
    for n in ("n1", "n2", "n3"):
        cap.nodes[n] = {"rack": "r1", "gpus": 8}
        cap._add(0.0, "inventory", node=n, rack="r1", gpus=[
            {**cap._gpu_ref(n, i), "name": "NVIDIA H100 80GB HBM3",
             "power_domain": "pdu-7" if (n, i >= 4) in (("n1", True), ("n2", False)) else f"{n}-PS{i // 4}"}
            for i in range(8)])
    return cap.heartbeats(15).nvml(30).job("a", {"n1": [4, 5, 6, 7]}).job("b", {"n2": [0, 1, 2, 3]})


def _one_supply_ticket(late: float = 0.0) -> S:
    cap = _pdu_fleet()
    for k, g in enumerate((4, 5, 6, 7)):
        cap.xid(900 + 0.001 * k, "n1", g, 79)
    for k, g in enumerate((0, 1, 2, 3)):
        cap.xid(900.02 + 0.001 * k, "n2", g, 79)
        if late:
            cap.late(late)
    cap.crash(901, "a", rank=0).crash(901, "b", rank=0)
    return cap, expect(
        incidents=[{"job": "a", "category": "power_supply_fault", "culprit_node": "n1"},
                   {"job": "b", "category": "power_supply_fault", "culprit_node": "n2"}],
        must=[{"type": "cordon_node", "node": "n1"}, {"type": "cordon_node", "node": "n2"},
              {"type": "open_ticket"}, restart("a", excludes_node="n1"), restart("b", excludes_node="n2")],
        unique=[{"type": "open_ticket"}],
        _check=_linked_ticket,
    )


def _linked_ticket(out: dict[str, Any], cap: Capture) -> list[str]:
    ticket = next(c for c in out["commands"] if c["type"] == "open_ticket")
    other = [i for i in out["incidents"] if i["id"] != ticket["incident"]]
    return [f"incident {i['id']} does not link the supply's ticket {ticket['id']}: {i['summary']}"
            for i in other if ticket["id"] not in i["summary"]]


@scenario
def one_pdu_feeding_two_jobs_on_two_nodes_is_one_ticket() -> S:
    """pdu-7 fails: both halves it feeds go dark together. One incident per job, one repair ticket for the
    supply, linked from the second incident."""
    return _one_supply_ticket()


@scenario
def one_pdu_two_jobs_lines_late() -> S:
    """The same, n2's XID lines arriving 10 s late: still one ticket for the one supply."""
    return _one_supply_ticket(late=10)
