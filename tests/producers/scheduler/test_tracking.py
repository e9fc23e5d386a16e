"""Snapshots of jobs and nodes -> scheduler events, each change once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from producers.capture import parse_capture_line
from producers.scheduler.tracking import JobView, NodeView, SchedulerTracker
from streams.events import JobEnded, JobStarted, NodeState

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
ALLOC = {"allocation": [{"node": "n1", "gpus": [0, 1], "ranks": [0, 1]}], "world_size": 2, "gpu_class": None}


def running(run: str = "r1", started: datetime = T0) -> JobView:
    return JobView("j", "running", run, started_at=started, details=ALLOC)


def test_a_job_starts_and_ends_once() -> None:
    tr = SchedulerTracker()
    now = T0 + timedelta(seconds=30)
    assert tr.jobs([JobView("j", "other", "r1")], now) == []  # pending
    [started] = tr.jobs([running()], now)
    assert started == {"ts": "2026-04-22T03:00:00.000+00:00", "source": "scheduler", "event": "job_started",
                       "job": "j", **{k: v for k, v in ALLOC.items() if v is not None}}
    [event] = parse_capture_line(json.dumps(started))
    assert isinstance(event.body, JobStarted) and event.body.world_size == 2
    assert tr.jobs([running()], now) == []
    [ended] = tr.jobs([JobView("j", "failed", "r1", ended_at=T0 + timedelta(hours=9))], now)  # clamped to now
    assert ended == {"ts": "2026-04-22T03:00:30.000+00:00", "source": "scheduler", "event": "job_failed", "job": "j"}
    assert parse_capture_line(json.dumps(ended))[0].body == JobEnded(status="failed")
    assert tr.jobs([JobView("j", "failed", "r1")], now) == []


def test_a_restart_is_a_new_job_started_and_old_runs_do_not_end_it() -> None:
    tr = SchedulerTracker()
    tr.jobs([running("r1")], T0)
    later = T0 + timedelta(minutes=5)
    views = [JobView("j", "cancelled", "r1", ended_at=later), running("r2", later)]  # same name, new job
    assert [o["event"] for o in tr.jobs(views, later)] == ["job_started"]
    assert tr.jobs([JobView("j", "finished", "r1"), JobView("j", "finished", "r2")], later) == [
        {"ts": "2026-04-22T03:05:00.000+00:00", "source": "scheduler", "event": "job_finished", "job": "j"}
    ]


def test_ends_of_jobs_never_seen_running_are_not_reported() -> None:
    tr = SchedulerTracker()
    assert tr.jobs([JobView("j", "cancelled", "r1")], T0) == []


def test_a_vanished_job_is_forgotten_or_given_an_end() -> None:
    quiet, loud = SchedulerTracker(), SchedulerTracker(vanished="cancelled")
    for tr in (quiet, loud):
        tr.jobs([running()], T0)
    assert quiet.jobs([], T0) == []
    assert loud.jobs([], T0) == [{"ts": "2026-04-22T03:00:00.000+00:00", "source": "scheduler",
                                  "event": "job_cancelled", "job": "j"}]
    assert loud.jobs([], T0) == []


def test_nodes_report_changes_and_a_first_sight_that_is_not_ready() -> None:
    tr = SchedulerTracker()
    assert tr.nodes([NodeView("n1", True), NodeView("n2", False, "bad psu"), NodeView("n3", None)], T0) == [
        {"ts": "2026-04-22T03:00:00.000+00:00", "source": "scheduler", "event": "node_not_ready", "node": "n2",
         "reason": "bad psu"}
    ]
    assert tr.nodes([NodeView("n1", True), NodeView("n2", False, "bad psu")], T0) == []
    events = tr.nodes([NodeView("n1", False, "drained"), NodeView("n2", True), NodeView("n3", True)], T0)
    assert [(o["event"], o["node"]) for o in events] == [("node_not_ready", "n1"), ("node_ready", "n2")]
    assert [parse_capture_line(json.dumps(o))[0].body for o in events] == [NodeState(ready=False), NodeState(ready=True)]
