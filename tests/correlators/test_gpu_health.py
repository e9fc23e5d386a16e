"""Per-GPU detectors: ECC counters and trends, remapped rows, sustained heat."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from correlators.gpu_health import GpuHealth
from correlators.policy import Thresholds
from streams.events import GpuMetrics

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
TH = Thresholds()


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def feed(h: GpuHealth, samples: Sequence[tuple[float, dict[str, Any]]], t: Thresholds = TH) -> list[tuple[float, str]]:
    out = []
    for s, m in samples:
        out += [(s, cat) for cat, _ in h.observe(at(s), GpuMetrics(**m), t)]
    return out


def test_first_reading_is_the_base_not_a_rise() -> None:
    assert feed(GpuHealth(), [(0, {"ecc_dbe_aggregate": 3, "ecc_sbe_aggregate": 500})]) == []


def test_dbe_rise_is_a_memory_fault_once() -> None:
    h = GpuHealth()
    got = feed(h, [(0, {"ecc_dbe_volatile": 0, "ecc_dbe_aggregate": 0}),
                   (10, {"ecc_dbe_volatile": 1, "ecc_dbe_aggregate": 1}),
                   (20, {"ecc_dbe_volatile": 1, "ecc_dbe_aggregate": 1}),
                   (30, {"ecc_dbe_volatile": 1, "ecc_dbe_aggregate": 1})])
    assert got == [(10, "gpu_memory_fault")]


def test_each_counter_keeps_its_own_base() -> None:
    """Volatile and aggregate rise in the same sample: the next sample is not a second rise."""
    h = GpuHealth()
    feed(h, [(0, {"ecc_dbe_volatile": 0, "ecc_dbe_aggregate": 0})])
    assert feed(h, [(10, {"ecc_dbe_volatile": 2, "ecc_dbe_aggregate": 2})]) == [(10, "gpu_memory_fault")]
    assert feed(h, [(20, {"ecc_dbe_volatile": 2, "ecc_dbe_aggregate": 2})]) == []


def test_missing_or_null_metrics_change_nothing() -> None:
    h = GpuHealth()
    feed(h, [(0, {"ecc_dbe_volatile": 1})])
    assert feed(h, [(10, {}), (20, {"ecc_dbe_volatile": None}), (30, {"ecc_dbe_volatile": 1})]) == []


def test_remap_failure_is_a_memory_fault_and_pending_is_remembered() -> None:
    h = GpuHealth()
    assert feed(h, [(0, {"remapped_rows_failure": 0}), (5, {"remapped_rows_pending": 1})]) == []
    assert h.pending_remap_at == at(5)
    assert feed(h, [(10, {"remapped_rows_failure": 1})]) == [(10, "gpu_memory_fault")]


def test_a_single_sbe_is_not_degradation() -> None:
    h = GpuHealth()
    assert feed(h, [(0, {"ecc_sbe_volatile": 0}), (60, {"ecc_sbe_volatile": 1})]) == []


def test_rising_sbe_rate_is_degradation() -> None:
    h = GpuHealth()
    hours = [0, 20, 34, 44, 51, 56]
    got = feed(h, [(-60, {"ecc_sbe_volatile": 0})] + [(x * 3600, {"ecc_sbe_volatile": k + 1})
                                                      for k, x in enumerate(hours)])
    assert got and all(c == "gpu_ecc_degradation" for _, c in got)
    assert got[0][0] >= 44 * 3600  # needs ecc_min_signals (4) and a rate that rises


def test_steady_sbe_rate_is_not_degradation_when_rising_is_required() -> None:
    h = GpuHealth()
    samples = [(-60, {"ecc_sbe_volatile": 0})] + [(x * 3600 * 8, {"ecc_sbe_volatile": x + 1}) for x in range(6)]
    assert feed(h, samples) == []
    steady = Thresholds(ecc_rising=False)
    assert feed(GpuHealth(), samples, steady)


def test_sbe_signals_outside_the_window_are_forgotten() -> None:
    h = GpuHealth()
    for d in range(5):
        h.note_sbe(at(d * 2 * 86400), TH)
    assert len(h.sbe_signals) == 2


def test_note_sbe_reports_degradation_on_xid92_cadence() -> None:
    h = GpuHealth()
    results = [h.note_sbe(at(x * 3600), TH) for x in [0, 18, 31, 41, 48, 53]]
    assert results[:3] == [False, False, False] and results[-1]


def test_sustained_heat_is_thermal_a_spike_is_not() -> None:
    hot = {"temperature_c": 92.0}
    cool = {"temperature_c": 60.0}
    spike = feed(GpuHealth(), [(0, hot), (60, hot), (120, hot), (180, cool), (240, hot), (300, hot)])
    assert spike == []
    sustained = feed(GpuHealth(), [(s, hot) for s in range(0, 420, 30)])
    assert sustained and sustained[0][0] == 300


def test_exactly_at_the_limit_is_not_over_it() -> None:
    assert feed(GpuHealth(), [(s, {"temperature_c": 85.0}) for s in range(0, 600, 30)]) == []


def test_thermal_slowdown_reason_counts_as_hot_power_cap_does_not() -> None:
    slow = [(s, {"temperature_c": 80.0, "clocks_event_reasons": ["HW_THERMAL_SLOWDOWN"]}) for s in range(0, 400, 30)]
    assert feed(GpuHealth(), slow)
    capped = [(s, {"temperature_c": 80.0, "clocks_event_reasons": ["SW_POWER_CAP"]}) for s in range(0, 400, 30)]
    assert feed(GpuHealth(), capped) == []
