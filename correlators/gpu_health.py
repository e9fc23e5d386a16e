"""Per-GPU detectors over NVML samples and XIDs: ECC trends, thermal, memory faults."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from correlators.policy import Thresholds
from correlators.state_fields import Bounded, Instant
from streams.events import GpuMetrics

__all__ = ["GpuHealth", "Reading", "READINGS"]

READINGS = 12  # utilisation and power readings kept per GPU (a hang is judged on the last few)
#: (when, utilisation %, power W) of one NVML sample
Reading = tuple[Instant, float | None, float | None]


@dataclass
class GpuHealth:
    """What one GPU's recent readings say. ``observe`` returns the categories newly indicated."""

    sbe_signals: Annotated[deque[Instant], Bounded()] = field(default_factory=deque)  # within ecc_window_s
    last: dict[str, float] = field(default_factory=dict)  # counter -> its last reading
    hot_since: Instant | None = None
    pending_remap_at: Instant | None = None  # the newest reading that showed remapped rows pending
    remap_reading: tuple[Instant, bool] | None = None  # the newest reading of the flag, either way
    recent: Annotated[deque[Reading], Bounded(READINGS)] = field(default_factory=lambda: deque(maxlen=READINGS))

    def note_sbe(self, ts: datetime, t: Thresholds) -> bool:
        """Record one single-bit ECC signal; True when the trend is now degradation."""
        self.sbe_signals.append(ts)
        while self.sbe_signals and (ts - self.sbe_signals[0]).total_seconds() > t.ecc_window_s:
            self.sbe_signals.popleft()
        return self._ecc_degrading(t)

    def _ecc_degrading(self, t: Thresholds) -> bool:
        s = sorted(self.sbe_signals)
        if len(s) < t.ecc_min_signals:
            return False
        if not t.ecc_rising:
            return True
        gaps = [(b - a).total_seconds() for a, b in zip(s, s[1:], strict=False)]
        half = len(gaps) // 2
        early, late = gaps[:half], gaps[-half:]
        return bool(early) and sum(late) / len(late) < sum(early) / len(early)

    def observe(self, ts: datetime, m: GpuMetrics, t: Thresholds) -> list[tuple[str, str]]:
        """(category, reason) pairs this sample newly indicates."""
        out: list[tuple[str, str]] = []
        if m.utilization_pct is not None or m.power_w is not None:
            self.recent.append((ts, m.utilization_pct, m.power_w))
        # every counter is read on every sample (no short-circuit), so each keeps its own base
        dbe_up = self._rose("dbe_volatile", m.ecc_dbe_volatile)
        dbe_up = self._rose("dbe_aggregate", m.ecc_dbe_aggregate) or dbe_up
        dbe_up = self._rose("retired_dbe", m.retired_pages_dbe) or dbe_up
        if dbe_up:
            out.append(("gpu_memory_fault", "double-bit ECC errors counted"))
        if self._rose("remap_failure", m.remapped_rows_failure):
            out.append(("gpu_memory_fault", "row remapping failed"))
        if m.remapped_rows_pending is not None:
            self.remap_reading = (ts, bool(m.remapped_rows_pending))
            if m.remapped_rows_pending:
                self.pending_remap_at = ts
        sbe_up = self._rose("sbe_volatile", m.ecc_sbe_volatile)
        sbe_up = self._rose("sbe_aggregate", m.ecc_sbe_aggregate) or sbe_up
        if sbe_up and self.note_sbe(ts, t):
            out.append(("gpu_ecc_degradation", f"single-bit ECC rising: {len(self.sbe_signals)} signals"))
        hot = (m.temperature_c is not None and m.temperature_c > t.temperature_c) or bool(
            set(m.clocks_event_reasons or ()) & set(t.thermal_reasons)
        )
        if not hot:
            self.hot_since = None
        elif self.hot_since is None:
            self.hot_since = ts
        elif (ts - self.hot_since).total_seconds() >= t.temperature_sustain_s:
            out.append(("gpu_thermal", f"hot since {self.hot_since.isoformat()} (temp {m.temperature_c})"))
        return out

    def _rose(self, name: str, value: float | int | bool | None) -> bool:
        """True when a counter went up since the last reading (the first reading sets the base)."""
        if value is None:
            return False
        v = float(value)
        prev = self.last.get(name)
        self.last[name] = v
        return prev is not None and v > prev
