"""Scenarios of "recovery never outruns the verdict": the restart gate, fences as standing state, GPUs
gone from NVML, checkpoint lineage and failure domains, compatible replacements, learned hangs, texts.

Registered into :data:`scenario_book.SCENARIOS` (imported at the end of that module); the same
expectation format, the same scorer.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from builder import Capture, at_iso
from scenario_book import NO_FENCE, expect, fleet, restart, scenario

S = tuple[Capture, dict[str, Any]]


def _ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def _restarts(out: dict[str, Any], job: str | None = None) -> list[dict[str, Any]]:
    return [c for c in out["commands"] if c["type"] == "restart_job" and (job is None or c["target"]["job"] == job)]


def _notes(out: dict[str, Any]) -> list[str]:
    return [str(c["params"].get("message") or "") for c in out["commands"] if c["type"] == "notify"]


def _incident(out: dict[str, Any], job: str) -> dict[str, Any]:
    return next(i for i in out["incidents"] if i["job"] == job)


# --- the gate: a node still being judged --------------------------------------------------------------
@scenario
def gate_waits_for_silence_with_bmc_ierr() -> S:
    """n2's BMC logs a CPU IERR, the rank on it dies, the others report NCCL errors; n2's agent goes quiet.
    Its silence threshold (60 s) is longer than the settle window, but the crash next to the IERR is
    already the verdict: the restart never goes out before n2 is judged and fenced."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.sel(899, "n2", "cpu").silence(900, "n2").bmc_power(915, "n2")
    cap.crash(900.5, "pt", rank=11, error="RuntimeError: CUDA error: unspecified launch failure")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": "n2"}],
        must=[{"type": "cordon_node", "node": "n2"}, restart("pt", excludes_node="n2", gpus_min=16, gpus_max=16,
                                                             checkpoint_step=cap.checkpoint_step("pt", 900))],
        must_not=[{"type": "cordon_node", "node": "n1"}],
        order=[[{"type": "cordon_node", "node": "n2"}, restart("pt")]],
        unique=[restart("pt")],
    )


@scenario
def gate_waits_for_a_slow_agent() -> S:
    """Heartbeats every 40 s: the agent is silent only after 120 s, judged 40 s later -- far past the
    settle window; one restart, after the cordon."""
    cap = fleet("n1", "n2", "n3", hb=40).job("pt", ["n1", "n2"])
    cap.silence(900, "n2").bmc_power(930, "n2")
    cap.nccl_timeout(905, "pt", missing=range(8, 16), timeout_ms=5000)
    cap.scheduler(910, "job_failed", job="pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_down", "culprit_node": "n2"}],
        must=[{"type": "cordon_node", "node": "n2"}, restart("pt", excludes_node="n2")],
        order=[[{"type": "cordon_node", "node": "n2"}, restart("pt")]],
        unique=[restart("pt")],
    )


def _rack_power(not_ready: bool, bmc_at: float) -> S:
    racks = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2"}
    cap = fleet("n1", "n2", "n3", "n4", racks=racks).job("big", ["n3", "n4"])
    for n in ("n3", "n4"):
        cap.silence(900, n)
        if not_ready:
            cap.scheduler(903, "node_not_ready", node=n)
        cap.bmc_unreachable(bmc_at, n)
    cap.scheduler(906, "job_failed", job="big")
    return cap, expect(
        incidents=[{"job": "big", "category": "rack_outage"}],
        must=[{"type": "cordon_node", "node": "n3"}, {"type": "cordon_node", "node": "n4"},
              restart("big", excludes_node="n3"), restart("big", excludes_node="n4")],
        must_not=[{"type": "cordon_node", "node": "n1"}, {"type": "cordon_node", "node": "n2"}],
        order=[[{"type": "cordon_node", "node": "n3"}, restart("big")],
               [{"type": "cordon_node", "node": "n4"}, restart("big")]],
        unique=[restart("big")],
    )


@scenario
def gate_rack_power_loss_scheduler_first() -> S:
    """A rack loses power: the scheduler's node_not_ready comes first, the job fails, the BMCs' failed
    polls a minute later. Not-ready nodes are suspect at once; the restart waits for the rack's verdict."""
    return _rack_power(not_ready=True, bmc_at=960)


