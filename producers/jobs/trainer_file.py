"""The agent side of :mod:`producers.jobs.reporter`: the trainers' JSON Lines file, followed.

Each line the reporter wrote is already a ``trainer`` observation; this
source reads the new ones (across rotation and agent restarts, with
:class:`producers.node.follow.FileFollower`) and passes them on unchanged,
``NaN`` losses included. A line that is not a JSON object with
``source: "trainer"`` is dropped with a warning (the file is shared with
nothing else, so that is a bug worth seeing, not data). Config section
``trainer_file``::

    trainer_file:
      path: /var/lib/faultline/trainer.jsonl    # what FAULTLINE_TRAINER_LOG says to the trainers
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import Field

from producers.jobs.framework_log import LineReader
from producers.node.follow import FileFollower
from producers.registry import SourceContext, SourceSettings
from producers.source import Observation

__all__ = ["TrainerFile", "TrainerFileSettings", "create", "parse_trainer_line"]

log = logging.getLogger("faultline.agent.trainer_file")


class TrainerFileSettings(SourceSettings):
    path: Path = Field(description="The file the trainers' reporters write (FAULTLINE_TRAINER_LOG).")
    interval_s: float = Field(1.0, gt=0, description="Seconds between two reads.")
    max_kib: int = Field(1024, gt=0, description="Most KiB read per poll.")


def parse_trainer_line(line: str) -> Observation | None:
    """The observation a reporter line holds, or ``None`` (logged) if it is not one."""
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested too deep for the decoder
        log.warning("trainer_file: not JSON, dropped: %.120s", line)
        return None
    if not isinstance(obj, dict) or obj.get("source") != "trainer" or not isinstance(obj.get("ts"), str):
        log.warning("trainer_file: not a trainer observation, dropped: %.120s", line)
        return None
    return obj


class TrainerFile:
    """The ``trainer_file`` source: reporter lines as they are appended."""

    def __init__(self, reader: LineReader, interval_s: float = 1.0, name: str = "trainer_file") -> None:
        self.reader = reader
        self.interval_s = interval_s
        self.name = name

    def poll(self, now: datetime) -> list[Observation]:
        return [obs for obs in map(parse_trainer_line, self.reader.read_lines()) if obs is not None]

    def close(self) -> None:
        self.reader.close()


def create(ctx: SourceContext, settings: Mapping[str, Any]) -> TrainerFile:
    """The ``trainer_file`` section's factory."""
    cfg = TrainerFileSettings.model_validate(settings)
    follower = FileFollower(cfg.path, ctx.state_path("trainer_file.json"), max_bytes=cfg.max_kib * 1024)
    return TrainerFile(follower, cfg.interval_s)
