"""``ipmitool sel elist`` lines: component and hardware-fault judgement."""

from __future__ import annotations

import pytest

from producers.bmc.sel import component_of, parse_sel_line
from streams.events import BmcSel


@pytest.mark.parametrize(
    ("line", "sensor", "description", "asserted", "component", "fault"),
    [
        # the scenario line
        (
            "  1a | 04/22/2026 | 03:24:59 | Power Supply PS2 | Failure detected | Asserted",
            "Power Supply PS2",
            "Failure detected",
            True,
            "power_supply",
            True,
        ),
        (
            "   5 | 04/22/2026 | 03:24:59 | Memory #0x01 | Uncorrectable ECC | Asserted",
            "Memory #0x01",
            "Uncorrectable ECC",
            True,
            "memory",
            True,
        ),
        (
            "   7 | 04/22/2026 | 03:24:59 | Processor CPU1 | IERR | Asserted",
            "Processor CPU1",
            "IERR",
            True,
            "cpu",
            True,
        ),
        (
            "   8 | 04/22/2026 | 03:24:59 | Temperature CPU0 Temp | Upper Critical going high | Asserted",
            "Temperature CPU0 Temp",
            "Upper Critical going high",
            True,
            "thermal",
            False,
        ),
        (
            "   9 | 04/22/2026 | 03:24:59 | Power Supply PS1 | Power Supply AC lost | Deasserted",
            "Power Supply PS1",
            "Power Supply AC lost",
            False,
            "power_supply",
            False,
        ),
        (
            "   a | 04/22/2026 | 03:24:59 | System Event | Log area reset/cleared | Asserted",
            "System Event",
            "Log area reset/cleared",
            True,
            "other",
            False,
        ),
        (
            "   b | 04/22/2026 | 03:24:59 | System Boot Initiated | Initiated by power up | Asserted",
            "System Boot Initiated",
            "Initiated by power up",
            True,
            "other",
            False,
        ),
    ],
)
def test_brief_examples(
    line: str, sensor: str, description: str, asserted: bool, component: str, fault: bool
) -> None:
    assert parse_sel_line(line) == BmcSel(
        sensor=sensor,
        description=description,
        asserted=asserted,
        component=component,  # type: ignore[arg-type]
        hardware_fault=fault,
        line=line.strip(),
    )


@pytest.mark.parametrize(
    ("sensor", "description", "fault"),
    [
        # power
        ("Power Supply PS1", "Power Supply AC lost", True),
        ("Power Supply PS1", "AC lost or out-of-range", True),
        ("Power Supply #0x51", "Failure detected", True),
        ("Power Supply PS1", "Predictive failure", False),
        ("Power Supply PS1", "Presence detected", False),
        ("Power Unit Pwr Unit Redund", "Redundancy Lost", True),
        ("Power Unit #0x01", "Power off/down", False),
        # memory
        ("Memory DIMM_A1", "Uncorrectable ECC", True),
        ("Memory #0x02", "Parity", True),
        ("Memory DIMM_B2", "Correctable ECC", False),
        ("Memory #0x03", "Correctable ECC logging limit reached", False),
        ("Memory DIMM_A1", "Presence detected", False),
        # cpu
        ("Processor CPU0", "IERR", True),
        ("Processor CPU0", "Thermal Trip", True),
        ("Processor #0x41", "FRB2/Hang in POST failure", True),
        ("Processor CPU1", "Uncorrectable machine check exception", True),
        ("Processor CPU1", "Correctable machine check error", False),
        ("Processor CPU0", "Presence detected", False),
        # board
        ("Voltage P12V", "Lower Critical going low", True),
        ("Voltage PVCCIN CPU0", "Upper Non-recoverable going high", True),
        ("Voltage P3V3", "Upper Non-critical going high", False),
        ("Critical Interrupt PCIe Err", "Bus Uncorrectable Error", True),
        ("Critical Interrupt #0xa1", "PCI SERR", True),
        ("Critical Interrupt PCIe Err", "Bus Correctable Error", False),
        ("Critical Interrupt NMI", "Front Panel NMI / Diagnostic Interrupt", False),
        # thermal
        ("Temperature Inlet Temp", "Upper Non-recoverable going high", True),
        ("Temperature GPU3 Temp", "Upper Critical going high", False),
        ("Fan FAN3", "Lower Critical going low", False),
        # other
        ("Event Logging Disabled #0x07", "Correctable memory error logging disabled", False),
        ("Watchdog2 #0x39", "Hard reset", False),
        ("OEM record c0", "0000190000000000000000", False),
    ],
)
def test_hardware_fault_table(sensor: str, description: str, fault: bool) -> None:
    sel = parse_sel_line(f"  42 | 04/22/2026 | 03:24:59 | {sensor} | {description} | Asserted")
    assert sel is not None and sel.hardware_fault is fault
    deasserted = parse_sel_line(f"  42 | 04/22/2026 | 03:24:59 | {sensor} | {description} | Deasserted")
    assert deasserted is not None and deasserted.hardware_fault is False and deasserted.asserted is False


@pytest.mark.parametrize(
    ("sensor", "component"),
    [
        ("Power Supply PS2", "power_supply"),
        ("Power Unit #0x01", "power_supply"),
        ("Memory #0x01", "memory"),
        ("Processor CPU1", "cpu"),
        ("CPU1 Status", "cpu"),
        ("Temperature CPU0 Temp", "thermal"),
        ("Fan FAN1", "thermal"),
        ("Voltage P12V", "board"),
        ("Critical Interrupt PCIe Err", "board"),
        ("System Board #0x01", "board"),
        ("System Event", "other"),
        ("Drive Slot / Bay #0x01", "other"),
        ("Watchdog2", "other"),
    ],
)
def test_component(sensor: str, component: str) -> None:
    assert component_of(sensor) == component


def test_threshold_reading_column() -> None:
    line = "  8 | 04/22/2026 | 03:24:59 | Temperature Inlet Temp | Upper Non-recoverable going high | Asserted | Reading 55 > Threshold 50 degrees C"
    sel = parse_sel_line(line)
    assert sel is not None
    assert (sel.component, sel.asserted, sel.hardware_fault) == ("thermal", True, True)


def test_pre_init_timestamp() -> None:
    sel = parse_sel_line("   1 | Pre-Init  |0000000000| System Event #0x01 | Timestamp Clock Sync | Asserted")
    assert sel is not None and sel.sensor == "System Event #0x01" and not sel.hardware_fault


def test_line_without_direction_is_asserted() -> None:
    sel = parse_sel_line("  3 | 04/22/2026 | 03:24:59 | OEM record e0 | 00000000000000000000000000")
    assert sel is not None and sel.asserted and sel.component == "other"


@pytest.mark.parametrize(
    "line",
    [
        "",
        "SEL has no entries",
        "SEL Information",
        " 1 | 04/22/2026 | 03:24:59",
        "zz | 04/22/2026 | 03:24:59 | Power Supply PS2 | Failure detected | Asserted",
        " 1 | 04/22/2026 | 03:24:59 |  | Failure detected | Asserted",
    ],
)
def test_malformed_lines_give_none(line: str) -> None:
    assert parse_sel_line(line) is None
