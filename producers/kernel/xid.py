"""NVIDIA XID lines from the kernel driver (NVRM).

Every driver generation writes the same head, ``NVRM: Xid (PCI:<bus id>):
<code>``, followed by process fields that changed over the years and the
free-text description::

    NVRM: Xid (PCI:0000:c1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, name=python, Graphics Exception: ...
    NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, Ch 00000010, intr 10000000. MMU Fault: ...
    NVRM: Xid (0000:3b:00): 43, Ch 00000020

Any transport prefix (kmsg, dmesg, syslog) may come first. This module only
reads the line; what a code *means* for an incident is the correlators' call.
"""

from __future__ import annotations

import re

from streams.events import GpuRef, Xid
from streams.gpu_ids import short_pci

__all__ = ["XID_DESCRIPTIONS", "parse_xid_line"]

#: NVIDIA's short descriptions of the well-known XID codes. Descriptive only:
#: which codes are hardware faults, and of what kind, is decided downstream.
XID_DESCRIPTIONS: dict[int, str] = {
    8: "GPU stopped processing",
    13: "Graphics engine exception",
    31: "GPU memory page fault (MMU fault)",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing (channel reset, usually an application fault)",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double bit ECC error (DBE)",
    56: "Display engine error",
    57: "Error programming video memory interface",
    58: "Unstable video memory interface detected",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapping recording failure",
    65: "Video processor exception",
    68: "Video processor (NVDEC) exception",
    69: "Graphics engine class error",
    73: "NVENC2 error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context switch timeout error",
    110: "Security fault error",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C link corrected error",
    122: "SPI PMU RPC read failure",
    123: "SPI PMU RPC write failure",
    140: "Unrecovered ECC error",
    143: "GPU initialization failure",
    154: "GPU recovery action changed",
}

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\):"
    r" *(?P<code>\d{1,5})\b,? *(?P<rest>.*)"
)
# Process fields between the code and the description; each is optional.
_PROCESS_FIELDS = re.compile(r"(?:pid=(?:'[^']*'|[^, ]*), *)?(?:name=(?:'[^']*'|[^,]*), *)?")


def parse_xid_line(line: str) -> Xid | None:
    """Parse one kernel line holding an NVRM XID, or return ``None``.

    The GPU is named by its short PCI bus id (``c1:00``), so it compares equal
    to NVML's ``00000000:C1:00.0``. ``message`` is the driver's description,
    without the ``pid=``/``name=`` fields.
    """
    if "NVRM: Xid" not in line:
        return None
    m = _XID.search(line)
    if m is None:
        return None
    rest = m.group("rest")
    fields = _PROCESS_FIELDS.match(rest)
    message = rest[fields.end() :] if fields else rest
    return Xid(
        code=int(m.group("code")),
        gpu=GpuRef(pci=short_pci(m.group("pci"))),
        message=message.strip(),
    )
