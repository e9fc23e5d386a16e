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
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from correlators.state_fields import Instant

__all__ = ["NvmlNode"]

MIN_GAPS = 3  # a node's cadence is not known before this many gaps...
MIN_GPUS = 3  # ...from this many of its GPUs (or all, if fewer)
RECOMPUTE = 16  # ...and is recomputed every this many new gaps, and whenever a GPU first appears


@dataclass
class NvmlNode:
    """One node's NVML view: GPU index -> its newest sample, the newest of all, the gaps between a GPU's
    consecutive samples as each GPU's vote (the longer of its last two gaps), and the GPUs declared gone
    (with their last sample).

    The node's cadence is the median of its GPUs' votes -- one vote per GPU, not per sample: a
    publish-on-change collector sends a GPU whose ECC counters move far more often than its quiet siblings,
    and a median over samples would take that GPU's pace for the node's and declare the others gone."""

    last: dict[int, Instant] = field(default_factory=dict)
    newest: Instant | None = None
    gone: dict[int, Instant] = field(default_factory=dict)
    own: dict[int, float] = field(default_factory=dict)  # GPU index -> the longer of its last two gaps, seconds
    before: dict[int, float] = field(default_factory=dict)  # GPU index -> its newest gap, in seconds
    stamps: dict[int, Instant] = field(default_factory=dict)  # GPU index -> its newest sample's own stamp
    gaps: int = 0  # how many gaps were seen in all
    # the median of ``own``, recomputed every RECOMPUTE new gaps (a node's cadence hardly moves; a median at
    # every sample would be the engine's costliest line)
    cad: float | None = None
    fresh: int = 0

    def observe(self, idx: int, ts: datetime, own: datetime | None = None) -> bool:
        """Record a sample of GPU ``idx`` judged at ``ts`` and stamped ``own`` by its node (the same, unless the
        cell's clock placed it: :mod:`correlators.clock`); True when the GPU had been declared gone and is back.
        The cadence is learned from the node's own stamps: a placed sample's gap is the cell's, not the node's --
        unless the node's is the shorter (a clock that stopped or runs slow stamps its samples milliseconds
        apart while they arrive a cadence apart): a placed sample's gap is the larger of the two, so neither
        clock can make the node's NVML look faster than it speaks and its GPUs overdue between two samples."""
        own = ts if own is None else own
        prev, before = self.last.get(idx), self.stamps.get(idx)
        if before is None or own > before:
            self.stamps[idx] = own
        if prev is None:
            self.cad = None  # a GPU not seen before: the cadence waits for its vote (see the class docstring)
        if before is not None and own > before:
            gap = (own - before).total_seconds()
            if own != ts and prev is not None and ts > prev:  # placed: neither clock alone makes it look faster
                gap = max(gap, (ts - prev).total_seconds())
            # a GPU's vote is the longer of its last two gaps: a clock stepped back shortens exactly one gap
            # of every GPU of the node at once, and must not make the node's NVML look faster than it speaks
            self.own[idx], self.before[idx] = max(gap, self.before.get(idx, 0.0)), gap
            self.gaps += 1
            self.fresh += 1
            if self.cad is None or self.fresh >= RECOMPUTE:
                self.fresh = 0
                voted = self.gaps >= MIN_GAPS and len(self.own) >= min(MIN_GPUS, len(self.last))
                self.cad = statistics.median(self.own.values()) if voted else None
        if prev is None or ts > prev:
            self.last[idx] = ts
        if self.newest is None or ts > self.newest:
            self.newest = ts
        return bool(self.gone) and self.gone.pop(idx, None) is not None

    def cadence(self) -> float | None:
        """Seconds between two samples of one GPU (the median of the GPUs' votes), once known."""
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

    def speaks_until(self, idx: int, factor: float) -> datetime | None:
        """Until when (in this node's NVML time) NVML could still speak for GPU ``idx``, for the restart gate:
        :meth:`overdue_at` once the node's cadence is known; before that, the GPU's own vote. A GPU that
        has shown its own pace (a publish-on-change GPU whose counters move) is waited for at that pace --
        waiting is the gate's safe side, and its ``max_wait_s`` bounds it -- while declaring a GPU gone keeps
        to the node's cadence, which one fast GPU cannot set."""
        over = self.overdue_at(idx, factor)
        if over is not None:
            return over
        gap, last = self.own.get(idx), self.last.get(idx)
        return last + timedelta(seconds=factor * gap) if gap and last is not None else None

    def quiet(self, now: datetime, factor: float) -> bool:
        """The node's NVML as a whole has said nothing for ``factor`` intervals of engine time (the node or
        its collector is down: then no single GPU can be judged by NVML)."""
        cad = self.cadence()
        return cad is not None and self.newest is not None and (now - self.newest).total_seconds() > factor * cad
