"""Our own decision scenarios: a capture from the builder plus what an SRE expects of it.

Each scenario returns ``(capture, expectation)``; the expectation is in the
contract's ``expect.json`` format (contract §3) and may carry ``"_check"``, a
function ``(output, capture) -> list[str]`` of further failures the scorer
cannot express (issue times, restart sizes across several restarts).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from builder import Capture, at_iso

Scenario = Callable[[], tuple[Capture, dict[str, Any]]]
SCENARIOS: dict[str, Scenario] = {}

SAFE = {"requires_approval": ["reboot_node", "reset_gpu"], "no_other_incidents": True}
NO_FENCE = [{"type": "quarantine_gpu"}, {"type": "cordon_node"}, {"type": "drain_node"}]


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def fleet(*nodes: str, duration: float = 1800, rack: str = "r1", racks: dict[str, str] | None = None,
          nvml: float | None = 30.0, hb: float = 15.0) -> Capture:
    cap = Capture(duration=duration)
    for n in nodes:
        cap.node(n, rack=(racks or {}).get(n, rack))
    return cap.heartbeats(hb).nvml(nvml)


def expect(**kw: Any) -> dict[str, Any]:
    return {**SAFE, **kw}


def restart(job: str, **m: Any) -> dict[str, Any]:
    return {"type": "restart_job", "job": job, **m}


def _ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


# --- GPU faults on a running job -------------------------------------------------------------
@scenario
def xid79_fixed_job() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 3, 79, prefix="syslog").crash(901.5, "pt", rank=3)
    ck = cap.checkpoint_step("pt", 900)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3],
                    "opened_by": at_iso(902)}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 3}, {"type": "open_ticket", "node": "n1"},
              restart("pt", checkpoint_step=ck, excludes_gpu=["n1", 3], gpus_min=16, gpus_max=16)],
        must_not=[{"type": "cordon_node"}, {"type": "quarantine_gpu", "node": "n2"},
                  {"type": "quarantine_gpu", "node": "n1", "gpu": 2}],
        order=[[{"type": "quarantine_gpu", "node": "n1", "gpu": 3}, restart("pt")]],
        unique=[restart("pt"), {"type": "quarantine_gpu", "node": "n1", "gpu": 3}],
    )


@scenario
def xid79_late_duplicated_bad_input() -> tuple[Capture, dict[str, Any]]:
    """The XID arrives 20 s late (after the crash it caused), lines are re-sent, junk is mixed in."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.xid(900, "n2", 6, 79, prefix="kmsg").late(20).dup(5)
    cap.crash(901.5, "pt", rank=14).dup(2)
    cap.nccl_timeout(1500, "pt", missing=[14])
    cap.where(lambda d: d["source"] == "scheduler").dup(30)
    cap.bad_lines(950)
    ck = cap.checkpoint_step("pt", 900)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n2", "culprit_gpus": [6],
                    "opened_by": at_iso(902)}],
        must=[{"type": "quarantine_gpu", "node": "n2", "gpu": 6}, {"type": "open_ticket", "node": "n2"},
              restart("pt", checkpoint_step=ck, excludes_gpu=["n2", 6])],
        must_not=[{"type": "cordon_node"}, {"type": "quarantine_gpu", "node": "n1"}],
        order=[[{"type": "quarantine_gpu", "node": "n2", "gpu": 6}, restart("pt")]],
        unique=[restart("pt"), {"type": "quarantine_gpu"}, {"type": "open_ticket"}],
    )


@scenario
def xid48_double_bit_ecc() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2").job("pt", ["n1", "n2"])
    cap.xid(1000, "n2", 5, 48).metric(1000.5, "n2", 5, ecc_dbe_volatile=1, ecc_dbe_aggregate=1)
    cap.crash(1001, "pt", rank=13, error="RuntimeError: CUDA error: uncorrectable ECC error encountered")
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_memory_fault", "culprit_node": "n2", "culprit_gpus": [5],
                    "opened_by": at_iso(1002)}],
        must=[{"type": "quarantine_gpu", "node": "n2", "gpu": 5}, {"type": "open_ticket", "node": "n2"},
              restart("pt", checkpoint_step=cap.checkpoint_step("pt", 1000), excludes_gpu=["n2", 5])],
        must_not=[{"type": "cordon_node"}],
        order=[[{"type": "quarantine_gpu", "node": "n2", "gpu": 5}, restart("pt")]],
    )


@scenario
def nvml_dbe_without_xid() -> tuple[Capture, dict[str, Any]]:
    """Only NVML sees it: the volatile double-bit counter goes up on an idle GPU."""
    cap = fleet("n1", "n2").job("pt", {"n1": [0, 1, 2, 3]})
    cap.metric(700, "n1", 6, ecc_dbe_volatile=2, ecc_dbe_aggregate=2)
    return cap, expect(
        incidents=[{"job": None, "category": "gpu_memory_fault", "culprit_node": "n1", "culprit_gpus": [6]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 6}, {"type": "open_ticket", "node": "n1"}],
        must_not=[{"type": "restart_job"}, {"type": "cordon_node"}],
    )


@scenario
def xid63_with_remapped_rows_pending() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.xid(800, "n1", 2, 63).metric(802, "n1", 2, remapped_rows_pending=True)
    cap.crash(803, "pt", rank=2, error="RuntimeError: CUDA error: uncorrectable ECC error encountered")
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_memory_fault", "culprit_node": "n1", "culprit_gpus": [2],
                    "opened_by": at_iso(805)}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 2},
              restart("pt", excludes_gpu=["n1", 2], checkpoint_step=cap.checkpoint_step("pt", 800))],
        order=[[{"type": "quarantine_gpu", "node": "n1", "gpu": 2}, restart("pt")]],
    )


@scenario
def xid63_pending_seen_at_next_sample() -> tuple[Capture, dict[str, Any]]:
    """NVML reports the pending remap only at its next regular sample, 25 s after the XID; the XID
    line itself arrives late, after that sample."""
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.xid(800, "n1", 5, 63).late(40)
    cap.metric(825, "n1", 5, remapped_rows_pending=True)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_memory_fault", "culprit_node": "n1", "culprit_gpus": [5],
                    "opened_by": at_iso(800)}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 5}, restart("pt", excludes_gpu=["n1", 5])],
    )


@scenario
def xid63_without_pending_remap() -> tuple[Capture, dict[str, Any]]:
    """A row remap recorded and nothing pending: the GPU handled it, the job keeps training."""
    cap = fleet("n1").job("pt", ["n1"])
    cap.xid(800, "n1", 4, 63).metric(801, "n1", 4, remapped_rows_pending=False)
    return cap, expect(incidents=[], must_not=[{"type": "quarantine_gpu"}, {"type": "restart_job"},
                                               {"type": "open_ticket"}])