@scenario
def gate_rack_power_loss_bmc_late() -> S:
    """The same without the scheduler's word, and the BMC polls come 100 s late."""
    return _rack_power(not_ready=False, bmc_at=1000)


@scenario
def gate_late_xid_after_the_crash() -> S:
    """The rank dies at once; the XID 79 naming its GPU reaches the pipeline 45 s late, after the settle
    window. The GPU is missing from NVML meanwhile: the gate waits for NVML's word and the XID lands first."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.crash(900.5, "pt", rank=5)
    cap.xid(900, "n1", 5, 79).late(45)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [5]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 5}, restart("pt", excludes_gpu=["n1", 5])],
        order=[[{"type": "quarantine_gpu", "node": "n1", "gpu": 5}, restart("pt")]],
        unique=[restart("pt"), {"type": "quarantine_gpu"}],
    )


@scenario
def gate_late_xid_skewed_kernel_clock() -> S:
    """The same, the kernel's clock 20 s behind and the line re-sent."""
    cap, exp = gate_late_xid_after_the_crash()
    cap.skew("kernel", -20)
    cap.where(lambda d: d["source"] == "kernel").dup(3)
    return cap, exp


@scenario
def gate_suspect_bmc_unreachable_is_left_out() -> S:
    """n2's BMC stopped answering before the crash (its agent is fine): suspect, so the restart leaves it
    out -- without fencing it (nothing judged it broken)."""
    cap = fleet("n1", "n2", "n3").bmc_polls(60).job("pt", ["n1", "n2"], elastic=(8, 16))
    cap.bmc_down(700, "n2")
    cap.crash(900, "pt", rank=3, error="ValueError: expected a batch of 16")
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash"}],
        must=[restart("pt", excludes_node="n2", gpus_max=8)],
        must_not=NO_FENCE,
        _check=_why_left_out("n2", "BMC"),
    )


@scenario
def gate_suspect_node_not_ready_is_left_out() -> S:
    """The scheduler reports n2 not ready just before a software crash: the restart does not count on it."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.scheduler(895, "node_not_ready", node="n2")
    cap.crash(900, "pt", rank=3, error="ValueError: expected a batch of 16")
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash"}],
        must=[restart("pt", excludes_node="n2")],
        must_not=NO_FENCE,
        _check=_why_left_out("n2", "not ready"),
    )


@scenario
def gate_node_ready_again_is_not_suspect() -> S:
    """Not ready, then ready again before the crash: n2 is healthy and stays in."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.scheduler(600, "node_not_ready", node="n2").scheduler(640, "node_ready", node="n2")
    cap.crash(900, "pt", rank=3, error="ValueError: expected a batch of 16")
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash"}],
        must=[restart("pt")],
        must_not=NO_FENCE + [restart("pt", excludes_node="n2")],
    )


def _why_left_out(node: str, words: str) -> Any:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        rs = _restarts(out)
        if not rs:
            return ["no restart"]
        gate = rs[0]["params"].get("gate") or {}
        why = [x for x in gate.get("excluded", []) if x["node"] == node]
        if not why or words.lower() not in why[0]["why"].lower():
            return [f"the restart does not say it left {node} out for {words!r}: {gate}"]
        if words.lower() not in rs[0]["reason"].lower():
            return [f"the restart's reason does not say why: {rs[0]['reason']}"]
        return []
    return check


def _after_every_bmc_poll(fault: float) -> Any:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        """The restart came after every node of the allocation answered a BMC poll after the failure."""
        rs = _restarts(out)
        if len(rs) != 1:
            return [f"want one restart, got {len(rs)}"]
        issued = _ts(rs[0]["issued_at"])
        polls = [json.loads(line) for line in cap.lines() if '"source":"bmc"' in line]
        bad = []
        for node in ("n1", "n2"):
            after = min(_ts(p["ts"]) for p in polls if p["node"] == node and _ts(p["ts"]) > _ts(at_iso(fault)))
            if issued < after:
                bad.append(f"restart at {issued} before {node}'s first BMC poll after the failure ({after})")
        return bad
    return check


