"""A node whose own parts failed: a second fault it logs hides neither the first nor what the first explains.

The derandomised fleet's find (issue #25 class 5): n01 logs a memory UE at 74 s and dies during a checkpoint write,
which fails with EIO 2.5 s later; its BMC logs a second UE at 225 s. Kept only as the newest, the second fault made
the first disappear: the held write no longer waited for n01's verdict and paged storage, and the restart dated the
node's fault 2.5 min after the failure it began. A rank crash judged after the second fault was compared with the
newest only as well (HardwareRules.rank_crashed), and no longer blamed the first.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from correlators.attribution import BmcView
from correlators.findings import Finding
from correlators.incident_state import OpenIncident
from correlators.lifecycle import IncidentLifecycle
from correlators.node_parts import failed_beside, failed_parts, unjudged_fault
from correlators.policy import load_policy
from correlators.quarantine_ledger import Fence
from correlators.rules.base import RuleContext
from correlators.rules.hardware import HardwareRules
from correlators.state import EngineState, Heartbeat
from streams.events import JobStarted, RankAllocation

T = datetime(2026, 4, 22, 3, tzinfo=UTC)
LOOKBACK = 120.0


def _at(s: float) -> datetime:
    return T + timedelta(seconds=s)


def _twice_failed() -> EngineState:
    """job0 on n01's four GPUs; n01's agent is last heard at 61 s, its BMC logs a memory UE at 73.9 s and another
    at 225.1 s."""
    state = EngineState()
    state.heartbeat["n01"] = Heartbeat(last=_at(61.0))
    state.topology.apply_job_started("job0", JobStarted(
        allocation=[RankAllocation(node="n01", gpus=[0, 1, 2, 3], ranks=[0, 1, 2, 3])], world_size=4))
    view = state.bmc_view("n01")
    view.hardware_fault("memory", "Memory DIMM_B3 | Uncorrectable ECC", _at(73.9))
    view.hardware_fault("memory", "Memory DIMM_B3 | Uncorrectable ECC", _at(225.1))
    return state


def test_a_write_beside_the_first_fault_still_waits_for_the_node_s_verdict_after_a_second() -> None:
    state = _twice_failed()
    assert unjudged_fault(state, "n01", _at(76.4), LOOKBACK)  # 2.5 s after the first UE, 149 s before the second
    assert not unjudged_fault(state, "n01", _at(500.0), LOOKBACK)  # near neither


def test_the_restart_blames_the_fault_that_began_the_failure_not_the_node_s_newest() -> None:
    state = _twice_failed()
    hang = OpenIncident(id="inc-job0", job="job0", category="training_hang", opened_at=_at(190.0), severity="critical")
    (found,) = failed_parts(state, hang, LOOKBACK)
    assert (found.category, found.node, found.ts) == ("node_hardware_fault", "n01", _at(73.9))
    assert "at 03:01:13" in found.reason


def test_a_fault_before_the_window_still_counts_while_the_node_has_said_nothing_since() -> None:
    state = _twice_failed()
    hang = OpenIncident(id="inc-job0", job="job0", category="training_hang", opened_at=_at(900.0), severity="critical")
    (found,) = failed_parts(state, hang, LOOKBACK)  # both UEs are older than the window: the newest, n01 unheard
    assert found.ts == _at(225.1)


def test_the_view_finds_the_fault_nearest_a_moment_and_leaves_power_supplies_to_their_domain() -> None:
    view = BmcView()
    view.hardware_fault("cpu", "IERR", _at(300.0))
    view.hardware_fault("memory", "UE", _at(100.0))  # arrives late: logged before the one already seen
    view.hardware_fault("power_supply", "PS2 failure", _at(110.0))
    assert (view.node_fault_at, view.node_fault) == (_at(300.0), "cpu")  # the newest, as before
    assert view.node_fault_near(_at(120.0), LOOKBACK) == (_at(100.0), "memory")
    assert view.node_fault_near(_at(250.0), LOOKBACK) == (_at(300.0), "cpu")
    assert view.node_fault_near(_at(700.0), LOOKBACK) is None
    assert view.first_node_fault(_at(50.0)) == (_at(100.0), "memory")
    assert view.first_node_fault(_at(200.0)) == (_at(300.0), "cpu")


class _Failures:
    """The lifecycle's side the hardware rules speak to: the findings each job failed of."""

    def __init__(self) -> None:
        self.failed: list[tuple[str, Finding]] = []

    def failure(self, job: str, f: Finding) -> Any:
        self.failed.append((job, f))


def test_a_crash_beside_the_first_fault_is_the_node_s_after_a_second() -> None:
    # A rank crash is compared with every fault of the node's own parts, not only its newest: the crash at 76 s,
    # reported after the second UE (225.1 s, 149 s later), is the first UE's (73.9 s), a node_hardware_fault.
    state = _twice_failed()
    life = _Failures()
    rules = HardwareRules(RuleContext(state, load_policy(), []), cast(IncidentLifecycle, life))
    rules.rank_crashed("n01", _at(76.0), "crash-1")
    ((job, found),) = life.failed
    assert (job, found.category, found.node, found.ts) == ("job0", "node_hardware_fault", "n01", _at(73.9))
    assert "memory fault" in found.reason
    rules.rank_crashed("n01", _at(500.0), "crash-2")  # near neither UE: a crash of its own
    assert len(life.failed) == 1