@scenario
def xid74_nvlink_reset_needs_approval() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 6, 74)
    cap.crash(901, "pt", rank=6, error="torch.distributed.DistBackendError: NCCL error in: "
              "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error")
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_nvlink_fault", "culprit_node": "n1", "culprit_gpus": [6]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 6},
              {"type": "reset_gpu", "node": "n1", "gpu": 6, "requires_approval": True},
              {"type": "validate_gpu", "node": "n1", "gpu": 6},
              restart("pt", excludes_gpu=["n1", 6], checkpoint_step=cap.checkpoint_step("pt", 900))],
        must_not=[{"type": "cordon_node"}],
        order=[[{"type": "quarantine_gpu", "node": "n1", "gpu": 6}, restart("pt")],
               [{"type": "quarantine_gpu", "node": "n1", "gpu": 6}, {"type": "reset_gpu"}]],
    )


@scenario
def xid119_gsp_firmware() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2").job("pt", ["n2"])
    cap.xid(1000, "n2", 1, 119, prefix="dmesg")
    cap.crash(1030, "pt", rank=1, error="RuntimeError: CUDA error: unspecified launch failure")
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_firmware_fault", "culprit_node": "n2", "culprit_gpus": [1]}],
        must=[{"type": "quarantine_gpu", "node": "n2", "gpu": 1},
              {"type": "reset_gpu", "node": "n2", "gpu": 1, "requires_approval": True},
              restart("pt", excludes_gpu=["n2", 1])],
        order=[[{"type": "quarantine_gpu", "node": "n2", "gpu": 1}, restart("pt")]],
    )


@scenario
def xid95_two_gpus_two_nodes() -> tuple[Capture, dict[str, Any]]:
    """Uncontained ECC on one GPU of each of two nodes at once: both fenced before the one restart."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 0, 95).xid(900.2, "n2", 7, 95)
    cap.crash(901, "pt", rank=0, error="RuntimeError: CUDA error: uncorrectable ECC error encountered")
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_memory_fault"}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 0}, {"type": "quarantine_gpu", "node": "n2", "gpu": 7},
              restart("pt", excludes_gpu=["n1", 0]), restart("pt", excludes_gpu=["n2", 7])],
        order=[[{"type": "quarantine_gpu", "node": "n2", "gpu": 7}, restart("pt")]],
        unique=[restart("pt")],
    )


@scenario
def xid13_idle_gpu() -> tuple[Capture, dict[str, Any]]:
    """An application XID on a GPU nobody runs on: nothing to do."""
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.xid(700, "n2", 3, 13, prefix="syslog")
    return cap, expect(incidents=[], must_not=[{"type": "quarantine_gpu"}, {"type": "open_ticket"},
                                               {"type": "notify"}])


@scenario
def xid13_with_worker_crash() -> tuple[Capture, dict[str, Any]]:
    """XID 13 is the application's: with the crash it is a software crash, the GPU stays in service."""
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.xid(700, "n1", 3, 13)
    cap.crash(700.5, "pt", rank=3, error="RuntimeError: CUDA error: an illegal memory access was encountered")
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash", "opened_by": at_iso(702)}],
        must=[{"type": "notify", "job": "pt"}, restart("pt", requires_approval=False)],
        must_not=NO_FENCE + [{"type": "open_ticket"}],
    )


@scenario
def xid31_alone_then_exception() -> tuple[Capture, dict[str, Any]]:
    """An MMU fault logged by the kernel, the rank raises: the application's bug."""
    cap = fleet("n1").job("pt", ["n1"])
    cap.xid(650, "n1", 5, 31)
    cap.cuda_error(651, "pt", 5)
    cap.crash(651.2, "pt", rank=5, error="RuntimeError: CUDA error: an illegal memory access was encountered")
    return cap, expect(incidents=[{"job": "pt", "category": "software_crash"}], must_not=NO_FENCE)


# --- ECC and thermal trends ------------------------------------------------------------------------
@scenario
def single_sbe_no_incident() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1").job("pt", ["n1"])
    cap.metric(600, "n1", 2, ecc_sbe_volatile=1, ecc_sbe_aggregate=1)
    return cap, expect(incidents=[], must_not=[{"type": "open_ticket"}, {"type": "quarantine_gpu"}])


def _sbe_fleet(job: bool) -> Capture:
    cap = fleet("n7", duration=3 * 86400, nvml=None, hb=300)
    if job:
        cap.job("long", ["n7"], interval=3600, step_every=300)
    cap.metric(60, "n7", 6, ecc_sbe_volatile=0, ecc_sbe_aggregate=0)
    return cap


@scenario
def rising_sbe_jobless() -> tuple[Capture, dict[str, Any]]:
    """Single-bit errors coming faster and faster over two days on an idle GPU: no job to ask to save."""
    cap = _sbe_fleet(job=False)
    for k, h in enumerate([2, 20, 34, 44, 51, 56, 59.5, 62]):
        cap.metric(h * 3600, "n7", 6, ecc_sbe_volatile=4 * (k + 1), ecc_sbe_aggregate=4 * (k + 1))
    return cap, expect(
        incidents=[{"job": None, "category": "gpu_ecc_degradation", "culprit_node": "n7", "culprit_gpus": [6]}],
        must=[{"type": "open_ticket", "node": "n7"}],
        must_not=[{"type": "restart_job"}, {"type": "cordon_node"}, {"type": "quarantine_gpu"},
                  {"type": "checkpoint_now"}],
    )


@scenario
def rising_xid92_on_running_job() -> tuple[Capture, dict[str, Any]]:
    """XID 92 more and more often while a job runs there: the job is asked to save now (the GPU may fail
    soon), once, before the ticket; a word to the owner; no restart."""
    cap = _sbe_fleet(job=True)
    for h in [1, 18, 31, 41, 48, 53, 56.5, 59]:
        cap.xid(h * 3600, "n7", 6, 92, prefix="syslog")
    save = {"type": "checkpoint_now", "job": "long", "node": "n7", "gpu": 6}
    return cap, expect(
        incidents=[{"job": "long", "category": "gpu_ecc_degradation", "culprit_node": "n7", "culprit_gpus": [6]}],
        must=[save, {"type": "open_ticket", "node": "n7"}, {"type": "notify", "job": "long"}],
        must_not=[{"type": "restart_job"}, {"type": "cordon_node"}, {"type": "quarantine_gpu"}],
        unique=[{"type": "checkpoint_now"}],
        order=[[save, {"type": "open_ticket", "node": "n7"}]],
    )


@scenario
def thermal_sustained() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.metric(600, "n1", 4, temperature_c=91.0, clocks_event_reasons=["SW_POWER_CAP"])
    cap.metric(1200, "n1", 4, temperature_c=88.0)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_thermal", "culprit_node": "n1", "culprit_gpus": [4],
                    "opened_by": at_iso(600 + 300 + 31)}],
        must=[{"type": "checkpoint_now", "job": "pt", "node": "n1", "gpu": 4}, {"type": "open_ticket", "node": "n1"},
              {"type": "notify", "job": "pt"}],
        must_not=[{"type": "restart_job"}, {"type": "quarantine_gpu"}, {"type": "cordon_node"}],
        unique=[{"type": "open_ticket"}, {"type": "checkpoint_now"}],
    )


