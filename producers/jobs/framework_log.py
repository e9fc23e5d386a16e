"""Training logs as ``framework`` observations: the lines that name a failure, verbatim.

A training process's output (its log file, or a pipe such as the agent's
stdin) is read without blocking; each line that
:class:`~producers.jobs.error_lines.ErrorLineSelector` keeps -- NCCL watchdog
timeouts and their ``last enqueued / last completed NCCL work`` line, NCCL and
CUDA errors, CUDA out-of-memory, the exception line that ends a traceback --
becomes one observation with ``job``, ``node``, ``rank``, ``local_rank`` and
the line exactly as written (launcher prefix included). Everything else stays
on the node.

Files are followed across rotation and truncation, resuming after an agent
restart where the last one stopped (:class:`producers.node.follow.FileFollower`;
the first start skips what was already in the file). Config section
``framework_log``::

    framework_log:
      job: llama-70b            # else FAULTLINE_JOB / SLURM_JOB_ID / TORCHELASTIC_RUN_ID
      logs:                     # or a single "path:" (+ rank, local_rank); "-" is stdin
        - {path: /logs/attempt_0/0/stderr.log, rank: 0, local_rank: 0}
        - {path: /logs/attempt_0/1/stderr.log, rank: 1, local_rank: 1}
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field, model_validator

from producers.jobs.error_lines import ErrorLineSelector
from producers.jobs.identity import JobIdentity
from producers.jobs.pipe import PipeReader
from producers.node.follow import FileFollower
from producers.registry import SourceContext, SourceSettings
from producers.source import Observation, observation

__all__ = ["FollowedLog", "FrameworkLog", "FrameworkLogSettings", "LineReader", "LogSettings", "create"]

STDIN = "-"


class LineReader(Protocol):
    """Where a log's lines come from: the complete lines that arrived since the last call."""

    def read_lines(self) -> list[str]: ...

    def close(self) -> None: ...


class LogSettings(SourceSettings):
    path: str = Field(description="The log file, or '-' for the agent's standard input.")
    rank: int | None = Field(None, ge=0, description="Global rank; else RANK / SLURM_PROCID.")
    local_rank: int | None = Field(None, ge=0, description="Local rank; else LOCAL_RANK / SLURM_LOCALID.")


class FrameworkLogSettings(SourceSettings):
    job: str | None = Field(None, description="The job; else from the environment (see identity).")
    node: str | None = Field(None, description="The node; else the agent's node name.")
    path: str | None = Field(None, description="One log: its file, or '-' for standard input.")
    rank: int | None = Field(None, ge=0, description="One log: its global rank.")
    local_rank: int | None = Field(None, ge=0, description="One log: its local rank.")
    logs: list[LogSettings] = Field(default_factory=list, description="Several logs, one per rank.")
    interval_s: float = Field(1.0, gt=0, description="Seconds between two reads.")
    max_kib: int = Field(1024, gt=0, description="Most KiB read from one log per poll.")

    @model_validator(mode="after")
    def _one_way(self) -> FrameworkLogSettings:
        if (self.path is None) == (not self.logs):
            raise ValueError("framework_log: give either 'path' or 'logs'")
        return self

    def log_list(self) -> list[LogSettings]:
        if self.path is not None:
            return [LogSettings(path=self.path, rank=self.rank, local_rank=self.local_rank)]
        return list(self.logs)


@dataclass
class FollowedLog:
    """One log and the process that writes it."""

    reader: LineReader
    identity: JobIdentity
    selector: ErrorLineSelector[datetime] = field(default_factory=ErrorLineSelector)

    def poll(self, now: datetime) -> list[tuple[str, datetime]]:
        kept: list[tuple[str, datetime]] = []
        for line in self.reader.read_lines():
            kept.extend(self.selector.feed(line, now))
        kept.extend(self.selector.tick())
        if getattr(self.reader, "eof", False):
            kept.extend(self.selector.flush())
        return kept


class FrameworkLog:
    """The ``framework_log`` source: evidence lines of one or more training logs."""

    def __init__(self, logs: Sequence[FollowedLog], interval_s: float = 1.0, name: str = "framework_log") -> None:
        self.logs = list(logs)
        self.interval_s = interval_s
        self.name = name

    def poll(self, now: datetime) -> list[Observation]:
        out: list[Observation] = []
        for log in self.logs:
            for line, seen in log.poll(now):
                out.append(observation("framework", seen, **log.identity.fields(), line=line))
        return out

    def close(self) -> None:
        for log in self.logs:
            log.reader.close()


def _reader(ctx: SourceContext, path: str, max_bytes: int) -> LineReader:
    if path == STDIN:
        return PipeReader(sys.stdin.fileno(), max_bytes=max_bytes)
    digest = hashlib.sha256(path.encode()).hexdigest()[:16]
    return FileFollower(Path(path), ctx.state_path(f"framework_log.{digest}.json"), max_bytes=max_bytes)


def create(ctx: SourceContext, settings: Mapping[str, Any]) -> FrameworkLog:
    """The ``framework_log`` section's factory."""
    cfg = FrameworkLogSettings.model_validate(settings)
    logs = [
        FollowedLog(
            _reader(ctx, one.path, cfg.max_kib * 1024),
            JobIdentity.resolve(job=cfg.job, node=cfg.node or ctx.node, rank=one.rank, local_rank=one.local_rank),
        )
        for one in cfg.log_list()
    ]
    return FrameworkLog(logs, cfg.interval_s)
