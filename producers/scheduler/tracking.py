"""Successive snapshots of a scheduler's jobs and nodes -> ``scheduler`` observations.

A scheduler producer lists what it sees every poll -- one :class:`JobView`
per job, one :class:`NodeView` per node -- and :class:`SchedulerTracker`
turns the changes into the contract's events:

- a job seen ``running`` in a run not reported yet: ``job_started`` with its
  allocation (a job first seen already running is reported too, so an agent
  restart re-sends it: with the scheduler's own start time as ``ts`` the line
  is identical, and so is its event id downstream). A new run of the same
  job (requeued, restarted) is a new ``job_started``.
- the reported run seen ``finished`` / ``failed`` / ``cancelled``: that end,
  once (when a job is listed once, its one entry is taken for the reported
  run: a Kubernetes job's pods may go away as it ends). Jobs never reported
  as started are not reported as ended.
- a reported job no longer listed at all: the end given by ``vanished``
  (Kubernetes: deleted pods are ``cancelled``), or forgotten silently (Slurm
  keeps ended jobs listed for ``MinJobAge``, 300 s by default, far longer
  than a poll).
- a node whose readiness changed: ``node_ready`` / ``node_not_ready``; a node
  first seen not ready is reported, one first seen ready is not (that is the
  normal case). ``ready=None`` (e.g. still ``UNKNOWN`` while the controller
  starts) is no verdict.

``ts`` is the scheduler's own time of the change where it has one (start,
end), never later than ``now``; node changes are stamped ``now``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from producers.source import Observation, observation

__all__ = ["JobState", "JobView", "NodeView", "SchedulerTracker"]

log = logging.getLogger("faultline.agent.scheduler")

JobState = Literal["running", "finished", "failed", "cancelled", "other"]
_END_EVENT = {"finished": "job_finished", "failed": "job_failed", "cancelled": "job_cancelled"}


@dataclass(frozen=True)
class JobView:
    """One job as the scheduler lists it now."""

    job: str
    state: JobState
    run: str = ""  # changes whenever the job is (re)started
    started_at: datetime | None = None
    ended_at: datetime | None = None
    details: Mapping[str, Any] = field(default_factory=dict)  # job_started fields: allocation, world_size...


@dataclass(frozen=True)
class NodeView:
    """One node as the scheduler lists it now; ``ready=None``: no verdict yet."""

    node: str
    ready: bool | None
    reason: str | None = None


def _at(when: datetime | None, now: datetime) -> datetime:
    return min(when, now) if when is not None else now


class SchedulerTracker:
    """Remembers what was reported, and reports what changed."""

    def __init__(self, vanished: Literal["finished", "failed", "cancelled"] | None = None) -> None:
        self.vanished = vanished
        self._runs: dict[str, str] = {}  # job -> the run reported as started and not yet ended
        self._ready: dict[str, bool] = {}

    def jobs(self, views: Iterable[JobView], now: datetime) -> list[Observation]:
        """The job events of this snapshot (every job the scheduler lists, in any state)."""
        by_job: dict[str, list[JobView]] = {}
        for view in views:
            by_job.setdefault(view.job, []).append(view)
        out: list[Observation] = []
        for job, group in by_job.items():
            out.extend(self._job(job, group, now))
        for job in [j for j in self._runs if j not in by_job]:
            del self._runs[job]
            if self.vanished is not None:
                out.append(observation("scheduler", now, event=_END_EVENT[self.vanished], job=job))
            else:
                log.info("job %s is no longer listed; its end was not seen", job)
        return out

    def _job(self, job: str, group: list[JobView], now: datetime) -> list[Observation]:
        reported = self._runs.get(job)
        running = [v for v in group if v.state == "running"]
        if running:
            latest = max(running, key=lambda v: (v.started_at is not None, v.started_at or now))
            if latest.run == reported:
                return []
            self._runs[job] = latest.run
            fields = {k: v for k, v in latest.details.items() if v is not None}
            return [observation("scheduler", _at(latest.started_at, now), event="job_started", job=job, **fields)]
        # The reported run's end; a job listed once (Slurm ids, Kubernetes pod groups) can only be that run.
        ended = next((v for v in group if v.state in _END_EVENT and (v.run == reported or len(group) == 1)), None)
        if reported is None or ended is None:
            return []
        del self._runs[job]
        return [observation("scheduler", _at(ended.ended_at, now), event=_END_EVENT[ended.state], job=job)]

    def nodes(self, views: Iterable[NodeView], now: datetime) -> list[Observation]:
        """The node events of this snapshot."""
        out: list[Observation] = []
        for view in views:
            if view.ready is None:
                continue
            before = self._ready.get(view.node)
            self._ready[view.node] = view.ready
            if before == view.ready or (before is None and view.ready):
                continue  # no change, or first seen ready
            fields = {"reason": view.reason} if view.reason and not view.ready else {}
            out.append(observation("scheduler", now, event="node_ready" if view.ready else "node_not_ready",
                                   node=view.node, **fields))
        return out