@scenario
def thermal_short_spike() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1").job("pt", ["n1"])
    cap.metric(600, "n1", 4, temperature_c=93.0).metric(720, "n1", 4, temperature_c=70.0)
    cap.metric(1000, "n1", 5, temperature_c=90.0).metric(1200, "n1", 5, temperature_c=71.0)
    return cap, expect(incidents=[], must_not=[{"type": "open_ticket"}, {"type": "notify"}])


@scenario
def thermal_slowdown_idle_gpu() -> tuple[Capture, dict[str, Any]]:
    """HW thermal slowdown for ten minutes on an idle GPU: a cooling ticket for the node; the job running on
    another node is not asked to save."""
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.metric(500, "n2", 0, temperature_c=83.0, clocks_event_reasons=["HW_THERMAL_SLOWDOWN"])
    return cap, expect(
        incidents=[{"job": None, "category": "gpu_thermal", "culprit_node": "n2", "culprit_gpus": [0]}],
        must=[{"type": "open_ticket", "node": "n2"}],
        must_not=[{"type": "restart_job"}, {"type": "quarantine_gpu"}, {"type": "checkpoint_now"}],
    )


# --- power ---------------------------------------------------------------------------------------
def _psu(sel: bool) -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    if sel:
        cap.sel(899.9, "n2", "psu")
    for k, g in enumerate([4, 5, 6, 7]):
        cap.xid(900 + 0.001 * k, "n2", g, 79)
    cap.crash(902, "pt", rank=12, error="RuntimeError: CUDA error: unspecified launch failure")
    return cap, expect(
        incidents=[{"job": "pt", "category": "power_supply_fault", "culprit_node": "n2",
                    "culprit_gpus": [4, 5, 6, 7], "opened_by": at_iso(901)}],
        must=[{"type": "cordon_node", "node": "n2"}, {"type": "open_ticket", "node": "n2"},
              restart("pt", excludes_node="n2", checkpoint_step=cap.checkpoint_step("pt", 900))],
        must_not=[{"type": "quarantine_gpu", "node": "n2", "gpu": 0}, {"type": "quarantine_gpu", "node": "n1"},
                  {"type": "cordon_node", "node": "n1"}],
        order=[[{"type": "cordon_node", "node": "n2"}, restart("pt")]],
    )


@scenario
def psu_rail_with_sel() -> tuple[Capture, dict[str, Any]]:
    return _psu(sel=True)


@scenario
def psu_domain_loss_without_sel() -> tuple[Capture, dict[str, Any]]:
    """Four GPUs of one power domain gone in the same millisecond: the supply, not four GPUs."""
    return _psu(sel=False)


@scenario
def psu_sel_redundant_supply() -> tuple[Capture, dict[str, Any]]:
    """One of two supplies fails and nothing is lost: a repair ticket, the job keeps running."""
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.sel(800, "n1", "psu_ac")
    return cap, expect(
        incidents=[{"job": None, "category": "power_supply_fault", "culprit_node": "n1"}],
        must=[{"type": "open_ticket", "node": "n1"}],
        must_not=[{"type": "restart_job"}, {"type": "cordon_node"}, {"type": "quarantine_gpu"}],
    )


# --- nodes and racks ---------------------------------------------------------------------------------
@scenario
def node_down_between_slow_heartbeats_after_a_save() -> tuple[Capture, dict[str, Any]]:
    """An agent that beats every two minutes; the job's ranks on n2 step, and save at about 914 s, until n2 dies at
    960 s. The node was alive while its job stepped: the failure is as late as its last step, and the save made
    after the agent's last beat is the restart point (issue #25: a silent node is dated by any of its sources)."""
    cap = fleet("n1", "n2", "n3", duration=2100, nvml=None, hb=120.0).job("pt", ["n1", "n2"], interval=300.0)
    cap.silence(960, "n2")
    cap.nccl_timeout(1500, "pt", missing=range(8, 16))
    cap.scheduler(1503, "job_failed", job="pt")
    ck = cap.checkpoint_step("pt", 960)
    assert ck is not None and ck != cap.checkpoint_step("pt", 900), "the save must fall after the agent's last beat"
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_down", "culprit_node": "n2"}],
        must=[{"type": "cordon_node", "node": "n2"}, restart("pt", excludes_node="n2", checkpoint_step=ck)],
        must_not=[{"type": "cordon_node", "node": "n1"}, {"type": "quarantine_gpu"}],
        unique=[restart("pt")],
    )


@scenario
def node_down_reboot_needs_approval() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2", "n3", duration=2100).job("pt", ["n1", "n2"])
    cap.silence(900, "n2").bmc_power(930, "n2", on=True).bmc_power(990, "n2", on=True)
    cap.sel(935, "n2", "log_cleared").scheduler(960, "node_not_ready", node="n2")
    cap.nccl_timeout(1500, "pt", missing=range(8, 16))
    cap.scheduler(1503, "job_failed", job="pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_down", "culprit_node": "n2", "opened_by": at_iso(1000)}],
        must=[{"type": "cordon_node", "node": "n2"},
              {"type": "reboot_node", "node": "n2", "requires_approval": True},
              restart("pt", excludes_node="n2", gpus_min=16, gpus_max=16,
                      checkpoint_step=cap.checkpoint_step("pt", 900))],
        must_not=[{"type": "cordon_node", "node": "n1"}, {"type": "quarantine_gpu"}],
        order=[[{"type": "cordon_node", "node": "n2"}, restart("pt")]],
        unique=[restart("pt")],
    )


@scenario
def node_hardware_fault_memory_sel() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2", "n3", duration=2000).job("pt", ["n1", "n2"])
    cap.sel(899, "n1", "memory").silence(900, "n1").bmc_power(940, "n1", on=True)
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": "n1",
                    "opened_by": at_iso(1000)}],
        must=[{"type": "cordon_node", "node": "n1"}, {"type": "drain_node", "node": "n1"},
              {"type": "open_ticket", "node": "n1"}, restart("pt", excludes_node="n1")],
        order=[[{"type": "cordon_node", "node": "n1"}, restart("pt")]],
        must_not=[{"type": "reboot_node"}, {"type": "cordon_node", "node": "n2"}],
    )


@scenario
def node_hardware_fault_idle_node() -> tuple[Capture, dict[str, Any]]:
    """A CPU IERR on a node no job uses: fence it and open a repair, nobody to restart."""
    cap = fleet("n1", "n2", duration=1500).job("pt", ["n1"])
    cap.sel(700, "n2", "cpu").silence(701, "n2").bmc_power(730, "n2")
    return cap, expect(
        incidents=[{"job": None, "category": "node_hardware_fault", "culprit_node": "n2"}],
        must=[{"type": "cordon_node", "node": "n2"}, {"type": "open_ticket", "node": "n2"}],
        must_not=[{"type": "restart_job"}, {"type": "cordon_node", "node": "n1"}],
    )


