"""GPU telemetry as a source: NVML readings published on change, plus a slow snapshot.

Every ``interval_s`` (default 1 s) each GPU is read; a reading is published as
an ``nvml`` observation (all its metrics) when it differs from the GPU's last
published one beyond the tolerances of :mod:`producers.node.gpu_changes`, or
when the last publication is ``snapshot_interval_s`` old (default 60 s) --
not every sample. The first poll also sends the node's ``inventory``.

Two things are sent as ``kernel`` observations, so that the kernel parsers --
the one parsing path of live and replay -- make their events:

- **a lost GPU** (NVML_ERROR_GPU_IS_LOST) becomes the driver's own line
  ``NVRM: GPU at PCI:0000:c1:00: GPU has fallen off the bus.``, once per loss,
  which parses to ``GpuLost``. (An ``nvml`` line with null metrics would say
  nothing: null means "not measured".) Samples of that GPU stop until it
  reads again.
- **NVML's critical XID events** become canonical
  ``NVRM: Xid (PCI:0000:c1:00): 48, pid='<unknown>', name=<unknown>, <description>``
  lines, which parse to ``Xid``. Where the kernel log is also followed, the
  same XID arrives twice (two lines, two ids); the correlators debounce.

Without an NVIDIA driver, :meth:`GpuTelemetry.create` says so once and returns
``None``: the agent runs the node's other sources without it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pynvml
from pydantic import Field, model_validator

from producers.kernel.xid import XID_DESCRIPTIONS
from producers.node.gpu_changes import Tolerances, changed_fields
from producers.node.nvml import GpuIdentity, GpuLostError, NvmlBackend, PynvmlBackend
from producers.node.nvml_recorded import RecordedBackend
from producers.registry import SourceContext, SourceSettings
from producers.source import Observation, observation

__all__ = ["GpuTelemetry", "NvmlSettings", "fallen_off_line", "kernel_pci", "xid_line"]

log = logging.getLogger("faultline.agent.nvml")


class NvmlSettings(SourceSettings):
    backend: Literal["pynvml", "recorded"] = Field("pynvml", description="Real NVML, or a recording.")
    path: Path | None = Field(None, description="recorded: the recording (JSON).")
    loop: bool = Field(False, description="recorded: start over after the last sample.")
    interval_s: float = Field(1.0, gt=0, description="Seconds between two readings of every GPU.")
    snapshot_interval_s: float = Field(60.0, gt=0, description="Publish each GPU at least this often.")
    xid_events: bool = Field(True, description="Also listen to NVML's critical XID events.")
    power_domains: dict[int, str] = Field(default_factory=dict, description="GPU index -> power supply/rail.")
    tolerances: Tolerances = Field(default_factory=Tolerances, description="When a reading is news.")

    @model_validator(mode="after")
    def _recorded_needs_path(self) -> NvmlSettings:
        if self.backend == "recorded" and self.path is None:
            raise ValueError("nvml: backend 'recorded' needs 'path'")
        return self


def kernel_pci(pci_bus_id: str) -> str:
    """NVML's ``00000000:C1:00.0`` in the kernel driver's form ``0000:c1:00``."""
    domain, bus, device = pci_bus_id.lower().split(".")[0].split(":")
    return f"{domain[-4:]}:{bus}:{device}"


def fallen_off_line(pci_bus_id: str) -> str:
    """The NVRM line of a GPU gone from the bus."""
    return f"NVRM: GPU at PCI:{kernel_pci(pci_bus_id)}: GPU has fallen off the bus."


def xid_line(pci_bus_id: str, code: int) -> str:
    """A canonical NVRM XID line for an XID that NVML reported."""
    description = XID_DESCRIPTIONS.get(code, "reported by NVML")
    return f"NVRM: Xid (PCI:{kernel_pci(pci_bus_id)}): {code}, pid='<unknown>', name=<unknown>, {description}"


class GpuTelemetry:
    """The ``nvml`` source (see the module docstring)."""

    name = "nvml"

    def __init__(
        self,
        node: str,
        backend: NvmlBackend,
        interval_s: float = 1.0,
        snapshot_interval_s: float = 60.0,
        tolerances: Tolerances | None = None,
        xid_events: bool = True,
        rack: str | None = None,
        power_domains: Mapping[int, str] | None = None,
    ) -> None:
        self.node = node
        self.backend = backend
        self.interval_s = interval_s
        self.snapshot_interval_s = snapshot_interval_s
        self.tolerances = tolerances or Tolerances()
        self.xid_events = xid_events
        self.rack = rack
        self.power_domains = dict(power_domains or {})
        self._gpus: list[GpuIdentity] | None = None
        self._published: dict[int, tuple[datetime, dict[str, Any]]] = {}
        self._lost: set[int] = set()
        self._failing: set[int] = set()

    @classmethod
    def create(cls, ctx: SourceContext, settings: Mapping[str, Any]) -> GpuTelemetry | None:
        """The ``nvml`` section's factory; ``None`` (said once) where there is no NVIDIA driver."""
        cfg = NvmlSettings.model_validate(settings)
        backend: NvmlBackend
        if cfg.backend == "recorded":
            assert cfg.path is not None
            backend = RecordedBackend(cfg.path, loop=cfg.loop)
        else:
            try:
                backend = PynvmlBackend()
            except pynvml.NVMLError as exc:
                log.warning("no NVIDIA driver (%s): GPU telemetry off; the node's other producers keep running", exc)
                return None
        return cls(
            ctx.node,
            backend,
            interval_s=cfg.interval_s,
            snapshot_interval_s=cfg.snapshot_interval_s,
            tolerances=cfg.tolerances,
            xid_events=cfg.xid_events,
            rack=ctx.rack,
            power_domains=cfg.power_domains,
        )

    def poll(self, now: datetime) -> list[Observation]:
        found: list[Observation] = []
        if self._gpus is None:
            self._gpus = self.backend.gpus()
            found.append(self._inventory(now, self._gpus))
        if self.xid_events:
            found.extend(self._xids(now, {gpu.index: gpu for gpu in self._gpus}))
        for gpu in self._gpus:
            found.extend(self._sample(now, gpu))
        return found

    def _xids(self, now: datetime, by_index: Mapping[int, GpuIdentity]) -> list[Observation]:
        """NVML's XID events since the last poll, as kernel lines."""
        try:
            events = self.backend.xid_events(0)
        except Exception as exc:  # the samples still matter
            log.warning("NVML XID events failed (%s); events off, the kernel log still reports XIDs", exc)
            self.xid_events = False
            return []
        found = []
        for index, code in events:
            gpu = by_index.get(index)
            if gpu is not None and gpu.pci_bus_id:
                found.append(self._kernel(now, xid_line(gpu.pci_bus_id, code)))
        return found

    def _sample(self, now: datetime, gpu: GpuIdentity) -> list[Observation]:
        """Read one GPU; its observation if the reading is news."""
        try:
            reading = self.backend.read(gpu.index)
        except GpuLostError:
            if gpu.index in self._lost or not gpu.pci_bus_id:
                return []
            log.warning("GPU %d (%s) is lost", gpu.index, gpu.pci_bus_id)
            self._lost.add(gpu.index)
            return [self._kernel(now, fallen_off_line(gpu.pci_bus_id))]
        except Exception as exc:  # one GPU's trouble must not stop the others
            if gpu.index not in self._failing:
                log.warning("GPU %d: reading failed (%s); skipping it until it reads again", gpu.index, exc)
                self._failing.add(gpu.index)
            return []
        self._lost.discard(gpu.index)
        self._failing.discard(gpu.index)
        if not self._is_news(now, gpu.index, reading):
            return []
        self._published[gpu.index] = (now, reading)
        return [observation("nvml", now, node=self.node, gpu=gpu.ref(), metrics=reading)]

    def _is_news(self, now: datetime, index: int, reading: Mapping[str, Any]) -> bool:
        last = self._published.get(index)
        if last is None:
            return True
        at, published = last
        if (now - at).total_seconds() >= self.snapshot_interval_s:
            return True
        return bool(changed_fields(published, reading, self.tolerances))

    def _kernel(self, now: datetime, line: str) -> Observation:
        return observation("kernel", now, node=self.node, line=line)

    def _inventory(self, now: datetime, gpus: list[GpuIdentity]) -> Observation:
        listed = []
        for gpu in gpus:
            entry = {"index": gpu.index, "uuid": gpu.uuid, "pci_bus_id": gpu.pci_bus_id, "name": gpu.name}
            if gpu.index in self.power_domains:
                entry["power_domain"] = self.power_domains[gpu.index]
            listed.append(entry)
        return observation("inventory", now, node=self.node, rack=self.rack, gpus=listed)

    def close(self) -> None:
        self.backend.close()
