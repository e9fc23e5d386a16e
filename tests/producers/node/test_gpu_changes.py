"""Per-field tolerances of GPU readings."""

from __future__ import annotations

from typing import Any

import pytest

from producers.node.gpu_changes import Tolerances, changed_fields

BASE: dict[str, Any] = {
    "temperature_c": 64.0,
    "power_w": 500.0,
    "power_limit_w": 700.0,
    "utilization_pct": 97,
    "memory_used_mib": 70_000,
    "memory_total_mib": 81_559,
    "ecc_sbe_volatile": 0,
    "ecc_dbe_aggregate": 0,
    "remapped_rows_pending": False,
    "clocks_event_reasons": ["SW_POWER_CAP"],
    "pcie_replay_counter": 7,
}


@pytest.mark.parametrize(
    ("change", "news"),
    [
        ({"temperature_c": 65.9}, False),
        ({"temperature_c": 66.0}, True),
        ({"temperature_c": 62.0}, True),
        ({"power_w": 524.9}, False),
        ({"power_w": 525.0}, True),
        ({"power_w": 475.0}, True),
        ({"utilization_pct": 80}, False),
        ({"utilization_pct": 77}, True),
        ({"memory_used_mib": 74_000}, False),
        ({"memory_used_mib": 74_100}, True),
        ({"ecc_sbe_volatile": 1}, True),
        ({"ecc_dbe_aggregate": 1}, True),
        ({"pcie_replay_counter": 8}, True),
        ({"pcie_replay_counter": 0}, True),
        ({"remapped_rows_pending": True}, True),
        ({"power_limit_w": 650.0}, True),
        ({"clocks_event_reasons": ["SW_POWER_CAP"]}, False),
        ({"clocks_event_reasons": ["HW_THERMAL_SLOWDOWN", "SW_POWER_CAP"]}, True),
        ({"clocks_event_reasons": []}, True),
        ({"temperature_c": None}, True),
        ({"retired_pages_dbe": None}, False),
        ({"retired_pages_dbe": 0}, True),
    ],
)
def test_tolerances(change: dict[str, Any], news: bool) -> None:
    assert bool(changed_fields(BASE, {**BASE, **change}, Tolerances())) is news


def test_reasons_are_a_set_and_the_changed_fields_are_named() -> None:
    old = {**BASE, "clocks_event_reasons": ["SW_POWER_CAP", "HW_SLOWDOWN"]}
    new = {**BASE, "clocks_event_reasons": ["HW_SLOWDOWN", "SW_POWER_CAP"], "ecc_sbe_volatile": 2, "temperature_c": 70.0}
    assert changed_fields(old, new, Tolerances()) == ["ecc_sbe_volatile", "temperature_c"]


def test_tolerances_are_knobs() -> None:
    loose = Tolerances(temperature_c=10, power_pct=50)
    assert changed_fields(BASE, {**BASE, "temperature_c": 72.0, "power_w": 700.0}, loose) == []
