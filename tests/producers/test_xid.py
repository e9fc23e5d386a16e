"""NVRM XID lines: every code of the contract's category table, every transport prefix."""

from __future__ import annotations

import pytest

from producers.kernel import parse_kernel_line
from producers.kernel.xid import XID_DESCRIPTIONS, parse_xid_line
from streams.events import GpuRef, Xid

# code -> (process fields as the driver writes them, description) -- realistic R535..R570 lines.
CONTRACT_XIDS: dict[int, tuple[str, str]] = {
    13: (
        "pid=1234, name=python, ",
        "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
    ),
    31: (
        "pid=2345, name=python, ",
        "Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000."
        " Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    ),
    43: ("pid=3456, name=python, ", "Ch 00000008"),
    45: ("pid=3456, name=python, ", "Ch 00000010"),
    48: (
        "pid='<unknown>', name=<unknown>, ",
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6,"
        " subpartition 0.",
    ),
    63: (
        "pid='<unknown>', name=<unknown>, ",
        "Row Remapper: New row (0x00000000000abc12) marked for remapping, reset gpu to activate.",
    ),
    64: ("pid='<unknown>', name=<unknown>, ", "Row Remapper Error: All reserved rows for bank are remapped"),
    74: (
        "pid='<unknown>', name=<unknown>, ",
        "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    ),
    79: ("pid='<unknown>', name=<unknown>, ", "GPU has fallen off the bus."),
    92: ("pid='<unknown>', name=<unknown>, ", "High single-bit ECC error rate detected"),
    94: ("pid=4567, name=python, ", "Contained: SM (0x1). RST: No, D-RST: No"),
    95: ("pid='<unknown>', name=<unknown>, ", "Uncontained: FBHUB. RST: Yes, D-RST: No"),
    119: (
        "pid=1234, name=python, ",
        "Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL)"
        " (0x20800a4c 0x4).",
    ),
    120: ("pid='<unknown>', name=<unknown>, ", "GSP task timeout @ pc:0x4bd36a4, task: 1"),
}

PREFIXES = [
    "",
    "Apr 22 03:14:17 n01 kernel: ",
    "Apr  2 03:14:17 n01 kernel: ",
    "6,1234,5678,-;",
    "4,98765,1234567890,c;",
    "[12345.678901] ",
    "[    5.000001] ",
    "[Wed Apr 22 03:14:17 2026] ",
    "2026-04-22T03:14:17+0000 n01 kernel: ",
    "2026-04-22T03:14:17.123456+00:00 n01 kernel: ",
    "Apr 22 03:14:17 n01 kernel: [12345.678901] ",
]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("code", sorted(CONTRACT_XIDS))
def test_every_contract_code_with_every_prefix(code: int, prefix: str) -> None:
    fields, description = CONTRACT_XIDS[code]
    line = f"{prefix}NVRM: Xid (PCI:0000:3b:00): {code}, {fields}{description}"
    xid = parse_xid_line(line)
    assert xid == Xid(code=code, gpu=GpuRef(pci="3b:00"), message=description)
    assert parse_kernel_line(line) == xid


@pytest.mark.parametrize("code", sorted(CONTRACT_XIDS))
def test_contract_codes_are_described(code: int) -> None:
    assert XID_DESCRIPTIONS[code]


@pytest.mark.parametrize(
    "code", [13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121, 140]
)
def test_well_known_codes_are_described(code: int) -> None:
    assert isinstance(XID_DESCRIPTIONS[code], str) and XID_DESCRIPTIONS[code]


def test_scenario_line() -> None:
    xid = parse_xid_line(
        "Apr 22 08:33:20 n21 kernel: NVRM: Xid (PCI:0000:ba:00): 92, pid='<unknown>', name=<unknown>,"
        " High single-bit ECC error rate detected"
    )
    assert xid is not None
    assert (xid.code, xid.gpu.pci, xid.message) == (92, "ba:00", "High single-bit ECC error rate detected")


def test_kernel_pci_form_equals_nvml_form() -> None:
    xid = parse_xid_line(
        "NVRM: Xid (PCI:0000:C1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    assert xid is not None and xid.gpu.pci == "c1:00"


@pytest.mark.parametrize(
    ("line", "code", "pci", "message"),
    [
        # oldest drivers: no PCI: tag, no process fields
        ("NVRM: Xid (0000:02:00): 43, Ch 00000020", 43, "02:00", "Ch 00000020"),
        # pid without name
        (
            "NVRM: Xid (PCI:0000:02:00): 31, pid=1234, Ch 00000010, intr 10000000.",
            31,
            "02:00",
            "Ch 00000010, intr 10000000.",
        ),
        # 8-digit PCI domain and a function number
        (
            "NVRM: Xid (PCI:00000000:8a:00.0): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            79,
            "8a:00",
            "GPU has fallen off the bus.",
        ),
        # no description at all
        ("NVRM: Xid (PCI:0000:3b:00): 62", 62, "3b:00", ""),
        # codes outside the table still parse
        (
            "NVRM: Xid (PCI:0000:3b:00): 154, pid='<unknown>', name=<unknown>, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
            154,
            "3b:00",
            "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
        ),
        ("NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=x, whatever", 999, "3b:00", "whatever"),
        # a quoted process name
        (
            "NVRM: Xid (PCI:0000:3b:00): 13, pid=77, name='pt_main_thread', Graphics Exception: ESR 0x50",
            13,
            "3b:00",
            "Graphics Exception: ESR 0x50",
        ),
        # trailing whitespace / newline
        ("NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, DBE.\n", 48, "3b:00", "DBE."),
    ],
)
def test_driver_variants(line: str, code: int, pci: str, message: str) -> None:
    xid = parse_xid_line(line)
    assert xid is not None
    assert (xid.code, xid.gpu.pci, xid.message) == (code, pci, message)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "random kernel chatter",
        "NVRM: Xid",
        "NVRM: Xid (PCI:0000:3b:00)",
        "NVRM: Xid (PCI:0000:3b:00): ",
        "NVRM: Xid (PCI:0000:3b:00): abc, pid=1, name=x, nope",
        "NVRM: Xid (PCI:0000:3b:00): 79x, pid=1, name=x, nope",
        "NVRM: Xid (PCI:0000:zz:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:3b:00): 79, GPU has fallen off the bus.",
        "NVRM: Xid PCI:0000:3b:00: 79, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:3b:00 79, GPU has fallen off the bus.",
        "nvrm: xid (pci:0000:3b:00): 79, lower-case is not the driver",
        "NVRM: GPU at PCI:0000:c1:00: GPU has fallen off the bus.",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
    ],
)
def test_malformed_or_other_lines_give_none(line: str) -> None:
    assert parse_xid_line(line) is None