@scenario
def gate_waits_for_every_bmc_poll() -> S:
    """BMCs polled every 90 s, the last polls just before the fault: the restart goes out only once each
    node's BMC answered after it (its next poll, a minute and a half later)."""
    cap = fleet("n1", "n2", "n3").bmc_polls(90).job("pt", ["n1", "n2"])
    cap.xid(913, "n2", 4, 79).crash(914, "pt", rank=12)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n2", "culprit_gpus": [4]}],
        must=[restart("pt", excludes_gpu=["n2", 4])],
        unique=[restart("pt")],
        _check=_after_every_bmc_poll(913),
    )


@scenario
def gate_heartbeats_ahead_dead_node() -> S:
    """The agents' clocks run 30 s ahead: n2's last heartbeats, written before it died, carry times after
    the crash. They arrived before it, so they vouch for nothing; the restart waits for n2's verdict."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.silence(900, "n2").bmc_power(930, "n2")
    cap.crash(901, "pt", rank=2, error="RuntimeError: NCCL communicator was aborted")
    cap.skew("node_agent", 30)
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_down", "culprit_node": "n2"}],
        must=[{"type": "cordon_node", "node": "n2"}, restart("pt", excludes_node="n2")],
        order=[[{"type": "cordon_node", "node": "n2"}, restart("pt")]],
        unique=[restart("pt")],
    )


@scenario
def gate_duplicated_lines_change_nothing() -> S:
    """Heartbeats and NVML re-sent: duplicates are not new words from the hardware."""
    cap, exp = gate_waits_for_silence_with_bmc_ierr()
    cap.where(lambda d: d["source"] in ("node_agent", "nvml") and d.get("node") == "n2").dup(40)
    return cap, exp


def _bound_check(out: dict[str, Any], cap: Capture) -> list[str]:
    rs = _restarts(out)
    if len(rs) != 1:
        return [f"want one restart, got {len(rs)}"]
    gate = rs[0]["params"].get("gate") or {}
    verdicts = {x["node"]: x["verdict"] for x in gate.get("excluded", [])}
    bad = [] if verdicts.get("n2") == "no_verdict" else [f"n2 should be left out without a verdict: {gate}"]
    cordons = [c for c in out["commands"] if c["type"] == "cordon_node"]
    if cordons and not any(c["type"] == "notify" and _ts(c["issued_at"]) >= _ts(cordons[-1]["issued_at"])
                           for c in out["commands"]):
        bad.append("n2 fenced after the restart that left it out, and nobody told")
    return bad


@scenario
def gate_bound_excludes_what_is_still_unjudged() -> S:
    """A 2-minute heartbeat: n2's silence is judged 8 minutes after its last beat, past the gate's
    5-minute bound. The restart goes out at the bound, leaving n2 out (no verdict), never in."""
    cap = fleet("n1", "n2", "n3", hb=120, duration=2400).job("pt", ["n1", "n2"])
    cap.silence(905, "n2").bmc_power(930, "n2")
    cap.crash(906, "pt", rank=9, error="RuntimeError: NCCL communicator was aborted")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_down", "culprit_node": "n2"}],
        must=[restart("pt", excludes_node="n2"), {"type": "cordon_node", "node": "n2"}],
        unique=[restart("pt")],
        _check=_bound_check,
    )


# --- fences are standing state ---------------------------------------------------------------------------
def _breach_check(escalate: bool) -> Any:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        bad = []
        incs = [i for i in out["incidents"] if i["job"] == "pt"]
        if len({i["id"] for i in incs}) != 1:
            bad.append(f"want one incident for the broken GPU, got {[i['category'] for i in incs]}")
        quarantine = next(c for c in out["commands"] if c["type"] == "quarantine_gpu")
        uuid = cap.gpu_uuid("n1", 3)
        told = [m for m in _notes(out) if "fenced" in m and uuid in m and quarantine["id"] in m]
        if not told:
            bad.append(f"no notify names the fenced GPU and its quarantine command: {_notes(out)}")
        if any(r["requires_approval"] for r in _restarts(out)):
            bad.append("a restart away from the broken GPU should not wait for a person")
        state = incs[0]["state"] if incs else None
        if escalate and state != "escalated":
            bad.append(f"after the loop the incident should be escalated, is {state}")
        return bad
    return check


@scenario
def fence_not_enforced_one_incident() -> S:
    """GPU 3 of n1 is quarantined and the job restarted without it; the scheduler, knowing nothing of the
    quarantine, starts it on the same GPU, which fails again (no XID this time). Same incident, a notify
    that the fence is not enforced, the next restart excludes the GPU again."""
    cap = fleet("n1", "n2", "n3", duration=2400).job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 3, 79).crash(901, "pt", rank=3)
    cap.job("pt", ["n1", "n2"], at=1000)
    cap.crash(1030, "pt", rank=3)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]}],
        must=[{"type": "notify", "job": "pt"}, restart("pt", excludes_gpu=["n1", 3])],
        unique=[{"type": "quarantine_gpu", "node": "n1", "gpu": 3}],
        at_most=[[restart("pt"), 2], [restart("pt", requires_approval=True), 0]],
        _check=_breach_check(escalate=False),
    )


@scenario
def fence_not_enforced_loop_escalates() -> S:
    """...and again: after the second placement on the quarantined GPU a person is asked, no third restart."""
    cap = fleet("n1", "n2", "n3", duration=3000).job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 3, 79).crash(901, "pt", rank=3)
    cap.job("pt", ["n1", "n2"], at=1000).crash(1030, "pt", rank=3)
    cap.job("pt", ["n1", "n2"], at=1200).crash(1230, "pt", rank=3)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]}],
        must=[{"type": "notify", "job": "pt"}],
        at_most=[[restart("pt"), 2]],
        _check=_breach_check(escalate=True),
    )


@scenario
def fence_not_enforced_node_cordon() -> S:
    """n2 is cordoned for a memory SEL and the job restarted on n1, n3; the scheduler puts it back on n2,
    which dies again: the same incident, the restart avoids n2 again."""
    cap = fleet("n1", "n2", "n3", duration=2600).job("pt", ["n1", "n2"], interval=300)
    cap.sel(899, "n2", "memory").silence(900, "n2", until=1150).bmc_power(930, "n2")
    cap.job("pt", ["n1", "n3"], at=1100, interval=300)
    cap.job("pt", ["n1", "n2"], at=1500, interval=300)
    cap.sel(1799, "n2", "memory").silence(1800, "n2").bmc_power(1830, "n2")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": "n2"}],
        must=[restart("pt", excludes_node="n2", checkpoint_step=cap.checkpoint_step("pt", 1800)),
              {"type": "notify", "job": "pt"}],
        unique=[{"type": "cordon_node", "node": "n2"}],
        at_most=[[restart("pt"), 2]],
    )


@scenario
def fence_of_another_job_not_enforced() -> S:
    """Job a's GPU was quarantined; job b is started on it and dies there: b's failure is that GPU's fault."""
    cap = fleet("n1", "n2", duration=2000).job("a", {"n1": [0, 1, 2, 3]}, elastic=(3, 4))
    cap.xid(700, "n1", 2, 79).crash(701, "a", rank=2)
    cap.job("b", {"n1": [2, 4, 5, 6]}, at=900)
    cap.crash(930, "b", rank=0)
    return cap, expect(
        incidents=[{"job": "a", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [2]},
                   {"job": "b", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [2]}],
        must=[restart("b", excludes_gpu=["n1", 2]), {"type": "notify"}],
        unique=[{"type": "quarantine_gpu", "node": "n1", "gpu": 2}],
    )


