"""The cold-start rule's witnesses: what the trainer's heartbeat and the job's progress say."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from correlators.job_progress import JobProgress
from correlators.policy import Thresholds
from correlators.rules.hang_witness import cadence_known, heartbeat_witness

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def _run(*steps: float) -> JobProgress:
    prog = JobProgress()
    prog.on_run_start(at(0), None, None)
    for k, t in enumerate(steps):
        prog.on_step(at(t), k * 10, 2.0, 400.0, 7200)
    return prog


def test_the_start_up_is_no_interval_and_three_intervals_make_a_cadence() -> None:
    t = Thresholds()
    prog = _run(1, 130, 260)
    assert prog.run_intervals == 2 and not cadence_known(prog, t)
    prog.on_step(at(390), 30, 2.0, 400.0, 7200)
    assert prog.run_intervals == 3 and cadence_known(prog, t)
    prog.on_run_start(at(500), None, None)  # a new run learns its cadence again
    assert prog.run_intervals == 0 and not cadence_known(prog, t)
    assert cadence_known(prog, Thresholds(hang_min_intervals=0))  # the knob at 0: the clock always decides


def test_a_heartbeat_in_the_next_step_for_long_enough_is_a_witness() -> None:
    prog = _run(1, 130)
    prog.on_heartbeat(at(500), step=11, in_step_s=370)
    assert heartbeat_witness(prog, 600) is None  # not beyond the bound yet
    prog.on_heartbeat(at(800), step=11, in_step_s=670)
    assert "in step 11 for 670s" in (heartbeat_witness(prog, 600) or "")
    prog.on_heartbeat(at(900), step=25, in_step_s=700)  # sparse step reports: stuck in step 25, it says
    assert "in step 25 for 700s" in (heartbeat_witness(prog, 600) or "")


def test_a_heartbeat_naming_only_its_step_is_timed_from_the_last_report() -> None:
    prog = _run(1, 130)
    prog.on_heartbeat(at(800), step=11)
    assert prog.heartbeat_in_step_s == 670 and heartbeat_witness(prog, 600) is not None


def test_a_heartbeat_past_the_next_step_without_a_duration_witnesses_nothing() -> None:
    prog = _run(1, 130)
    prog.on_heartbeat(at(800), step=25)  # past the next step: how long it has been in it, nobody knows
    assert prog.heartbeat_in_step_s is None and heartbeat_witness(prog, 600) is None
    prog.on_heartbeat(at(900))  # a plain heartbeat: alive, says nothing about a step
    assert heartbeat_witness(prog, 600) is None
