"""Lost GPU-hours counted honestly: the work a failure throws away *plus* the time its job is down.

A job that is down loses its GPUs' hours until it runs again. Leaving a failed job down is never
free, so a policy that does nothing can never look cheaper than one that restarts it.

The rule, for an incident about a job whose category stops the job
(:data:`correlators.findings.FAILURE_CATEGORIES`; a warning such as ECC degradation or a stale
checkpoint stops nothing and costs nothing here), the failure being its ``opened_at``:

* **work**: the run's GPUs times the time from its newest checkpoint saved before the failure (or
  the run's start, when later) to the failure -- the engine's own figure where it made one (it
  knows which checkpoints a restart can really load), else the newest save in the events;
* **down**: the run's GPUs times the time from the failure until the job **runs again**:

  1. its next ``job_started`` in the events after the failure -- unless only the *other* side of a
     comparison restarted the job before that start (then the start is that policy's doing, not
     this one's, and does not end this side's downtime);
  2. else, where this side restarted the job without waiting for a person, the restart's issue time
     plus :data:`RESTART_S` (the goodput model's requeue and reload: a replay or a backtest runs no
     executor, so the start its restart would cause is not in the events) -- ``restart_assumed``;
  3. else (no restart, or one waiting for approval) until the end of the events: ``end_of_capture``,
     said so, since the job may stay down longer still.

Every figure is rounded to the thousandth of a GPU-hour, as the incident's.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from correlators.findings import FAILURE_CATEGORIES
from streams.events import CheckpointSaved, Event, JobStarted

__all__ = ["RESTART_S", "Lost", "Timeline", "account", "restarts_by_job"]

Json = dict[str, Any]
Until = Literal["ran_again", "restart_assumed", "end_of_capture"]

RESTART_S = 90.0 + 300.0
"""Requeue and reload after a restart (the goodput model's defaults: the midpoint of torchrun's
60-120 s restart chain, and a 300 s checkpoint reload and warm-up)."""


def _at(ts: str | datetime) -> datetime:
    return ts if isinstance(ts, datetime) else datetime.fromisoformat(ts.replace("Z", "+00:00"))


@dataclass
class Timeline:
    """What the events say about each job: its runs (start, GPUs) and its saves, and where they end."""

    starts: dict[str, list[tuple[datetime, int]]] = field(default_factory=lambda: defaultdict(list))
    saves: dict[str, list[datetime]] = field(default_factory=lambda: defaultdict(list))
    end: datetime | None = None

    def observe(self, e: Event) -> None:
        self.end = e.ts if self.end is None or e.ts > self.end else self.end
        body = e.body
        if e.job is None:
            return
        if isinstance(body, JobStarted):
            gpus = body.world_size or sum(len(a.gpus) for a in body.allocation)
            self.starts[e.job].append((e.ts, gpus))
            self.starts[e.job].sort()
        elif isinstance(body, CheckpointSaved):
            self.saves[e.job].append(e.ts)
            self.saves[e.job].sort()

    @classmethod
    def of(cls, events: Iterable[Event]) -> Timeline:
        t = cls()
        for e in events:
            t.observe(e)
        return t

    def run_at(self, job: str, t: datetime) -> tuple[datetime, int] | None:
        runs = self.starts.get(job) or []
        i = bisect_right(runs, (t, 2**62))
        return runs[i - 1] if i else None

    def next_start(self, job: str, after: datetime) -> datetime | None:
        return next((s for s, _ in self.starts.get(job) or () if s > after), None)

    def saved_before(self, job: str, t: datetime) -> datetime | None:
        saves = self.saves.get(job) or []
        i = bisect_right(saves, t)
        return saves[i - 1] if i else None


@dataclass(frozen=True)
class Lost:
    """One incident's lost GPU-hours: the work thrown away and the time down, and what ended the downtime."""

    gpus: int
    work_gpu_hours: float
    down_gpu_hours: float
    down_until: datetime
    until: Until

    @property
    def gpu_hours(self) -> float:
        return round(self.work_gpu_hours + self.down_gpu_hours, 3)

    def to_json(self) -> Json:
        return {"gpu_hours": self.gpu_hours, "work_gpu_hours": self.work_gpu_hours,
                "down_gpu_hours": self.down_gpu_hours, "gpus": self.gpus,
                "down_until": self.down_until.isoformat().replace("+00:00", "Z"), "until": self.until}


def restarts_by_job(commands: Iterable[Json]) -> dict[str, list[datetime]]:
    """When each job was told to restart (``restart_job`` issue times), in order."""
    out: dict[str, list[datetime]] = defaultdict(list)
    for c in commands:
        job = (c.get("target") or {}).get("job")
        if c["type"] == "restart_job" and job:
            out[job].append(_at(c["issued_at"]))
    return {k: sorted(v) for k, v in out.items()}


def account(incident: Json, commands: Sequence[Json], timeline: Timeline,
            others: Sequence[datetime] = (), restart_s: float = RESTART_S) -> Lost | None:
    """``incident``'s lost GPU-hours (the rule above), or None where it stops no job the events know.

    ``commands``: this side's commands (those serving the incident count); ``others``: when the other
    side of a comparison restarted the incident's job (:func:`restarts_by_job`), empty without one."""
    job = incident.get("job")
    if not job or incident["category"] not in FAILURE_CATEGORIES or timeline.end is None:
        return None
    failed = _at(incident["opened_at"])
    run = timeline.run_at(job, failed)
    if run is None or run[1] <= 0:
        return None
    started, gpus = run
    if incident.get("lost_gpu_hours") is not None:
        work = float(incident["lost_gpu_hours"])
    else:
        since = max(started, timeline.saved_before(job, failed) or started)
        work = round((failed - since).total_seconds() * gpus / 3600, 3)
    mine = sorted((_at(c["issued_at"]), bool(c["requires_approval"])) for c in commands
                  if c["type"] == "restart_job" and c.get("incident") == incident["id"])
    end = max(timeline.end, failed)
    start = timeline.next_start(job, failed)
    until: Until
    if start is not None and (any(t <= start for t, _ in mine) or not any(failed <= t <= start for t in others)):
        down_until, until = start, "ran_again"
    else:
        auto = next((t for t, approval in mine if not approval), None)
        if auto is not None and auto + timedelta(seconds=restart_s) <= end:
            down_until, until = auto + timedelta(seconds=restart_s), "restart_assumed"
        else:
            down_until, until = end, "end_of_capture"
    down = round((down_until - failed).total_seconds() * gpus / 3600, 3)
    return Lost(gpus, round(work, 3), down, down_until, until)