# --- a GPU gone from NVML, no kernel line --------------------------------------------------------------
@scenario
def gpu_gone_from_nvml_without_xid() -> S:
    """GPU 5 of n1 stops appearing in NVML while its siblings keep reporting; the rank on it dies with a CUDA
    error; no XID is ever logged (dmesg rate-limited)."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.vanish(900, "n1", 5).crash(901, "pt", rank=5, error="RuntimeError: CUDA error: unknown error")
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [5]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 5}, {"type": "open_ticket", "node": "n1"},
              restart("pt", excludes_gpu=["n1", 5], checkpoint_step=cap.checkpoint_step("pt", 900))],
        must_not=[{"type": "cordon_node"}, {"type": "quarantine_gpu", "node": "n2"}],
        order=[[{"type": "quarantine_gpu", "node": "n1", "gpu": 5}, restart("pt")]],
        unique=[restart("pt"), {"type": "quarantine_gpu"}],
    )


@scenario
def gpu_gone_from_nvml_skewed_and_sparse() -> S:
    """The same with NVML's clock 25 s behind and samples every 20 s."""
    cap = fleet("n1", "n2", "n3", nvml=20).job("pt", ["n1", "n2"])
    cap.vanish(900, "n2", 2).crash(902, "pt", rank=10, error="RuntimeError: CUDA error: unknown error")
    cap.skew("nvml", -25)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n2", "culprit_gpus": [2]}],
        must=[{"type": "quarantine_gpu", "node": "n2", "gpu": 2}, restart("pt", excludes_gpu=["n2", 2])],
        order=[[{"type": "quarantine_gpu", "node": "n2", "gpu": 2}, restart("pt")]],
        unique=[restart("pt")],
    )


