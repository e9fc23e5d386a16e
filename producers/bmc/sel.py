"""One line of ``ipmitool sel elist``: the BMC's System Event Log.

The line is ``|``-separated::

    id | date | time | <sensor type> <sensor name> | <event description> | Asserted|Deasserted [| reading]
      1a | 04/22/2026 | 03:24:59 | Power Supply PS2 | Failure detected | Asserted

The sensor column starts with the IPMI sensor type, which gives the
component. ``hardware_fault`` is true only for an *asserted* failure of real
hardware: a power supply failed or lost AC, an uncorrectable memory error, a
CPU IERR / machine check / thermal trip, a critical voltage or bus fault, a
non-recoverable temperature. Informational events (log cleared, boot, correctable
ECC and its logging limit, predictive or non-critical warnings, OEM records)
are not hardware faults; neither is an upper-critical temperature that has not
reached non-recoverable (that is the thermal correlator's business).
"""

from __future__ import annotations

import re
from typing import Literal

from streams.events import BmcSel

__all__ = ["Component", "component_of", "is_hardware_fault", "parse_sel_line"]

Component = Literal["power_supply", "memory", "cpu", "board", "thermal", "other"]

_ID = re.compile(r"[0-9A-Fa-f]+")

# Sensor-type prefixes (lower case) of the sensor column, most specific first.
_COMPONENTS: tuple[tuple[str, Component], ...] = (
    ("power supply", "power_supply"),
    ("power unit", "power_supply"),
    ("memory", "memory"),
    ("processor", "cpu"),
    ("cpu", "cpu"),
    ("temperature", "thermal"),
    ("fan", "thermal"),
    ("cooling device", "thermal"),
    ("voltage", "board"),
    ("current", "board"),
    ("critical interrupt", "board"),
    ("system board", "board"),
    ("module / board", "board"),
    ("add-in card", "board"),
    ("chip set", "board"),
    ("cable / interconnect", "board"),
)

# Descriptions that are never a fault, whatever the component.
_NOT_FAULT = re.compile(r"(?<!un)correctable|logging limit|predictive|presence detected|non-critical", re.I)
_FAULT: dict[Component, re.Pattern[str]] = {
    "power_supply": re.compile(r"failure|ac lost|out[- ]of[- ]range|redundancy lost", re.I),
    "memory": re.compile(r"uncorrectable|parity|device disabled|scrub failed|overtemperature", re.I),
    "cpu": re.compile(
        r"\bierr\b|thermal trip|frb\d|uncorrectable|machine check|configuration error|failure", re.I
    ),
    "board": re.compile(
        r"critical|non-recoverable|uncorrectable|fatal|\bperr\b|\bserr\b|failure|fault", re.I
    ),
    "thermal": re.compile(r"non-recoverable", re.I),
}


def component_of(sensor: str) -> Component:
    """The component a SEL sensor belongs to, from its IPMI sensor type."""
    s = sensor.lower()
    for prefix, component in _COMPONENTS:
        if s.startswith(prefix):
            return component
    return "other"


def is_hardware_fault(component: Component, description: str, asserted: bool) -> bool:
    """True for an asserted failure of real hardware (see the module docstring)."""
    if not asserted or _NOT_FAULT.search(description):
        return False
    pattern = _FAULT.get(component)
    return bool(pattern and pattern.search(description))


def parse_sel_line(line: str) -> BmcSel | None:
    """Parse one ``ipmitool sel elist`` (or ``sel list``) line, or return ``None``."""
    fields = [f.strip() for f in line.split("|")]
    if len(fields) < 5 or not _ID.fullmatch(fields[0]) or not fields[3]:
        return None
    sensor, description = fields[3], fields[4]
    asserted = len(fields) < 6 or fields[5].lower() != "deasserted"
    component = component_of(sensor)
    return BmcSel(
        sensor=sensor,
        description=description,
        asserted=asserted,
        component=component,
        hardware_fault=is_hardware_fault(component, description, asserted),
        line=line.strip(),
    )
