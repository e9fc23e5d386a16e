"""Which config section starts which :class:`~producers.source.Source`.

The agent config (``producers/agent.example.yaml``) has one section per source
under ``sources:``; :data:`SOURCES` maps each section name to its factory, as
``"module:attribute"`` text so that a source's module (and its optional
dependencies, such as ``pynvml``) is imported only when its section is on.
Adding a source is one line here plus, in its module, a factory::

    def create(ctx: SourceContext, settings: Mapping[str, Any]) -> Source | None:
        cfg = MySettings.model_validate(settings)   # a SourceSettings subclass
        ...

A factory validates its section (a pydantic ``ValidationError`` is a config
error: the agent refuses to start) and returns the source, or ``None`` when
the source cannot run on this node (it logs why once; the agent goes on
without it). Any other exception is a failure to start that the agent logs
and retries later with back-off.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from producers.source import Source

__all__ = ["SOURCES", "SourceContext", "SourceFactory", "SourceSettings", "load_factory"]


@dataclass(frozen=True)
class SourceContext:
    """What the agent tells every source about where it runs."""

    node: str
    state_dir: Path
    rack: str | None = None

    def state_path(self, name: str) -> Path:
        """A file of the agent's state dir for ``name`` (a restart finds it again)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return self.state_dir / name


class SourceSettings(BaseModel):
    """Base of every source's settings: unknown keys are typos, and typos are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


SourceFactory = Callable[[SourceContext, Mapping[str, Any]], Source | None]

#: Config section name -> ``"module:factory"``.
SOURCES: dict[str, str] = {
    # the node itself
    "heartbeat": "producers.node.heartbeat:create",
    "nvml": "producers.node.gpu_telemetry:GpuTelemetry.create",
    "kernel_log": "producers.node.kernel_log:create",
    "bmc": "producers.node.bmc:create",
    "kubelet_gpus": "producers.node.kubelet_gpus:create",
    # the jobs running on it
    "framework_log": "producers.jobs.framework_log:create",
    "torchelastic": "producers.jobs.torchelastic_watch:create",
    "trainer_file": "producers.jobs.trainer_file:create",
    # the scheduler (one agent per cluster)
    "slurm": "producers.scheduler.slurm:create",
    "kubernetes": "producers.scheduler.kubernetes:create",
}


def load_factory(section: str) -> SourceFactory:
    """The factory registered for ``section``; ``KeyError`` names the known sections."""
    if section not in SOURCES:
        raise KeyError(f"unknown source {section!r}; known: {sorted(SOURCES)}")
    module_name, _, attribute = SOURCES[section].partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"source {section!r}: {SOURCES[section]} is not callable")
    return target
