"""Lost GPU-hours: work since the checkpoint plus the time the job is down (faultline.lost_hours)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from faultline.lost_hours import RESTART_S, Timeline, account
from streams.events import CheckpointSaved, Event, JobStarted, RankAllocation, TrainStep

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _ev(s: float, body: Any, job: str | None = "pt") -> Event:
    return Event(id=f"e{s}-{body.kind}", ts=T0 + timedelta(seconds=s), source="test", job=job, body=body)


def _timeline(*extra: Event, end_s: float = 7200) -> Timeline:
    start = JobStarted(allocation=[RankAllocation(node="n1", gpus=list(range(8)), ranks=list(range(8)))])
    return Timeline.of([_ev(0, start), _ev(600, CheckpointSaved(step=10)), *extra,
                        _ev(end_s, TrainStep(step=99), job="other")])


def _inc(category: str = "gpu_off_bus", at: float = 1200, **kw: Any) -> dict[str, Any]:
    return {"id": "i1", "job": "pt", "category": category,
            "opened_at": (T0 + timedelta(seconds=at)).isoformat(), **kw}


def _restart(at: float, approval: bool = False) -> dict[str, Any]:
    return {"id": f"r{at}", "incident": "i1", "type": "restart_job", "target": {"job": "pt"},
            "issued_at": (T0 + timedelta(seconds=at)).isoformat(), "requires_approval": approval}


def test_no_restart_is_down_until_the_end_of_the_events_and_says_so() -> None:
    lost = account(_inc(), [], _timeline())
    assert lost is not None and lost.until == "end_of_capture" and lost.gpus == 8
    assert lost.work_gpu_hours == round(600 * 8 / 3600, 3)  # checkpoint at 600 s, failure at 1200 s
    assert lost.down_gpu_hours == round(6000 * 8 / 3600, 3)  # 1200 s -> the events' end at 7200 s


def test_a_restart_without_a_start_in_the_events_is_assumed_to_run_after_requeue_and_reload() -> None:
    lost = account(_inc(), [_restart(1230)], _timeline())
    assert lost is not None and lost.until == "restart_assumed"
    assert lost.down_gpu_hours == round((30 + RESTART_S) * 8 / 3600, 3)
    waiting = account(_inc(), [_restart(1230, approval=True)], _timeline())  # a person may never come
    assert waiting is not None and waiting.until == "end_of_capture"


def test_the_next_start_ends_the_downtime_unless_only_the_other_policy_restarted_before_it() -> None:
    rerun = _ev(1500, JobStarted(world_size=8))
    lost = account(_inc(), [], _timeline(rerun))
    assert lost is not None and lost.until == "ran_again" and lost.down_gpu_hours == round(300 * 8 / 3600, 3)
    other = account(_inc(), [], _timeline(rerun), others=[T0 + timedelta(seconds=1230)])
    assert other is not None and other.until == "end_of_capture"  # that start was the other policy's doing
    both = account(_inc(), [_restart(1240)], _timeline(rerun), others=[T0 + timedelta(seconds=1230)])
    assert both is not None and both.until == "ran_again"


def test_the_engines_own_work_figure_is_kept_and_warnings_cost_nothing() -> None:
    lost = account(_inc(lost_gpu_hours=0.5), [_restart(1230)], _timeline())
    assert lost is not None and lost.work_gpu_hours == 0.5
    assert account(_inc("gpu_ecc_degradation"), [], _timeline()) is None
    assert account(_inc(job=None), [], _timeline()) is None