@scenario
def power_domain_gone_from_nvml_without_xid() -> S:
    """The four GPUs of n2's second supply drop out of NVML together, no kernel line: the supply, not four GPUs."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    for g in (4, 5, 6, 7):
        cap.vanish(900, "n2", g)
    cap.crash(902, "pt", rank=12, error="RuntimeError: CUDA error: unspecified launch failure")
    return cap, expect(
        incidents=[{"job": "pt", "category": "power_supply_fault", "culprit_node": "n2",
                    "culprit_gpus": [4, 5, 6, 7]}],
        must=[{"type": "cordon_node", "node": "n2"}, restart("pt", excludes_node="n2")],
        must_not=[{"type": "cordon_node", "node": "n1"}, {"type": "quarantine_gpu", "node": "n1"}],
        order=[[{"type": "cordon_node", "node": "n2"}, restart("pt")]],
        unique=[restart("pt")],
    )


@scenario
def idle_gpu_gone_from_nvml() -> S:
    """An idle GPU drops out of NVML: job-less lost hardware, fenced; nobody restarts."""
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.vanish(800, "n2", 6)
    return cap, expect(
        incidents=[{"job": None, "category": "gpu_off_bus", "culprit_node": "n2", "culprit_gpus": [6]}],
        must=[{"type": "quarantine_gpu", "node": "n2", "gpu": 6}],
        must_not=[{"type": "restart_job"}, {"type": "cordon_node"}],
    )


@scenario
def node_nvml_collector_stops_is_not_a_lost_gpu() -> S:
    """Every GPU of n2 stops appearing at once while its agent's heartbeats go on: the collector, not a GPU."""
    cap = fleet("n1", "n2").job("pt", ["n1"])
    for g in range(8):
        cap.vanish(800, "n2", g)
    return cap, expect(incidents=[], must_not=[{"type": "quarantine_gpu"}, {"type": "cordon_node"},
                                               {"type": "restart_job"}])


# --- checkpoints: lineage, failure domain -------------------------------------------------------------------
def _rollback(announce: bool) -> S:
    """Loss NaN at 1200; the owner restarts the job at 1300 from a checkpoint of 10 minutes before; the new
    lineage saves at lower steps than the abandoned one had reached; a GPU falls off at 1700."""
    cap = fleet("n1", "n2", duration=2400).job("pt", ["n1"], interval=300)
    back, abandoned = cap.checkpoint_step("pt", 700), cap.checkpoint_step("pt", 1250)
    cap.nan_loss(1200, "pt")
    cap.scheduler(1250, "job_cancelled", job="pt")
    cap.job("pt", ["n1"], at=1300, interval=300, resume_step=back, announce_load=announce)
    cap.xid(1700, "n1", 4, 79).crash(1701, "pt", rank=4)
    ck = cap.checkpoint_step("pt", 1700)
    assert back is not None and abandoned is not None and ck is not None and back < ck < abandoned, (back, ck)
    return cap, {"requires_approval": ["reboot_node", "reset_gpu"],
                 "incidents": [{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [4]}],
                 "must": [restart("pt", checkpoint_step=ck, excludes_gpu=["n1", 4])],
                 "must_not": [restart("pt", checkpoint_step=abandoned)]}


@scenario
def checkpoint_lineage_after_rollback() -> S:
    return _rollback(announce=True)


@scenario
def checkpoint_lineage_after_silent_rollback() -> S:
    """The same, the trainer not saying what it loaded: its saves at lower steps say it."""
    return _rollback(announce=False)


def _domain_cost(out: dict[str, Any], cap: Capture) -> list[str]:
    rs = _restarts(out)
    if not rs:
        return ["no restart"]
    cost = rs[0]["params"].get("checkpoint_cost") or {}
    bad = [] if cost.get("steps", 0) > 0 and cost.get("gpu_hours", 0) > 0 else [f"no cost said: {rs[0]['params']}"]
    if "costs" not in _incident(out, "pt")["summary"]:
        bad.append("the incident does not say what the checkpoint choice cost")
    return bad