def _rack(first_poll: float) -> tuple[Capture, dict[str, Any]]:
    racks = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2", "n5": "r2"}
    cap = fleet("n1", "n2", "n3", "n4", "n5", racks=racks, duration=2100)
    cap.job("big", ["n3", "n4"]).job("small", ["n1"])
    for n in ("n3", "n4", "n5"):
        cap.silence(900, n).bmc_unreachable(900 + first_poll, n).bmc_unreachable(960 + first_poll, n)
    return cap, expect(
        incidents=[{"job": "big", "category": "rack_outage", "opened_by": at_iso(1000 + first_poll)},
                   {"job": None, "category": "rack_outage", "culprit_node": "n5"}],
        must=[{"type": "cordon_node", "node": n} for n in ("n3", "n4", "n5")]
        + [restart("big", excludes_node="n3"), restart("big", excludes_node="n4"),
           {"type": "open_ticket", "node": "n5"}],
        must_not=[{"type": "restart_job", "job": "small"}, {"type": "cordon_node", "node": "n1"},
                  {"type": "reboot_node"}],
        order=[[{"type": "cordon_node", "node": "n4"}, restart("big")],
               [{"type": "cordon_node", "node": "n3"}, restart("big")]],
        unique=[restart("big")],
    )


@scenario
def rack_outage() -> tuple[Capture, dict[str, Any]]:
    """Three nodes of rack r2 go dark, BMCs included; the job on r1 carries on."""
    return _rack(first_poll=15)


@scenario
def rack_outage_bmc_polled_late() -> tuple[Capture, dict[str, Any]]:
    """The BMCs' failed polls come in only 100 s after the nodes went quiet: still the rack."""
    return _rack(first_poll=100)


@scenario
def single_node_silent_bmc_unreachable() -> tuple[Capture, dict[str, Any]]:
    """One node (alone in its rack's trouble) loses in-band and BMC: the node, not the rack."""
    racks = {"n1": "r1", "n2": "r1", "n3": "r1"}
    cap = fleet("n1", "n2", "n3", racks=racks, duration=1600).job("pt", ["n1", "n2"])
    cap.silence(700, "n2").bmc_unreachable(720, "n2")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_down", "culprit_node": "n2"}],
        must=[{"type": "cordon_node", "node": "n2"}, restart("pt", excludes_node="n2")],
        must_not=[{"type": "cordon_node", "node": "n3"}],
    )


# --- collectives, crashes, the job's own trouble --------------------------------------------------
@scenario
def network_timeout_rank_behind() -> tuple[Capture, dict[str, Any]]:
    """Every rank reports the watchdog; rank 11 never enqueued the collective the others wait in."""
    cap = fleet("n1", "n2").job("pt", ["n1", "n2"])
    cap.stop_training("pt", 800)
    cap.nccl_timeout(1400, "pt", seq=5120, behind=[11])
    for r in range(16):
        cap.worker_exit(1402, "pt", r, -6)
    cap.scheduler(1404, "job_failed", job="pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "network_timeout", "culprit_node": "n2", "culprit_gpus": [3]}],
        must=[restart("pt", checkpoint_step=cap.checkpoint_step("pt", 800))],
        must_not=NO_FENCE,
        unique=[restart("pt")],
    )


@scenario
def network_timeout_rank_missing() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2", "n3", "n4", duration=1700).job("pt", ["n1", "n2", "n3", "n4"])
    cap.stop_training("pt", 800)
    cap.nccl_timeout(1400, "pt", missing=[21])
    for r in range(32):
        cap.worker_exit(1402, "pt", r, -6)
    cap.scheduler(1404, "job_failed", job="pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "network_timeout", "culprit_node": "n3"}],
        must=[restart("pt", checkpoint_step=cap.checkpoint_step("pt", 800))],
        must_not=NO_FENCE,
    )


@scenario
def cuda_oom_config_not_hardware() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1").job("sft", ["n1"])
    cap.cuda_oom(500, "sft", 5)
    return cap, expect(
        incidents=[{"job": "sft", "category": "cuda_oom", "opened_by": at_iso(501)}],
        must=[{"type": "notify", "job": "sft"}],
        must_not=NO_FENCE + [restart("sft")],
    )


@scenario
def python_exception_crash() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2").job("pt", ["n1", "n2"])
    cap.exception(700, "pt", 9, "KeyError: 'input_ids'")
    cap.crash(700.1, "pt", rank=9, error="KeyError: 'input_ids'", form="plain")
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash"}],
        must=[{"type": "notify", "job": "pt"},
              restart("pt", requires_approval=False, checkpoint_step=cap.checkpoint_step("pt", 700))],
        must_not=NO_FENCE,
    )


@scenario
def checkpoint_write_failures() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1").job("ft", ["n1"], interval=300)
    cap.stop_checkpoints("ft", 650)
    cap.checkpoint_failed(910, "ft", 900).checkpoint_failed(1210, "ft", 1200,
                                                            error="OSError: [Errno 30] Read-only file system")
    return cap, expect(
        incidents=[{"job": "ft", "category": "checkpoint_failure", "opened_by": at_iso(911)}],
        must=[{"type": "notify", "job": "ft"}, {"type": "open_ticket", "job": "ft"}],
        must_not=NO_FENCE + [{"type": "restart_job"}],
    )


@scenario
def checkpoint_stale() -> tuple[Capture, dict[str, Any]]:
    """Steps go on, checkpoints silently stop: after three intervals someone must know."""
    cap = fleet("n1", duration=2400).job("ft", ["n1"], interval=300)
    cap.stop_checkpoints("ft", 400)
    last = cap.checkpoint_before("ft", 400)
    assert last is not None
    return cap, expect(
        incidents=[{"job": "ft", "category": "checkpoint_stale", "opened_by": at_iso(last[0] + 3 * 300 + 30)}],
        must=[{"type": "notify", "job": "ft"}],
        must_not=NO_FENCE + [{"type": "restart_job"}],
    )


@scenario
def training_hang() -> tuple[Capture, dict[str, Any]]:
    """Steps stop, every process and node stays alive, nothing crashes."""
    cap = fleet("n1", "n2", duration=2400).job("pt", ["n1", "n2"])
    cap.stop_training("pt", 900)
    return cap, expect(
        incidents=[{"job": "pt", "category": "training_hang", "opened_by": at_iso(900 + 620)}],
        must=[{"type": "notify", "job": "pt"}, restart("pt", checkpoint_step=cap.checkpoint_step("pt", 900))],
        must_not=NO_FENCE,
    )


