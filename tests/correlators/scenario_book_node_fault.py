"""Scenarios of "a crash with a BMC hardware SEL": a node whose own parts failed (CPU, memory, board; or an
uncorrected machine check from its kernel) is a ``node_hardware_fault`` when a rank crashes on it near then,
in either order, even though its agent keeps heartbeating (the contract's table: "in-band silence *or crash*
with a BMC hardware SEL"). The node is cordoned and drained before the restart that excludes it.

Registered into :data:`scenario_book.SCENARIOS` (imported at the end of that module).
"""

from __future__ import annotations

from typing import Any

from builder import Capture, at_iso
from scenario_book import NO_FENCE, expect, fleet, restart, scenario

S = tuple[Capture, dict[str, Any]]


def _node_fault(node: str = "n1", opened_by: float = 1000) -> dict[str, Any]:
    return expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": node,
                    "opened_by": at_iso(opened_by)}],
        must=[{"type": "cordon_node", "node": node}, {"type": "drain_node", "node": node},
              {"type": "open_ticket", "node": node}, restart("pt", excludes_node=node)],
        order=[[{"type": "cordon_node", "node": node}, restart("pt")]],
        unique=[restart("pt"), {"type": "cordon_node", "node": node}, {"type": "open_ticket", "node": node}],
        must_not=[{"type": "quarantine_gpu"}, {"type": "cordon_node", "node": "n2"}, {"type": "reboot_node"}],
    )


@scenario
def crash_on_a_node_whose_cpu_failed_agent_alive() -> S:
    """The BMC logs a CPU IERR; a second later the rank on that node dies with a CUDA error, the others time out
    in their collective; the node's agent keeps heartbeating. The node is the cause, not the software."""
    cap = fleet("n1", "n2", "n3").bmc_polls(60).job("pt", ["n1", "n2"])
    cap.sel(899, "n1", "cpu").crash(900, "pt", rank=3)
    cap.nccl_timeout(905, "pt", missing=[3])
    return cap, _node_fault()


@scenario
def memory_sel_logged_after_the_crash() -> S:
    """The crash comes first; the BMC's uncorrectable-memory SEL is polled 40 s later, before any restart."""
    cap = fleet("n1", "n2", "n3").bmc_polls(60).job("pt", ["n1", "n2"])
    cap.crash(900, "pt", rank=5).sel(940, "n1", "memory")
    cap.nccl_timeout(905, "pt", missing=[5])
    return cap, _node_fault()