@scenario
def node_local_checkpoint_lost_with_its_node() -> S:
    """The job checkpoints to n1's local NVMe every 5 min and to shared storage once; n1 dies with a memory
    SEL: its local checkpoints die with it, the restart uses the shared one and says what that cost."""
    cap = fleet("n1", "n2", "n3", duration=2000).job("pt", ["n1", "n2"], interval=300, ckpt_dir="/mnt/nvme/pt")
    cap.trainer(700, "pt", "checkpoint_saved", step=690, path="/mnt/ckpt/pt/step_0000690", seconds=12.0)
    cap.sel(1199, "n1", "memory").silence(1200, "n1").bmc_power(1230, "n1")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": "n1"}],
        must=[restart("pt", excludes_node="n1", checkpoint_step=690)],
        _check=_domain_cost,
    )


@scenario
def node_local_checkpoint_kept_when_only_a_gpu_fails() -> S:
    """Only a GPU of n1 fails (n1 stays in service): its local checkpoint is still a restart point."""
    cap = fleet("n1", "n2", "n3", duration=2000).job("pt", ["n1", "n2"], interval=300, ckpt_dir="/mnt/nvme/pt")
    cap.xid(1200, "n1", 6, 79).crash(1201, "pt", rank=6)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [6]}],
        must=[restart("pt", excludes_gpu=["n1", 6], checkpoint_step=cap.checkpoint_step("pt", 1200))],
    )


@scenario
def node_local_checkpoint_of_a_healthy_node() -> S:
    """The local checkpoints are on n1; n2 dies: they are still there."""
    cap = fleet("n1", "n2", "n3", duration=2000).job("pt", ["n1", "n2"], interval=300, ckpt_dir="/local/ckpt/pt")
    cap.sel(1199, "n2", "cpu").silence(1200, "n2").bmc_power(1230, "n2")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": "n2"}],
        must=[restart("pt", excludes_node="n2", checkpoint_step=cap.checkpoint_step("pt", 1200))],
    )


# --- compatible replacements -------------------------------------------------------------------------------
def _asks_for_class(cls: str, count: int) -> Any:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        rs = _restarts(out)
        if not rs:
            return ["no restart"]
        p = rs[0]["params"]
        bad = [] if p.get("gpu_class") == cls else [f"gpu_class {p.get('gpu_class')!r}, want {cls!r}"]
        if p.get("gpus") != count:
            bad.append(f"gpus {p.get('gpus')}, want {count}")
        if not isinstance(p.get("capacity_known"), int):
            bad.append(f"no healthy capacity known in {p}")
        return bad
    return check


@scenario
def restart_asks_for_the_jobs_gpu_class() -> S:
    """An elastic A100 job loses a GPU: the restart asks for A100s, one whole node (of 8) fewer."""
    cap = fleet("n1", "n2", "n3").job("el", ["n1", "n2"], elastic=(8, 16), gpu_class="A100-40GB")
    cap.xid(900, "n2", 3, 79).crash(901, "el", rank=11)
    return cap, expect(
        incidents=[{"job": "el", "category": "gpu_off_bus", "culprit_node": "n2", "culprit_gpus": [3]}],
        must=[restart("el", excludes_gpu=["n2", 3], gpus_min=8, gpus_max=8)],
        _check=_asks_for_class("A100-40GB", 8),
    )


# --- hangs timed against the job's own cadence ---------------------------------------------------------------
@scenario
def hang_spinning_in_a_collective_found_fast() -> S:
    """A job stepping every 5 s stops; every GPU stays at 100 % at a fraction of its training power: a hang,
    found within about two NVML samples -- not after ten minutes."""
    cap = fleet("n1", "n2", duration=2400).job("pt", ["n1", "n2"], step_every=5)
    cap.spin(900, "pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "training_hang", "opened_by": at_iso(900 + 100)}],
        must=[{"type": "notify", "job": "pt"}, restart("pt", checkpoint_step=cap.checkpoint_step("pt", 900))],
        must_not=NO_FENCE,
    )


