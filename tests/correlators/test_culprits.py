"""Hardware evidence joining an open incident: a stronger cause taking over a fence's incident."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from correlators.culprits import join_hardware
from correlators.findings import Finding
from correlators.incident_state import OpenIncident
from correlators.policy import load_policy
from correlators.quarantine_ledger import Fence
from correlators.root_causes import second_incidents
from correlators.state import EngineState
from streams.events import JobStarted, RankAllocation

T = datetime(2026, 4, 22, tzinfo=UTC)


def test_a_stronger_cause_taking_over_a_fence_that_took_a_breached_run_leaves_the_fence_its_cause() -> None:
    # A job-less incident quarantined n01 GPU 0 for a memory fault; the scheduler started job0 on it anyway and the
    # incident took the run's failure (belonging.takes_breach). XID 79 on GPU 1 then takes the incident over: the
    # memory fault it displaces is the fence's own cause, named by the incident -- not a second incident for it.
    state = EngineState()
    inc = state.hold(OpenIncident(id="inc-fence", job="job0", category="gpu_memory_fault", opened_at=T,
                                  severity="critical", node="n01", gpus={0}, summary="XID 48 on n01 GPU 0"))
    state.ledger.quarantine("n01", 0, Fence(since=T, incident=inc.id, reason="gpu_memory_fault"))
    run = state.topology.apply_job_started("job0", JobStarted(
        allocation=[RankAllocation(node="n01", gpus=[0, 1, 2, 3], ranks=[0, 1, 2, 3])], world_size=4))
    run.breach = inc.id
    off_bus = Finding("gpu_off_bus", T + timedelta(minutes=2), "n01", [1], "XID 79 on n01 GPU 1", "e79")

    assert join_hardware(state, load_policy(), inc, off_bus) == (True, True)
    assert (inc.category, inc.node, inc.gpus) == ("gpu_off_bus", "n01", {1})
    [displaced] = inc.others
    assert (displaced.category, displaced.gpus, displaced.fenced_by, displaced.id) == (
        "gpu_memory_fault", {0}, inc.id, inc.id)
    assert second_incidents(inc, 2, lambda n, i: f"{n}:{i}", lambda c: "critical") == []