@scenario
def crash_with_an_uncorrected_machine_check() -> S:
    """No BMC at all: the node's kernel logs an uncorrected machine check as the rank on it dies."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.kernel(899.5, "n1", "mce: [Hardware Error]: Machine check events logged")
    cap.kernel(899.6, "n1", "mce: Uncorrected hardware memory error in user-access at 3a8b2f000")
    cap.crash(900, "pt", rank=2)
    return cap, _node_fault()


@scenario
def crash_on_the_other_node_of_a_node_with_a_sel_late_and_duplicated() -> S:
    """The SEL is on n2 (its agent alive), the crash of the rank on n2 arrives 20 s late and twice."""
    cap = fleet("n1", "n2", "n3").bmc_polls(60).job("pt", ["n1", "n2"])
    cap.sel(899, "n2", "board").crash(900, "pt", rank=12).late(20).dup(3)
    exp = _node_fault("n2")
    exp["must_not"] = [{"type": "quarantine_gpu"}, {"type": "cordon_node", "node": "n1"}, {"type": "reboot_node"}]
    return cap, exp


@scenario
def an_old_sel_does_not_blame_a_later_crash() -> S:
    """A CPU SEL an hour before a plain Python exception on that node: too far apart to be its cause."""
    cap = fleet("n1", "n2", "n3", duration=6000).bmc_polls(60).job("pt", ["n1", "n2"])
    cap.sel(600, "n1", "cpu").exception(4200, "pt", rank=3)
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash"}],
        must=[restart("pt")],
        must_not=NO_FENCE,
    )


def _neighbours(cap: Capture) -> dict[str, Any]:
    return expect(
        incidents=[{"job": "a", "category": "node_hardware_fault", "culprit_node": "n2"},
                   {"job": "b", "category": "node_hardware_fault", "culprit_node": "n2"}],
        must=[{"type": "cordon_node", "node": "n2"}, restart("a", excludes_node="n2"), restart("b", excludes_node="n2")],
        unique=[{"type": "cordon_node", "node": "n2"}, {"type": "open_ticket", "node": "n2"}],
        must_not=[{"type": "open_ticket", "node": None}, {"type": "cordon_node", "node": "n1"},
                  {"type": "quarantine_gpu"}],
    )


def _n2_dies_as_a_writes() -> Capture:
    """``a`` and ``b`` share n1 and n2 by halves; n2's memory fails at 74.5 s and n2 goes quiet (its agent's
    cadence not known yet); a write of ``a`` fails with an I/O error 2.5 s later."""
    cap = fleet("n1", "n2", "n3", duration=1200, hb=60.0, nvml=120.0)
    cap.job("a", {"n1": [0, 1, 2, 3], "n2": [0, 1, 2, 3]}).job("b", {"n1": [4, 5, 6, 7], "n2": [4, 5, 6, 7]})
    cap.sel(74.5, "n2", "memory").silence(75, "n2").bmc_power(95, "n2")
    return cap.checkpoint_failed(77, "a", 60, error="OSError: [Errno 5] Input/output error: '/mnt/ckpt/a/step_0000060'")


@scenario
def a_node_fault_judged_at_one_jobs_restart_is_the_cause_of_its_neighbours_failure() -> S:
    """Two jobs share n1 and n2 by halves. Soon after they start -- before n2's agent has shown its cadence, so
    its silence tells nothing yet -- n2's BMC logs an uncorrectable memory error and n2 goes quiet; a checkpoint
    write of ``a`` fails with an I/O error three seconds later, and ``a``'s rank on n1 dies of the aborted
    communicator; ``b`` just stops stepping. n2's fault is judged when ``b``'s restart looks at its nodes -- and it
    is ``a``'s cause as much as ``b``'s: both incidents name n2 (one cordon, one ticket), and ``a``'s failed
    write is that fault's evidence, not a storage incident."""
    cap = _n2_dies_as_a_writes()
    cap.crash(150, "a", rank=0, error="torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0")
    return cap, _neighbours(cap)


@scenario
def a_write_lost_on_a_node_a_neighbour_fenced_first_waits_for_its_own_jobs_verdict() -> S:
    """As above, but ``b`` fails at once (its rank on n1 dies of the aborted communicator) and its restart fences
    n2 within a minute, while ``a`` only stops stepping: ``a``'s failed write is not a storage fault because the
    fence is ``b``'s -- it waits for ``a``'s own verdict, which names n2 when ``a``'s restart looks at its nodes."""
    cap = _n2_dies_as_a_writes()
    cap.crash(76.5, "b", rank=0, error="torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0")
    return cap, _neighbours(cap)


@scenario
def a_crash_on_a_gpu_fenced_for_a_second_culprit_is_that_culprits_cause() -> S:
    """n2's memory fails under pt (node_hardware_fault, n2 cordoned); GPU 3 of n1 falls off the bus as well -- a
    second root cause, quarantined by the same incident. The rank on that GPU then dies: its crash is the GPU's
    (off the bus), not the node fault's -- n1 is not cordoned for a memory UE it never had."""
    cap = fleet("n1", "n2", "n3").bmc_polls(60).job("pt", ["n1", "n2"])
    cap.sel(899, "n2", "memory").crash(900, "pt", rank=12)
    cap.xid(905, "n1", 3, 79).crash(906.5, "pt", rank=3)
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": "n2"},
                   {"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]}],
        must=[{"type": "cordon_node", "node": "n2"}, {"type": "quarantine_gpu", "node": "n1", "gpu": 3},
              restart("pt", excludes_node="n2", excludes_gpu=["n1", 3])],
        unique=[{"type": "cordon_node", "node": "n2"}, {"type": "quarantine_gpu", "node": "n1", "gpu": 3}],
        must_not=[{"type": "cordon_node", "node": "n1"}, {"type": "drain_node", "node": "n1"}],
    )
