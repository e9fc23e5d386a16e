"""When is a new GPU reading news? Per-field tolerances against the last *published* reading.

Comparing with the last published reading (not the last sample) means a slow
drift is still reported once it adds up to the tolerance.

=======================================  ======================================
field                                    a change is
=======================================  ======================================
ECC, retired-page and PCIe replay        any change (an increase; a decrease is
counters                                 a reset, also news)
remapped-row flags, power limit,         any change
total memory
``clocks_event_reasons``                 a different set of reasons
``temperature_c``                        >= ``temperature_c`` degrees
``power_w``                              >= ``power_pct`` % of the last value
``utilization_pct``                      >= ``utilization_pct`` points
``memory_used_mib``                      >= ``memory_pct`` % of total memory
any field appearing or going null        a change
=======================================  ======================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Tolerances", "changed_fields"]


class Tolerances(BaseModel):
    """How far the gauges may move before a reading is published again (the ``tolerances`` knobs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature_c: float = Field(2.0, ge=0, description="Degrees C a temperature must move.")
    power_pct: float = Field(5.0, ge=0, description="Percent of the last value power must move.")
    utilization_pct: float = Field(20.0, ge=0, description="Points utilisation must move.")
    memory_pct: float = Field(5.0, ge=0, description="Percent of total memory the used memory must move.")


def _moved(name: str, old: Any, new: Any, tol: Tolerances, total_mib: float | None) -> bool:
    if name == "clocks_event_reasons":
        return set(old) != set(new)
    if name == "temperature_c":
        return bool(abs(new - old) >= tol.temperature_c)
    if name == "power_w":
        return bool(abs(new - old) >= tol.power_pct / 100 * max(abs(old), 1.0))
    if name == "utilization_pct":
        return bool(abs(new - old) >= tol.utilization_pct)
    if name == "memory_used_mib":
        return bool(abs(new - old) >= tol.memory_pct / 100 * (total_mib or max(abs(old), 1.0)))
    return bool(old != new)


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any], tol: Tolerances) -> list[str]:
    """The names of the fields in which ``new`` differs from ``old`` beyond ``tol``."""
    total = new.get("memory_total_mib") or old.get("memory_total_mib")
    changed = []
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if (a is None) != (b is None) or (a is not None and _moved(name, a, b, tol, total)):
            changed.append(name)
    return changed