@scenario
def loss_nan() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1").job("pt", ["n1"])
    cap.nan_loss(800, "pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "loss_anomaly", "opened_by": at_iso(811)}],
        must=[{"type": "notify", "job": "pt"}],
        must_not=NO_FENCE + [{"type": "restart_job"}],
        unique=[{"type": "notify"}],
    )


# --- sizes, neighbours, loops, budgets, storms -----------------------------------------------------
@scenario
def elastic_shrinks_by_one_gpu() -> tuple[Capture, dict[str, Any]]:
    """A GPU lost of two nodes of 8: the launcher forms whole nodes of 8, so one node's worth (8), not 15."""
    cap = fleet("n1", "n2").job("el", ["n1", "n2"], elastic=(8, 16))
    cap.xid(900, "n2", 1, 79).crash(901, "el", rank=9)
    return cap, expect(
        incidents=[{"job": "el", "category": "gpu_off_bus", "culprit_node": "n2", "culprit_gpus": [1]}],
        must=[restart("el", excludes_gpu=["n2", 1], gpus_min=8, gpus_max=8)],
    )


@scenario
def elastic_loses_a_node() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2", duration=1800).job("el", ["n1", "n2"], elastic=(8, 16))
    cap.sel(899, "n2", "board").silence(900, "n2").bmc_power(930, "n2")
    return cap, expect(
        incidents=[{"job": "el", "category": "node_hardware_fault", "culprit_node": "n2"}],
        must=[restart("el", excludes_node="n2", gpus_min=8, gpus_max=8)],
    )


@scenario
def elastic_floor_holds() -> tuple[Capture, dict[str, Any]]:
    """Losing more than the job can shrink: ask for the minimum, never below it -- in whole nodes of 8, the
    fewest that hold 12 GPUs: 16."""
    cap = fleet("n1", "n2", "n3", duration=1800).job("el", ["n1", "n2"], elastic=(12, 16))
    cap.sel(899, "n2", "memory").silence(900, "n2").bmc_power(930, "n2")
    return cap, expect(
        incidents=[{"job": "el", "category": "node_hardware_fault", "culprit_node": "n2"}],
        must=[restart("el", excludes_node="n2", gpus_min=16, gpus_max=16)],
    )


@scenario
def two_jobs_one_node_gpu_fault() -> tuple[Capture, dict[str, Any]]:
    """Two jobs share n1; a GPU of job a falls off: only a restarts, b keeps training."""
    cap = fleet("n1", "n2").job("a", {"n1": [0, 1, 2, 3]}).job("b", {"n1": [4, 5, 6, 7]})
    cap.xid(800, "n1", 2, 79).crash(801, "a", rank=2)
    return cap, expect(
        incidents=[{"job": "a", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [2]}],
        must=[restart("a", excludes_gpu=["n1", 2], gpus_min=4, gpus_max=4)],
        must_not=[restart("b"), {"type": "cordon_node"}, {"type": "notify", "job": "b"}],
    )


@scenario
def two_jobs_one_node_node_fault() -> tuple[Capture, dict[str, Any]]:
    """The shared node dies with a CPU machine check: both jobs restart elsewhere, one cordon."""
    cap = fleet("n1", "n2", duration=1800).job("a", {"n1": [0, 1, 2, 3]}).job("b", {"n1": [4, 5, 6, 7]})
    cap.sel(799, "n1", "cpu").silence(800, "n1").bmc_power(830, "n1")
    return cap, expect(
        incidents=[{"job": "a", "category": "node_hardware_fault", "culprit_node": "n1"},
                   {"job": "b", "category": "node_hardware_fault", "culprit_node": "n1"}],
        must=[restart("a", excludes_node="n1"), restart("b", excludes_node="n1")],
        order=[[{"type": "cordon_node", "node": "n1"}, restart("a")],
               [{"type": "cordon_node", "node": "n1"}, restart("b")]],
        unique=[{"type": "cordon_node", "node": "n1"}, {"type": "drain_node", "node": "n1"},
                {"type": "open_ticket", "node": "n1"}, restart("a"), restart("b")],
    )


def _loop_check(out: dict[str, Any], cap: Capture) -> list[str]:
    rs = [c for c in out["commands"] if c["type"] == "restart_job"]
    if len(rs) != 2:
        return [f"want 2 restarts of one incident, got {len(rs)}"]
    bad = []
    if rs[0]["incident"] != rs[1]["incident"]:
        bad.append("the second failure of the same cause should be the same incident")
    if "n1" in rs[0]["params"]["exclude"]["nodes"]:
        bad.append("first restart should only exclude the GPU, not the node")
    return bad


@scenario
def restart_loop_same_node() -> tuple[Capture, dict[str, Any]]:
    """A GPU of n1 falls off, the job comes back on n1's other GPUs, a second GPU of n1 falls off:
    the node itself is suspect and the next restart avoids it."""
    cap = fleet("n1", "n2", duration=2400).job("ft", ["n1"], elastic=(4, 8))
    cap.xid(700, "n1", 2, 79).crash(701, "ft", rank=2)
    cap.job("ft", {"n1": [0, 1, 3, 4, 5, 6, 7]}, at=780, elastic=(4, 8))
    cap.xid(1400, "n1", 5, 79).crash(1401, "ft", rank=4)
    return cap, expect(
        incidents=[{"job": "ft", "category": "gpu_off_bus", "culprit_node": "n1"}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 2}, {"type": "quarantine_gpu", "node": "n1", "gpu": 5},
              restart("ft", excludes_gpu=["n1", 2], gpus_max=7),
              restart("ft", excludes_node="n1", checkpoint_step=cap.checkpoint_step("ft", 1400))],
        order=[[{"type": "quarantine_gpu", "node": "n1", "gpu": 5}, restart("ft", excludes_node="n1")]],
        at_most=[[restart("ft"), 2]],
        _check=_loop_check,
    )


@scenario
def software_crash_loop_needs_approval() -> tuple[Capture, dict[str, Any]]:
    """The same bug kills the job again after an automatic restart: the next restart waits for a person."""
    cap = fleet("n1", "n2", duration=2000).job("pt", ["n1"])
    cap.crash(700, "pt", rank=0, error="ValueError: shapes (16, 4096) and (8192,) not aligned")
    cap.job("pt", ["n1"], at=760)
    cap.crash(1300, "pt", rank=0, error="ValueError: shapes (16, 4096) and (8192,) not aligned")
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash"}],
        must=[restart("pt", requires_approval=False), restart("pt", requires_approval=True),
              {"type": "notify", "job": "pt"}],
        must_not=NO_FENCE,
        at_most=[[restart("pt"), 2]],
        order=[[restart("pt", requires_approval=False), restart("pt", requires_approval=True)]],
    )


