"""Which GPUs NVML still reports, per node: each GPU's newest sample and the node's sample cadence.

A GPU can fall off the bus without a kernel line (dmesg rate-limited, the agent missed it); NVML
still shows it, by its absence: the GPU stops appearing in the samples while the other GPUs of
its node go on. That is the contract's "GPU gone from NVML" evidence of ``gpu_off_bus``
(:meth:`~correlators.rules.hardware.HardwareRules` judges it, the ``gone`` timer).

Everything here is judged in the node's own NVML time -- the samples' timestamps -- never in the
engine's clock, so a node whose clock runs ahead or behind is compared with itself: a GPU is late
only once its siblings' newer samples show that its own is overdue. The restart gate
(:mod:`correlators.restart_gate`) reads the same figures to know until when NVML could still
speak for a GPU.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated

from correlators.state_fields import Bounded, Instant

__all__ = ["NVML_GAPS", "NvmlNode"]

NVML_GAPS = 32  # a node's sample cadence is the median of this many per-GPU gaps
MIN_GAPS = 3  # ...and is not known before this many
RECOMPUTE = 16  # ...and recomputed every this many new gaps


@dataclass
class NvmlNode:
    """One node's NVML view: GPU index -> its newest sample, the newest of all, the gaps between a GPU's
    consecutive samples (the cadence), and the GPUs declared gone (with their last sample)."""

    last: dict[int, Instant] = field(default_factory=dict)
    newest: Instant | None = None
    gaps: Annotated[deque[float], Bounded(NVML_GAPS)] = field(default_factory=lambda: deque(maxlen=NVML_GAPS))
    gone: dict[int, Instant] = field(default_factory=dict)
    # the median of ``gaps``, recomputed every RECOMPUTE new gaps (a node's cadence hardly moves; the median of
    # every sample would be the engine's costliest line)
    cad: float | None = None
    fresh: int = 0

    def observe(self, idx: int, ts: datetime) -> bool:
        """Record a sample of GPU ``idx``; True when the GPU had been declared gone and is back."""
        prev = self.last.get(idx)
        if prev is not None and ts > prev:
            self.gaps.append((ts - prev).total_seconds())
            self.fresh += 1
            if self.cad is None or self.fresh >= RECOMPUTE:
                self.fresh = 0
                self.cad = statistics.median(self.gaps) if len(self.gaps) >= MIN_GAPS else None
        if prev is None or ts > prev:
            self.last[idx] = ts
        if self.newest is None or ts > self.newest:
            self.newest = ts
        return bool(self.gone) and self.gone.pop(idx, None) is not None

    def cadence(self) -> float | None:
        """Seconds between two samples of one GPU (the median of the recent gaps), once known."""
        return self.cad

    def next_overdue(self, factor: float) -> datetime | None:
        """The earliest time (in this node's NVML time) one of its GPUs not declared gone becomes overdue."""
        cad = self.cad
        present = [t for i, t in self.last.items() if i not in self.gone]
        return min(present) + timedelta(seconds=factor * cad) if cad is not None and present else None

    def overdue_at(self, idx: int, factor: float) -> datetime | None:
        """When (in this node's NVML time) GPU ``idx`` is overdue: its newest sample plus ``factor`` intervals."""
        cad = self.cadence()
        last = self.last.get(idx)
        return None if cad is None or last is None else last + timedelta(seconds=factor * cad)

    def reporting_since(self, idx: int, since: datetime) -> int:
        """How many of the node's other GPUs have a sample newer than ``since``."""
        return sum(1 for i, t in self.last.items() if i != idx and t > since)

    def quiet(self, now: datetime, factor: float) -> bool:
        """The node's NVML as a whole has said nothing for ``factor`` intervals of engine time (the node or
        its collector is down: then no single GPU can be judged by NVML)."""
        cad = self.cadence()
        return cad is not None and self.newest is not None and (now - self.newest).total_seconds() > factor * cad
