"""Which incident a second culprit belongs to: a fence that held its hardware for its cause before the run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from correlators.belonging import second_fault_owner
from correlators.incident_state import OpenIncident
from correlators.quarantine_ledger import Fence
from correlators.state import EngineState
from streams.events import JobStarted, RankAllocation

T = datetime(2026, 4, 22, tzinfo=UTC)


def _fenced(job: str | None) -> tuple[EngineState, OpenIncident]:
    """n01 GPU 0 quarantined for a memory fault by ``inc-fence`` (of ``job``); job0 runs on n01's four GPUs."""
    state = EngineState()
    inc = state.hold(OpenIncident(id="inc-fence", job=job, category="gpu_memory_fault", opened_at=T,
                                  severity="critical", node="n01", gpus={0}))
    state.ledger.quarantine("n01", 0, Fence(since=T, incident=inc.id, reason="gpu_memory_fault"))
    state.topology.apply_job_started("job0", JobStarted(
        allocation=[RankAllocation(node="n01", gpus=[0, 1, 2, 3], ranks=[0, 1, 2, 3])], world_size=4))
    return state, inc


def test_a_second_culprit_on_another_incidents_fence_for_its_cause_is_that_fence_s() -> None:
    state, fence = _fenced(None)
    failure = state.hold(OpenIncident(id="inc-job0", job="job0", category="gpu_off_bus",
                                      opened_at=T + timedelta(minutes=2), severity="critical", node="n01", gpus={1}))
    assert second_fault_owner(state, failure, "n01", {0}, "gpu_memory_fault") is fence
    assert second_fault_owner(state, failure, "n01", {0}, "gpu_nvlink_fault") is None  # another cause: news


def test_the_fence_s_own_incident_keeps_its_cause_when_it_took_a_run_started_on_its_hardware() -> None:
    # the job-less fence took job0's run the scheduler started on GPU 0 (a breach), and a stronger cause on GPU 1
    # took it over since: GPU 0's memory fault is still the fence's -- its incident, its ticket -- not a new cause
    state, fence = _fenced(None)
    state.topology.jobs["job0"].breach = fence.id
    fence.job = "job0"
    assert second_fault_owner(state, fence, "n01", {0}, "gpu_memory_fault") is fence


def test_a_cause_the_job_failed_for_on_its_own_run_is_its_own_incident_once_taken_over() -> None:
    # job0 was on GPU 0 when it failed for the memory fault (its incident fenced it for this run): a stronger cause
    # taking that incident over leaves the memory fault a root cause of its own (one incident per job and cause)
    state, inc = _fenced("job0")
    assert second_fault_owner(state, inc, "n01", {0}, "gpu_memory_fault") is None