@scenario
def restart_budget_exhausted() -> tuple[Capture, dict[str, Any]]:
    """max_restarts 1: the first failure is restarted, the second is a person's call."""
    cap = fleet("n1", "n2", "n3", duration=2000).job("pt", ["n1"], max_restarts=1)
    cap.xid(600, "n1", 1, 74).crash(601, "pt", rank=1, error="RuntimeError: CUDA error: unspecified launch failure")
    cap.job("pt", ["n2"], at=700, max_restarts=1)
    cap.xid(1300, "n2", 3, 74).crash(1301, "pt", rank=3, error="RuntimeError: CUDA error: unspecified launch failure")
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_nvlink_fault"}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 1}, {"type": "quarantine_gpu", "node": "n2", "gpu": 3},
              restart("pt", excludes_gpu=["n1", 1]), {"type": "notify", "job": "pt"}],
        must_not=[restart("pt", excludes_gpu=["n2", 3])],
        at_most=[[restart("pt"), 1]],
    )


@scenario
def no_restart_budget_at_all() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2").job("pt", ["n1"], max_restarts=0)
    cap.xid(900, "n1", 4, 79).crash(901, "pt", rank=4)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [4]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 4}, {"type": "notify", "job": "pt"}],
        must_not=[{"type": "restart_job"}],
    )


def _storm_check(out: dict[str, Any], cap: Capture) -> list[str]:
    times = sorted(_ts(c["issued_at"]) for c in out["commands"] if c["type"] == "restart_job")
    bad = []
    if len(times) != 12:
        bad.append(f"want 12 restarts, got {len(times)}")
    for k, t in enumerate(times):
        window = [u for u in times[k:] if (u - t).total_seconds() < 60]
        if len(window) > 8:
            bad.append(f"{len(window)} restarts within 60 s from {t.isoformat()} (burst is 8)")
            break
    if len(times) == 12 and (times[-1] - times[0]).total_seconds() < 60:
        bad.append("restarts not staggered")
    return bad


@scenario
def recovery_storm_staggered() -> tuple[Capture, dict[str, Any]]:
    """A rack with twelve single-node jobs goes dark: twelve restarts, at most 8 a minute."""
    names = [f"s{k:02d}" for k in range(12)]
    racks = {n: "r9" for n in names} | {"spare1": "r1", "spare2": "r1"}
    cap = fleet(*names, "spare1", "spare2", racks=racks, duration=1500, nvml=None)
    for k, n in enumerate(names):
        cap.job(f"j{k:02d}", [n], interval=300)
    for n in names:
        cap.silence(700, n).bmc_unreachable(710, n)
    return cap, expect(
        incidents=[{"job": f"j{k:02d}", "category": "rack_outage"} for k in range(12)],
        must=[restart(f"j{k:02d}", excludes_node=n) for k, n in enumerate(names)],
        unique=[restart(f"j{k:02d}") for k in range(12)],
        _check=_storm_check,
    )


@scenario
def jobless_gpu_off_bus() -> tuple[Capture, dict[str, Any]]:
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.xid(600, "n2", 7, 79)
    return cap, expect(
        incidents=[{"job": None, "category": "gpu_off_bus", "culprit_node": "n2", "culprit_gpus": [7]}],
        must=[{"type": "quarantine_gpu", "node": "n2", "gpu": 7}, {"type": "open_ticket", "node": "n2"}],
        must_not=[{"type": "restart_job"}, {"type": "notify", "job": "pt"}],
    )


@scenario
def job_finishes_normally() -> tuple[Capture, dict[str, Any]]:
    """Nothing wrong: the job trains, checkpoints and finishes; background noise only."""
    cap = fleet("n1", "n2").job("pt", ["n1", "n2"])
    cap.sel(300, "n1", "memory_ce").sel(400, "n2", "log_cleared")
    cap.scheduler(1500, "job_finished", job="pt")
    return cap, expect(incidents=[], must_not=[{"type": t} for t in (
        "quarantine_gpu", "cordon_node", "drain_node", "restart_job", "notify", "open_ticket")])


# --- clocks ------------------------------------------------------------------------------------------
def _skewed(kernel: float, torchelastic: float) -> tuple[Capture, dict[str, Any]]:
    cap, exp = xid79_fixed_job()
    cap.skew("kernel", kernel).skew("torchelastic", torchelastic)
    exp["incidents"][0]["opened_by"] = at_iso(902 + max(0.0, kernel))
    return cap, exp


@scenario
def clock_skew_kernel_ahead() -> tuple[Capture, dict[str, Any]]:
    return _skewed(30, 0)


@scenario
def clock_skew_kernel_behind() -> tuple[Capture, dict[str, Any]]:
    return _skewed(-30, 0)


@scenario
def clock_skew_torchelastic_behind() -> tuple[Capture, dict[str, Any]]:
    return _skewed(0, -30)


# --- lemons: hardware in failure after failure that each looked like software -----------------------
DAY = 86400.0
BUG = "RuntimeError: CUDA error: an illegal memory access was encountered"


def lemon_fleet(days: float = 7.5) -> Capture:
    """Two nodes over a week or more: sparse heartbeats, no NVML (a long capture stays small)."""
    return fleet("n1", "n2", duration=days * DAY, nvml=None, hb=600)


def crashes(cap: Capture, runs: list[tuple[str, float, int]], node: str = "n1", run_s: float = 3600) -> Capture:
    """Each (job, start, GPU): the job runs ``run_s`` on ``node``, then the rank on that GPU crashes."""
    for job, start, gpu in runs:
        cap.job(job, [node], at=start).crash(start + run_s, job, rank=gpu, error=BUG)
    return cap


def _no_lemon(cap: Capture, jobs: list[str]) -> dict[str, Any]:
    return expect(incidents=[{"job": j, "category": "software_crash"} for j in dict.fromkeys(jobs)],
                  must=[restart(jobs[0])], must_not=[*NO_FENCE, {"type": "validate_gpu"}])


@scenario
def lemon_gpu_three_jobs_in_a_week() -> tuple[Capture, dict[str, Any]]:
    """GPU 5 of n1 is in the software crashes of three different jobs over six days: each alone is the
    application's, together they are the card's. It is fenced and validated at the third, before that
    job's restart, which avoids it."""
    cap = crashes(lemon_fleet(), [("a", 0.5 * DAY, 5), ("b", 3.5 * DAY, 5), ("c", 6.5 * DAY, 5)])
    third = 6.5 * DAY + 3600

    def check(out: dict[str, Any], _cap: Capture) -> list[str]:
        fences = [c for c in out["commands"] if c["type"] == "quarantine_gpu"]
        return [f"lemon fenced at {c['issued_at']}, before the third crash" for c in fences
                if _ts(c["issued_at"]) < _ts(at_iso(third))]

    return cap, expect(
        incidents=[{"job": j, "category": "software_crash", "culprit_node": "n1", "culprit_gpus": [5]}
                   for j in "abc"],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 5}, {"type": "validate_gpu", "node": "n1", "gpu": 5},
              restart("a"), restart("b"), restart("c", excludes_gpu=["n1", 5])],
        must_not=[{"type": "cordon_node"}, restart("a", excludes_gpu=["n1", 5]),
                  restart("b", excludes_gpu=["n1", 5])],
        at_most=[[{"type": "quarantine_gpu"}, 1], [{"type": "validate_gpu"}, 1]],
        order=[[{"type": "quarantine_gpu"}, restart("c")]],
        _check=check,
    )