def test_a_late_fault_finds_the_crash_beside_it_after_a_later_crash_of_the_node() -> None:
    # The mirror of the case above: the node's ranks crashed at 76 s and (another run) at 400 s, and only then is the
    # memory UE logged at 73.9 s heard. Compared with the node's newest crash only (400 s), the first crash was
    # no longer the node's fault.
    state = EngineState()
    life = _Failures()
    rules = HardwareRules(RuleContext(state, load_policy(), []), cast(IncidentLifecycle, life))
    state.topology.apply_job_started("job0", JobStarted(
        allocation=[RankAllocation(node="n01", gpus=[0, 1, 2, 3], ranks=[0, 1, 2, 3])], world_size=4))
    rules.rank_crashed("n01", _at(76.0), "crash-1")
    rules.rank_crashed("n01", _at(400.0), "crash-2")
    assert life.failed == []  # nothing of the node's own parts known yet
    state.bmc_view("n01").hardware_fault("memory", "Memory DIMM_B3 | Uncorrectable ECC", _at(73.9))
    rules.node_fault_logged("n01", _at(73.9), "sel-1", "a memory fault logged by its BMC")
    ((job, found),) = life.failed
    assert (job, found.category, found.node, found.ts) == ("job0", "node_hardware_fault", "n01", _at(73.9))


def test_a_dying_node_s_last_heartbeat_just_after_its_fault_does_not_clear_it() -> None:
    # The soak's find (FLEET_SEED=20261307): n05's BMC logs a memory UE at 03:06:15.2, its agent gets one last
    # heartbeat out 0.6 s later and falls silent; job2 is found hung at 03:09:14, outside the window of the UE.
    # "Heard since the fault" cleared n05, and job2 was restarted before n05 was cordoned. A last word within the
    # window after the fault, then quiet for the window, is the node going down with it.
    state = EngineState()
    state.topology.apply_job_started("job0", JobStarted(
        allocation=[RankAllocation(node="n01", gpus=[0, 1, 2, 3], ranks=[0, 1, 2, 3])], world_size=4))
    state.bmc_view("n01").hardware_fault("memory", "Memory DIMM_B3 | Uncorrectable ECC", _at(73.9))
    state.heartbeat["n01"] = Heartbeat(last=_at(74.5))
    state.clock = _at(400.0)
    hang = OpenIncident(id="inc-job0", job="job0", category="training_hang", opened_at=_at(300.0), severity="critical")
    (found,) = failed_parts(state, hang, LOOKBACK)
    assert (found.node, found.ts) == ("n01", _at(73.9))
    state.heartbeat["n01"] = Heartbeat(last=_at(290.0))  # it kept heartbeating long after: the UE blames nothing
    assert failed_parts(state, hang, LOOKBACK) == []


# --- a node shared by two jobs: its fault, judged for one, is the other's too (FLEET_SEED=20261314/20261315) ------
def _shared() -> tuple[EngineState, OpenIncident]:
    """job0 and job1 share n01 and n02 by halves; n02's BMC logs a memory UE at 74.5 s; job1's incident (fenced n02
    for it) and job0's hang (its last step at 70 s) are both open."""
    state = EngineState()
    for job, gpus in (("job0", [0, 1]), ("job1", [2, 3])):
        state.topology.apply_job_started(job, JobStarted(allocation=[
            RankAllocation(node="n01", gpus=gpus, ranks=[0, 1]), RankAllocation(node="n02", gpus=gpus, ranks=[2, 3])],
            world_size=4))
    state.bmc_view("n02").hardware_fault("memory", "Memory DIMM_B3 | Uncorrectable ECC", _at(74.5))
    fenced = state.hold(OpenIncident(id="inc-job1", job="job1", category="node_hardware_fault", opened_at=_at(74.5),
                                     severity="critical", node="n02", state="restarting"))
    state.job_history["job1"] = [fenced.ref]
    state.ledger.cordon("n02", Fence(since=_at(105.0), incident="inc-job1", reason="node_hardware_fault"))
    hang = state.hold(OpenIncident(id="inc-job0", job="job0", category="training_hang", opened_at=_at(70.0),
                                   severity="critical", state="open"))
    state.failure["job0"], state.job_history["job0"] = hang.ref, [hang.ref]
    return state, hang


def test_a_neighbours_fence_does_not_judge_the_fault_for_this_job() -> None:
    state, hang = _shared()
    assert not unjudged_fault(state, "n02", _at(77.0), LOOKBACK)  # fenced for it: judged, for no job in particular
    assert unjudged_fault(state, "n02", _at(77.0), LOOKBACK, "job0")  # job0's write waits: nothing of job0 names n02
    hang.category, hang.node = "node_hardware_fault", "n02"
    assert not unjudged_fault(state, "n02", _at(77.0), LOOKBACK, "job0")  # named now: the write is its evidence


def test_the_fault_found_for_one_job_is_its_neighbours_and_still_blamed_at_its_own_restart() -> None:
    state, hang = _shared()
    (found,) = failed_parts(state, hang, LOOKBACK)  # n02 is fenced (job1's), but job0's incident does not blame it
    assert (found.node, found.ts) == ("n02", _at(74.5))
    assert failed_beside(state, found, "job1", LOOKBACK) == ["job0"]
    assert failed_beside(state, found, "job0", LOOKBACK) == []  # job1's incident names n02 already
    hang.opened_at = _at(400.0)
    assert failed_beside(state, found, "job1", LOOKBACK) == []  # a failure long after the fault is not its
