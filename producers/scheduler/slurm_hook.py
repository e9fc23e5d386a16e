"""Job events from Slurm's controller prolog and epilog, published at once.

    python -m producers.scheduler.slurm_hook started --config /etc/faultline/scheduler.yaml   # PrologSlurmctld
    python -m producers.scheduler.slurm_hook ended --config /etc/faultline/scheduler.yaml     # EpilogSlurmctld

The scheduler agent (``faultline agent`` with a ``slurm:`` source, ``faultline-scheduler.service``)
already reports every job, one poll (15 s) late. These hooks report the job's start and end the
moment slurmctld runs them, so the correlator knows a job's GPUs before its first fault:

* ``started`` -- the ``job_started`` line (allocation, ranks, world size, the hints of the
  job's comment) of ``$SLURM_JOB_ID``, read the way the agent's source reads it (same config,
  same commands, same parser), with the scheduler's own start time as ``ts``.
* ``ended`` -- ``job_finished``, ``job_failed`` or ``job_cancelled`` where Slurm already shows the
  final state, or ``job_finished`` where the epilog's ``SLURM_JOB_EXIT_CODE2`` is ``0:0``;
  anything ambiguous (a signal: cancelled or killed?) is left to the agent's next poll.

Each line is byte for byte the one the agent will send for the same job, so both give the same
event id and the correlator drops the second. The hook never fails a job: every error is
logged on standard error (slurmctld's log) and the exit status is 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from producers.agent import load_config
from producers.capture import parse_capture_line
from producers.delivery import EventPublisher
from producers.registry import SourceContext
from producers.scheduler.slurm import SlurmSettings, SlurmSource, create
from producers.scheduler.slurm_jobs import job_view
from producers.scheduler.tracking import SchedulerTracker
from producers.source import Observation
from streams.cells import DEFAULT_CELL

__all__ = ["Phase", "job_observations", "main", "publish"]

log = logging.getLogger("faultline.slurm.hook")

Phase = Literal["started", "ended"]
_ENDED = ("finished", "failed", "cancelled")


def job_observations(phase: Phase, job_id: str, source: SlurmSource, settings: SlurmSettings,
                     now: datetime, exit_code2: str | None = None) -> list[Observation]:
    """The scheduler lines for ``job_id`` at this ``phase`` (none where the agent would send none)."""
    jobs = [j for j in source.list_jobs() if j.job_id == job_id]
    if not jobs:
        return []
    # GPU jobs only, as the agent's source: known at the start; an ended job may no longer show
    # its GPUs, and the end of a job the correlator never saw start is ignored there.
    if phase == "started" and settings.gpu_jobs_only and not any(gpus for _, gpus in jobs[0].gpus):
        return []
    view = job_view(jobs[0], settings.job_key, settings.max_restarts)
    tracker = SchedulerTracker()
    # In the prolog the job is still CONFIGURING: it is starting, which is what we report.
    started = tracker.jobs([replace(view, state="running")], now)
    if phase == "started":
        return started
    if view.state not in _ENDED:  # COMPLETING: the base state is not shown yet
        if exit_code2 != "0:0":
            return []
        view = replace(view, state="finished")
    return tracker.jobs([view], now)


def publish(observations: list[Observation], kafka_conf: Mapping[str, object], namespace: str,
            timeout_s: float = 5.0, cell: str = DEFAULT_CELL) -> int:
    """Send the observations' events (as the agent serializes them); how many were sent."""
    events = []
    for obs in observations:
        events.extend(parse_capture_line(json.dumps(obs, separators=(",", ":"))))
    if not events:
        return 0
    publisher = EventPublisher({**kafka_conf, "message.timeout.ms": int(timeout_s * 1000)}, namespace, cell)
    publisher.publish(events)
    publisher.flush(timeout_s)
    return len(events)


def main(argv: list[str] | None = None) -> int:
    """Run one hook; always 0 (a prolog that fails would hold the job and drain the node)."""
    p = argparse.ArgumentParser(description="Report a Slurm job's start or end to faultline at once.")
    p.add_argument("phase", choices=["started", "ended"])
    p.add_argument("--config", type=Path, default=Path("/etc/faultline/scheduler.yaml"),
                   help="the scheduler agent's config (its slurm: section, kafka, namespace)")
    p.add_argument("--job", default=os.environ.get("SLURM_JOB_ID"), help="job id (default: $SLURM_JOB_ID)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="faultline slurm hook: %(message)s")
    try:
        from common.settings import Settings

        if not args.job:
            raise ValueError("no job id: not run by slurmctld and no --job")
        config = load_config(args.config)
        slurm = SlurmSettings.model_validate(config.sources.get("slurm") or {})
        settings = Settings()
        bootstrap = config.kafka or settings.kafka
        if not bootstrap:
            raise ValueError("no Kafka: set 'kafka' in the config or FAULTLINE_KAFKA")
        source = create(SourceContext(node=config.node, state_dir=config.state_dir), config.sources.get("slurm") or {})
        found = job_observations(args.phase, args.job, source, slurm, datetime.now(UTC),
                                 os.environ.get("SLURM_JOB_EXIT_CODE2"))
        sent = publish(found, settings.kafka_config(bootstrap), config.namespace or settings.namespace,
                       cell=config.cell or settings.cell)
        log.info("job %s %s: %d event(s) sent", args.job, args.phase, sent)
    except Exception as exc:  # never fail the job; the agent's poll reports it anyway
        log.error("job %s %s: not reported (%s); the scheduler agent's next poll will", args.job, args.phase, exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