@scenario
def lemon_gpu_once_is_not_a_lemon() -> tuple[Capture, dict[str, Any]]:
    """Three jobs crash in a week on the same node, each on another GPU: every card appears once."""
    cap = crashes(lemon_fleet(), [("a", 0.5 * DAY, 5), ("b", 3.5 * DAY, 2), ("c", 6.5 * DAY, 7)])
    return cap, _no_lemon(cap, ["a", "b", "c"])


@scenario
def lemon_one_jobs_own_bug_is_not_a_lemon() -> tuple[Capture, dict[str, Any]]:
    """One job crashes three times in a week on the same GPU (restarted in between): its own bug, not
    the card's, until another job fails there too. (Each run lasts eight hours, past the reopen window:
    three incidents, not one reopened.)"""
    cap = crashes(lemon_fleet(), [("a", 0.5 * DAY, 5), ("a", 3 * DAY, 5), ("a", 5.5 * DAY, 5)], run_s=8 * 3600)
    exp = _no_lemon(cap, ["a"])
    exp["incidents"] = []  # three incidents of one job: the scorer wants one per job, so count them here
    exp["no_other_incidents"] = False

    def check(out: dict[str, Any], _cap: Capture) -> list[str]:
        cats = [i["category"] for i in out["incidents"]]
        return [] if cats == ["software_crash"] * 3 else [f"expected three software crashes of a, got {cats}"]

    exp["_check"] = check
    return cap, exp


@scenario
def lemon_node_failures_on_many_gpus() -> tuple[Capture, dict[str, Any]]:
    """Five jobs crash on n1 within four days, each on another GPU: no card is a lemon, the node is."""
    cap = crashes(lemon_fleet(5), [(f"j{k}", (0.3 + 0.8 * k) * DAY, g) for k, g in enumerate([1, 3, 5, 6, 7])])
    return cap, expect(
        incidents=[{"job": f"j{k}", "category": "software_crash", "culprit_node": "n1"} for k in range(5)],
        must=[{"type": "cordon_node", "node": "n1"}, {"type": "validate_gpu", "node": "n1"},
              restart("j4", excludes_node="n1")],
        must_not=[{"type": "quarantine_gpu"}, restart("j3", excludes_node="n1")],
        at_most=[[{"type": "cordon_node"}, 1]],
        order=[[{"type": "cordon_node"}, restart("j4")]],
    )


# --- policy edits: a scenario, a candidate policy, and exactly what a backtest must show ----------------
@scenario
def policy_edit_xid94_two_jobs() -> tuple[Capture, dict[str, Any]]:
    """A contained ECC error (XID 94) kills job pt on n1 GPU 2; job ft on n2 crashes of its own bug."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1"]).job("ft", ["n2"])
    cap.xid(900, "n1", 2, 94).crash(901, "pt", rank=2)
    cap.exception(1200, "ft", 3).crash(1200.5, "ft", rank=3, error="ValueError: expected a batch of 16")
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_memory_fault", "culprit_node": "n1", "culprit_gpus": [2]},
                   {"job": "ft", "category": "software_crash"}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 2}, restart("pt", excludes_gpu=["n1", 2]),
              restart("ft")],
        must_not=[{"type": "quarantine_gpu", "node": "n2"}],
    )


#: name -> (scenario, candidate policy YAML, what its backtest against the default policy must show:
#: counts of incident changes, command changes by type, and costs that move), exactly.
POLICY_EDITS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "contained_ecc_is_the_applications": (
        "policy_edit_xid94_two_jobs", "xid:\n  94: software\n",
        {"recategorised": [("pt", "gpu_memory_fault", "software_crash")], "reblamed": [], "added": [], "removed": [],
         "commands": {"quarantine_gpu": {"added": 0, "removed": 1, "changed": 0},
                      "open_ticket": {"added": 0, "removed": 1, "changed": 0},
                      "notify": {"added": 1, "removed": 0, "changed": 0},
                      # both restarts: pt's no longer avoids GPU 2, nor does ft's (every restart avoids every
                      # fenced GPU, and under the candidate nothing is fenced)
                      "restart_job": {"added": 0, "removed": 0, "changed": 2}},
         "gpus_fenced": (1, 0), "by_category": {"gpu_memory_fault": (1, 0), "software_crash": (1, 2)},
         "by_xid": {"94": (1, 0)}}),
    "xid79_is_a_firmware_hang": (
        "xid79_fixed_job", "xid:\n  79: gpu_firmware_fault\n",
        {"recategorised": [("pt", "gpu_off_bus", "gpu_firmware_fault")], "reblamed": [], "added": [], "removed": [],
         "commands": {"open_ticket": {"added": 0, "removed": 1, "changed": 0},
                      "reset_gpu": {"added": 1, "removed": 0, "changed": 0},
                      "validate_gpu": {"added": 1, "removed": 0, "changed": 0}},
         "gpus_fenced": (1, 1), "approvals": (0, 1), "by_category": {"gpu_off_bus": (1, 0), "gpu_firmware_fault": (0, 1)},
         "by_xid": {"79": (1, 1)}}),
    "lemons_need_three_jobs": (
        "lemon_gpu_three_jobs_in_a_week", "lemons:\n  min_jobs: 4\n",
        {"recategorised": [], "reblamed": [], "added": [], "removed": [],
         "commands": {"quarantine_gpu": {"added": 0, "removed": 1, "changed": 0},
                      "validate_gpu": {"added": 0, "removed": 1, "changed": 0},
                      "restart_job": {"added": 0, "removed": 0, "changed": 1}},
         "gpus_fenced": (1, 0), "lemons": (1, 0), "by_category": {"software_crash": (3, 3)}, "by_xid": {}}),
}


def decisions(out: dict[str, Any]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """What was decided, without ids and times: incidents and commands as comparable tuples."""
    incs = sorted((i["job"] or "", i["category"], i["culprit"]["node"] or "", tuple(sorted(i["culprit"]["gpus"])))
                  for i in out["incidents"])
    cmds = []
    for c in out["commands"]:
        p = c["params"]
        ck = (p.get("checkpoint") or {}).get("step") if c["type"] == "restart_job" else None
        ex = p.get("exclude") or {}
        cmds.append((c["type"], c["target"]["job"] or "", c["target"]["node"] or "", c["target"]["gpu"] or "",
                     c["requires_approval"], ck, p.get("gpus") if c["type"] == "restart_job" else None,
                     tuple(ex.get("nodes") or ()), tuple(ex.get("gpus") or ())))
    return incs, sorted(cmds)


# --- more of the same kinds, other wordings and orders ------------------------------------------
@scenario
def node_down_restart_loop() -> tuple[Capture, dict[str, Any]]:
    """n2 dies, is rebooted, the job is put back on it by hand and n2 dies again: one incident,
    and the second restart still avoids n2."""
    cap = fleet("n1", "n2", "n3", duration=2600).job("pt", ["n1", "n2"], interval=300)
    cap.silence(600, "n2", until=1100).bmc_power(630, "n2")
    cap.job("pt", ["n1", "n3"], at=760, interval=300)
    cap.job("pt", ["n1", "n2"], at=1300, interval=300)
    cap.silence(1800, "n2").bmc_power(1830, "n2")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_down", "culprit_node": "n2"}],
        must=[{"type": "cordon_node", "node": "n2"}, {"type": "reboot_node", "node": "n2", "requires_approval": True},
              restart("pt", excludes_node="n2", checkpoint_step=cap.checkpoint_step("pt", 1800))],
        must_not=[{"type": "cordon_node", "node": "n1"}],
        at_most=[[restart("pt"), 2]],
        unique=[{"type": "cordon_node", "node": "n2"}],
    )


@scenario
def loss_plateau() -> tuple[Capture, dict[str, Any]]:
    """The loss stops improving for more than two hours: tell the owner, do not touch the job."""
    cap = fleet("n1", duration=4 * 3600, nvml=None, hb=60).job("pt", ["n1"], interval=1800, step_every=30)
    cap.flat_loss(1800, "pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "loss_anomaly", "opened_by": at_iso(1800 + 7200 + 600)}],
        must=[{"type": "notify", "job": "pt"}],
        must_not=NO_FENCE + [{"type": "restart_job"}],
    )


@scenario
def psu_shared_node_only_dark_gpus_job() -> tuple[Capture, dict[str, Any]]:
    """Supply PS2 of n1 fails and takes GPUs 4-7 (job b); job a on GPUs 0-3 (PS1) keeps training."""
    cap = fleet("n1", "n2").job("a", {"n1": [0, 1, 2, 3]}).job("b", {"n1": [4, 5, 6, 7]})
    cap.sel(899.9, "n1", "psu")
    for k, g in enumerate([4, 5, 6, 7]):
        cap.xid(900 + 0.002 * k, "n1", g, 79)
    cap.crash(901, "b", rank=0, error="RuntimeError: CUDA error: unspecified launch failure")
    return cap, expect(
        incidents=[{"job": "b", "category": "power_supply_fault", "culprit_node": "n1",
                    "culprit_gpus": [4, 5, 6, 7]}],
        must=[{"type": "cordon_node", "node": "n1"}, restart("b", excludes_node="n1")],
        must_not=[restart("a"), {"type": "notify", "job": "a"}],
        order=[[{"type": "cordon_node", "node": "n1"}, restart("b")]],
    )


@scenario
def gpu_lost_without_xid() -> tuple[Capture, dict[str, Any]]:
    """The driver's other wording: 'GPU at PCI:... has fallen off the bus', no XID number."""
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.kernel(800, "n1", f"NVRM: GPU at {Capture.kernel_pci(6)}: GPU has fallen off the bus.", prefix="syslog")
    cap.crash(801, "pt", rank=6)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [6]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 6}, restart("pt", excludes_gpu=["n1", 6])],
        order=[[{"type": "quarantine_gpu", "node": "n1", "gpu": 6}, restart("pt")]],
    )