@scenario
def hang_learned_from_the_cadence() -> S:
    """Steps every 10 s stop, GPUs at training power: the plain timeout, max(2 min, 5 x 10 s) + the save."""
    cap = fleet("n1", "n2", duration=2400).job("pt", ["n1", "n2"])
    cap.stop_training("pt", 900)
    return cap, expect(
        incidents=[{"job": "pt", "category": "training_hang", "opened_by": at_iso(900 + 140)}],
        must=[{"type": "notify", "job": "pt"}],
        must_not=NO_FENCE,
    )


@scenario
def slow_regular_steps_are_not_a_hang() -> S:
    """A job stepping every 2 minutes, for two hours: never a hang."""
    cap = fleet("n1", duration=7200, nvml=60, hb=30).job("big", ["n1"], step_every=120, interval=1800)
    return cap, expect(incidents=[], must_not=[{"type": "notify"}, {"type": "restart_job"}])


@scenario
def long_checkpoint_saves_are_not_a_hang() -> S:
    """Every 10 minutes a save holds the steps back for 3 minutes: allowed for, not a hang."""
    cap = fleet("n1", duration=4000).job("pt", ["n1"], interval=600, save_s=180)
    return cap, expect(incidents=[], must_not=[{"type": "notify"}, {"type": "restart_job"}])


@scenario
def hang_busy_at_training_power_is_the_plain_timeout() -> S:
    """GPUs busy at full power after the stop (not spinning idle): no early call, the plain timeout."""
    cap = fleet("n1", duration=2400).job("pt", ["n1"], step_every=5)
    cap.stop_training("pt", 900)
    return cap, expect(
        incidents=[{"job": "pt", "category": "training_hang", "opened_by": at_iso(900 + 130)}],
        must_not=NO_FENCE,
        _check=_not_before(900 + 119),
    )


def _not_before(t: float) -> Any:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        opened = [(_ts(i["opened_at"]) - _ts(at_iso(0))).total_seconds() for i in out["incidents"]]
        return [f"opened at {o:.0f} s, before {t:.0f} s" for o in opened if o < t]
    return check


# --- texts that do not go stale ------------------------------------------------------------------------------
def _current_ranks(out: dict[str, Any], cap: Capture) -> list[str]:
    inc = _incident(out, "pt")
    bad = []
    if "[21]" not in inc["summary"] or "30" in inc["summary"].split("never arrived")[0].split("rank(s)")[-1]:
        bad.append(f"the summary should name rank 21 only: {inc['summary']}")
    stale = [m for m in _notes(out) if "never arrived" in m and "30" in m.split("never arrived")[0]]
    if stale and not any("[21] never arrived" in m for m in _notes(out)[_notes(out).index(stale[-1]):]):
        bad.append(f"a notify still says rank 30 never arrived: {stale}")
    return bad


@scenario
def collective_text_follows_the_reports() -> S:
    """Ranks 21 and 30 are missing at first; rank 30's report comes 5 s later: the texts say rank 21."""
    cap = fleet("n1", "n2", "n3", "n4", duration=1800).job("pt", ["n1", "n2", "n3", "n4"])
    cap.stop_training("pt", 800)
    cap.nccl_timeout(860, "pt", missing=[21, 30], timeout_ms=60000)
    cap.nccl_timeout(865, "pt", only=[30], timeout_ms=60000)
    return cap, expect(
        incidents=[{"job": "pt", "category": "network_timeout", "culprit_node": "n3"}],
        must=[restart("pt")],
        must_not=NO_FENCE,
        _check=_current_ranks,
    )


@scenario
def collective_text_follows_a_late_report() -> S:
    """Rank 30's report reaches the pipeline 50 s late, after the incident was published and its notify sent:
    the incident and a new notify say rank 21."""
    cap = fleet("n1", "n2", "n3", "n4", duration=1800).job("pt", ["n1", "n2", "n3", "n4"])
    cap.stop_training("pt", 800)
    cap.nccl_timeout(860, "pt", missing=[21, 30], timeout_ms=60000)
    cap.nccl_timeout(861, "pt", only=[30], timeout_ms=60000).late(50)
    return cap, expect(
        incidents=[{"job": "pt", "category": "network_timeout", "culprit_node": "n3"}],
        must=[restart("pt")],
        must_not=NO_FENCE,
        _check=_current_ranks,
    )
