"""The node agent's in-band liveness: ``node_agent`` / ``alive: true`` every ``interval_s``.

The correlators treat the *silence* of this line as the signal (a node is
silent after ``max(silence_min_s, silence_factor x interval)``), so it is sent
on a fixed cadence and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import Field

from producers.registry import SourceContext, SourceSettings
from producers.source import Observation, observation

__all__ = ["Heartbeat", "HeartbeatSettings", "create"]


class HeartbeatSettings(SourceSettings):
    interval_s: float = Field(15.0, gt=0, description="Seconds between two heartbeats.")


class Heartbeat:
    """Says ``alive: true`` for ``node`` at every poll (the agent polls it every ``interval_s``)."""

    name = "heartbeat"

    def __init__(self, node: str, interval_s: float = 15.0) -> None:
        self.node = node
        self.interval_s = interval_s

    def poll(self, now: datetime) -> list[Observation]:
        return [observation("node_agent", now, node=self.node, alive=True)]

    def close(self) -> None:
        """Nothing to release."""


def create(ctx: SourceContext, settings: Mapping[str, Any]) -> Heartbeat:
    """The ``heartbeat`` section's factory."""
    return Heartbeat(ctx.node, HeartbeatSettings.model_validate(settings).interval_s)