@scenario
def kernel_machine_check_then_silence() -> tuple[Capture, dict[str, Any]]:
    """The kernel logs a fatal machine check, then the node goes quiet; the BMC still answers."""
    cap = fleet("n1", "n2", "n3", duration=1800).job("pt", ["n1", "n2"])
    cap.kernel(899, "n2", "mce: [Hardware Error]: CPU 3: Machine Check Exception: 5 Bank 4: b200000000070f0f",
               prefix="syslog")
    cap.kernel(899.5, "n2", "Kernel panic - not syncing: Fatal machine check")
    cap.silence(900, "n2").bmc_power(930, "n2")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": "n2"}],
        must=[{"type": "cordon_node", "node": "n2"}, {"type": "open_ticket", "node": "n2"},
              restart("pt", excludes_node="n2")],
        must_not=[{"type": "reboot_node"}],
    )


@scenario
def worker_segfault_then_job_failed() -> tuple[Capture, dict[str, Any]]:
    """A worker dies of SIGSEGV without an error file; the scheduler marks the job failed."""
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.worker_exit(700, "pt", 2, -11)
    for r in range(8):
        if r != 2:
            cap.worker_exit(701, "pt", r, -15)
    cap.scheduler(705, "job_failed", job="pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash", "opened_by": at_iso(700.5)}],
        must=[{"type": "notify", "job": "pt"}, restart("pt")],
        must_not=NO_FENCE,
    )


@scenario
def host_oom_killer() -> tuple[Capture, dict[str, Any]]:
    """The host's OOM killer takes a worker (SIGKILL): the job's memory use, not the hardware."""
    cap = fleet("n1").job("pt", ["n1"])
    cap.kernel(700, "n1", "Out of memory: Killed process 43121 (python) total-vm:912345678kB, "
               "anon-rss:498765432kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:987654kB oom_score_adj:0")
    cap.worker_exit(700.5, "pt", 3, -9)
    cap.scheduler(703, "job_failed", job="pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash"}],
        must=[{"type": "notify", "job": "pt"}],
        must_not=NO_FENCE,
    )


@scenario
def gpu_fault_after_job_finished() -> tuple[Capture, dict[str, Any]]:
    """The job finished normally five minutes before: the fault is the hardware's alone (job-less)."""
    cap = fleet("n1").job("pt", ["n1"])
    cap.scheduler(600, "job_finished", job="pt")
    cap.xid(900, "n1", 2, 79)
    return cap, expect(
        incidents=[{"job": None, "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [2]}],
        must=[{"type": "quarantine_gpu", "node": "n1", "gpu": 2}, {"type": "open_ticket", "node": "n1"}],
        must_not=[{"type": "restart_job"}, {"type": "notify"}],
    )


@scenario
def clock_skew_heartbeats_ahead_late_xid() -> tuple[Capture, dict[str, Any]]:
    """Node agents' clocks run 30 s ahead and the XID arrives 20 s late: still one restart, after the fence."""
    cap, exp = xid79_late_duplicated_bad_input()
    cap.skew("node_agent", 30)
    return cap, exp


# The books of our later issues register into SCENARIOS too (they import the helpers above).
import scenario_book_evidence  # noqa: E402,F401
import scenario_book_gate  # noqa: E402,F401
import scenario_book_judgement  # noqa: E402,F401
import scenario_book_node_fault  # noqa: E402,F401
import scenario_book_recovery  # noqa: E402,F401
