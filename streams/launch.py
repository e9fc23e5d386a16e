"""The torchelastic launcher's configuration as a canonical event body (part of :mod:`streams.events`'s
``Body``; its own module so that one stays readable)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from streams.ranges import NonNegInt32

__all__ = ["LaunchConfig"]


class LaunchConfig(BaseModel):
    """The torchelastic launcher's configuration (its "Starting elastic_operator with launch configs" block,
    a ``LaunchConfig(...)`` repr, a torchrun command line): elasticity in nodes of ``nproc_per_node`` workers.
    One line may carry some of the fields only (the block is logged one field a line)."""

    model_config = ConfigDict(extra="ignore", frozen=True)  # as streams.events' bodies

    kind: Literal["launch_config"] = "launch_config"
    min_nodes: NonNegInt32 | None = None
    max_nodes: NonNegInt32 | None = None
    nproc_per_node: NonNegInt32 | None = None
