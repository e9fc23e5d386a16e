"""The ``slurm`` source: Slurm's jobs and nodes as ``scheduler`` observations.

Every poll lists the jobs (``squeue --json``, or ``scontrol show job -d``
where the JSON output is not there: Slurm before 21.08, or built without its
JSON plugin) and the nodes (``sinfo --json``, or ``scontrol show node``);
which form works is found out once, on the first poll where the controller
answers. :mod:`~producers.scheduler.slurm_jobs` and
:mod:`~producers.scheduler.slurm_nodes` read them, and
:class:`~producers.scheduler.tracking.SchedulerTracker` reports what changed.

Commands go through a ``run(argv) -> stdout`` seam (:class:`CommandRunner`
by default: a deadline, ``SLURM_CONF`` when configured); a command that
fails makes the poll raise, and the agent backs off. One agent per cluster
should run this source (every node's agent would report the same jobs).
Config section ``slurm``::

    slurm:
      interval_s: 15
      job_key: id            # the job is its Slurm job id; "name": its job name
      max_restarts: 3        # when the job's comment does not say (see slurm_jobs)
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from producers.registry import SourceContext, SourceSettings
from producers.scheduler.slurm_jobs import SlurmJob, job_view, jobs_from_json, jobs_from_text
from producers.scheduler.slurm_nodes import nodes_from_json, nodes_from_text
from producers.scheduler.tracking import NodeView, SchedulerTracker
from producers.source import Observation

__all__ = ["CommandRunner", "Run", "SlurmSettings", "SlurmSource", "create"]

log = logging.getLogger("faultline.agent.slurm")

#: ``run(argv)`` -> the command's standard output; raises if the command fails.
Run = Callable[[Sequence[str]], str]
Format = Literal["auto", "json", "text"]

JOBS = {"json": ["squeue", "--json"], "text": ["scontrol", "show", "job", "-d"]}
NODES = {"json": ["sinfo", "--json"], "text": ["scontrol", "show", "node"]}


class CommandRunner:
    """Runs Slurm's commands: ``SLURM_CONF`` and a bin dir if given, ``timeout_s`` each."""

    def __init__(self, slurm_conf: Path | None = None, bin_dir: Path | None = None, timeout_s: float = 20.0) -> None:
        self.env = {**os.environ, **({"SLURM_CONF": str(slurm_conf)} if slurm_conf else {})}
        self.bin_dir = bin_dir
        self.timeout_s = timeout_s

    def __call__(self, argv: Sequence[str]) -> str:
        cmd = [str(self.bin_dir / argv[0]) if self.bin_dir else argv[0], *argv[1:]]
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited with {done.returncode}: {done.stderr.strip()[:300]}")
        return done.stdout


class SlurmSettings(SourceSettings):
    interval_s: float = Field(15.0, gt=0, description="Seconds between two polls of the controller.")
    job_key: Literal["id", "name"] = Field("id", description="What names a job: its Slurm id, or its name.")
    max_restarts: int | None = Field(3, ge=0, description="max_restarts when the job's comment does not say.")
    gpu_jobs_only: bool = Field(True, description="Report only jobs that were allocated GPUs.")
    jobs: bool = Field(True, description="Report job events.")
    nodes: bool = Field(True, description="Report node readiness.")
    format: Format = Field("auto", description="json, text, or auto: JSON where this Slurm has it.")
    slurm_conf: Path | None = Field(None, description="SLURM_CONF for the commands.")
    bin_dir: Path | None = Field(None, description="Where squeue/sinfo/scontrol are; else PATH.")
    timeout_s: float = Field(20.0, gt=0, description="Deadline of one command.")


class SlurmSource:
    """Polls the Slurm controller through ``run`` and reports job and node changes."""

    def __init__(
        self,
        run: Run,
        *,
        interval_s: float = 15.0,
        job_key: Literal["id", "name"] = "id",
        max_restarts: int | None = 3,
        gpu_jobs_only: bool = True,
        jobs: bool = True,
        nodes: bool = True,
        format: Format = "auto",
        name: str = "slurm",
    ) -> None:
        self.run = run
        self.interval_s = interval_s
        self.job_key = job_key
        self.max_restarts = max_restarts
        self.gpu_jobs_only = gpu_jobs_only
        self.report_jobs = jobs
        self.report_nodes = nodes
        self.name = name
        self.job_format: Format = format
        self.node_format: Format = format
        self.tracker = SchedulerTracker()

    def poll(self, now: datetime) -> list[Observation]:
        out: list[Observation] = []
        if self.report_jobs:
            views = [job_view(j, self.job_key, self.max_restarts) for j in self.list_jobs() if self._wanted(j)]
            out.extend(self.tracker.jobs(views, now))
        if self.report_nodes:
            out.extend(self.tracker.nodes(self.list_nodes(), now))
        return out

    def _wanted(self, job: SlurmJob) -> bool:
        """GPU jobs only, if so configured (an ended job has given its GPUs back: its end is kept,
        and the tracker reports it only for a job whose start it reported)."""
        return not self.gpu_jobs_only or job.state != "RUNNING" or any(gpus for _, gpus in job.gpus)

    def list_jobs(self) -> list[SlurmJob]:
        """Every job the controller lists, in the form this Slurm speaks."""
        self.job_format, text = self._ask(JOBS, self.job_format)
        return jobs_from_json(json.loads(text)) if self.job_format == "json" else jobs_from_text(text)

    def list_nodes(self) -> list[NodeView]:
        """Every node's readiness."""
        self.node_format, text = self._ask(NODES, self.node_format)
        return nodes_from_json(json.loads(text)) if self.node_format == "json" else nodes_from_text(text)

    def _ask(self, commands: Mapping[str, list[str]], form: Format) -> tuple[Format, str]:
        """Run the command of ``form``; ``auto`` tries JSON, then text, and keeps the one that worked."""
        if form != "auto":
            return form, self.run(commands[form])
        try:
            text = self.run(commands["json"])
            json.loads(text)
            return "json", text
        except (RuntimeError, ValueError, OSError) as exc:
            text = self.run(commands["text"])  # raises too if the controller is away: decide next time
            log.info("%s does not give JSON here (%s): using %s", commands["json"][0], exc, " ".join(commands["text"]))
            return "text", text

    def close(self) -> None:
        """Nothing held between polls."""


def create(ctx: SourceContext, settings: Mapping[str, Any]) -> SlurmSource:
    """The ``slurm`` section's factory."""
    cfg = SlurmSettings.model_validate(settings)
    return SlurmSource(
        CommandRunner(cfg.slurm_conf, cfg.bin_dir, cfg.timeout_s),
        interval_s=cfg.interval_s,
        job_key=cfg.job_key,
        max_restarts=cfg.max_restarts,
        gpu_jobs_only=cfg.gpu_jobs_only,
        jobs=cfg.jobs,
        nodes=cfg.nodes,
        format=cfg.format,
    )
