"""Kernel lines other than XIDs that matter to a GPU cluster.

- a GPU gone from the bus, reported by NVRM without an XID -> :class:`GpuLost`
- PCIe Advanced Error Reporting (AER) -> :class:`KernelFault` ``pcie_aer``
- machine checks and EDAC memory-controller errors -> ``machine_check``
- the host (or cgroup) OOM killer -> ``host_oom``

Only the head line of each multi-line kernel report yields an event (the
``AER: ... error received`` line, not the ``device [8086:2030] error
status/mask`` lines that follow it), so one fault is one event.
``KernelFault.device`` keeps the kernel's own name for the device (a full PCI
address such as ``0000:01:00.0``, ``CPU 3``, ``MC0``); ``short_pci(device)``
maps a PCI address onto a ``GpuRef.pci``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from producers.kernel.prefix import strip_prefix
from streams.events import GpuLost, GpuRef, KernelFault
from streams.gpu_ids import short_pci

__all__ = ["parse_kmsg_line", "parse_gpu_lost", "parse_pcie_aer", "parse_machine_check", "parse_host_oom"]

Severity = Literal["corrected", "uncorrected", "fatal", "info"]

_BDF = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"

# --- GPU lost ----------------------------------------------------------------------
_GPU_AT = re.compile(rf"NVRM: GPU at (?:PCI:)?(?P<pci>{_BDF})")
_GPU_NAMED = re.compile(rf"NVRM: (?:The NVIDIA )?GPU (?:PCI:)?(?P<pci>{_BDF})")

# --- PCIe AER ----------------------------------------------------------------------
_AER_RECEIVED = re.compile(
    r"AER: (?:Multiple )?(?P<sev>Corrected|Correctable|Uncorrected|Uncorrectable)"
    r"(?: \((?P<fatal>Fatal|Non-Fatal)\))? error (?:message )?received(?: from)?:? *(?P<dev>" + _BDF + ")?"
)
_AER_BUS_ERROR = re.compile(
    r"PCIe Bus Error: severity=(?P<sev>Corrected|Correctable|Uncorrected|Uncorrectable)"
    r"(?: \((?P<fatal>Fatal|Non-Fatal)\))?"
)
# The device a driver message is about: 'pcieport 0000:00:01.0: ...', 'nvidia 0000:c1:00.0: ...'.
_DRIVER_DEVICE = re.compile(rf"^\S+ (?P<dev>{_BDF}): ")

# --- machine checks ------------------------------------------------------------------
_MCE_LOGGED = re.compile(r"\[Hardware Error\]: Machine check events logged")
_MCE_BANK = re.compile(
    r"\[Hardware Error\]: CPU (?P<cpu>\d+): Machine Check(?P<exc> Exception)?: *[0-9A-Fa-fx]+ "
    r"Bank (?P<bank>\d+): (?P<status>[0-9A-Fa-f]{1,16})\b"
)
_MCE_FATAL = re.compile(
    r"Kernel panic - not syncing: (?:Fatal )?[Mm]achine check|\[Hardware Error\]: Machine check: Processor context corrupt"
)
_MCE_UNCORRECTED_MEMORY = re.compile(r"mce: Uncorrected hardware memory error")
_EDAC = re.compile(r"EDAC (?:\S+ )?(?P<mc>MC\d+): (?:\d+ )?(?P<kind>CE|UE)\b")
# MCi_STATUS bits: UC = uncorrected, PCC = processor context corrupt.
_MCI_STATUS_UC = 1 << 61
_MCI_STATUS_PCC = 1 << 57

# --- host OOM killer ------------------------------------------------------------------
_OOM = re.compile(r"(?:Memory cgroup )?[Oo]ut of memory: Kill(?:ed)? process \d+|\boom-kill:constraint=")


def _aer_severity(sev: str, fatal: str | None) -> Severity:
    if sev.startswith("Correct"):
        return "corrected"
    return "fatal" if fatal == "Fatal" else "uncorrected"


def _driver_device(message: str) -> str | None:
    m = _DRIVER_DEVICE.match(message)
    return m.group("dev").lower() if m else None


def parse_gpu_lost(message: str) -> GpuLost | None:
    """``NVRM: GPU at PCI:0000:c1:00: GPU has fallen off the bus.`` and the
    ``NVRM: The NVIDIA GPU 0000:c1:00.0 ... has fallen off the bus`` form."""
    if "fallen off the bus" not in message or "NVRM: Xid" in message:
        return None
    m = _GPU_AT.search(message) or _GPU_NAMED.search(message)
    if m is None:
        return None
    return GpuLost(gpu=GpuRef(pci=short_pci(m.group("pci"))), message=message)


def parse_pcie_aer(message: str) -> KernelFault | None:
    """The head line of a PCIe AER report: ``AER: <severity> error received``
    or ``PCIe Bus Error: severity=...``. The device is the one that raised the
    error where the kernel names it, else the port that reported it."""
    m = _AER_RECEIVED.search(message)
    if m is not None:
        dev = m.group("dev")
        device = dev.lower() if dev else _driver_device(message)
    else:
        m = _AER_BUS_ERROR.search(message)
        if m is None:
            return None
        device = _driver_device(message)
    return KernelFault(
        fault="pcie_aer",
        severity=_aer_severity(m.group("sev"), m.group("fatal")),
        device=device,
        message=message,
    )


def _mce_status_severity(status: str, exception: bool) -> Severity:
    bits = int(status, 16)
    if bits & _MCI_STATUS_PCC:
        return "fatal"
    if bits & _MCI_STATUS_UC or exception:
        return "uncorrected"
    return "corrected"


def parse_machine_check(message: str) -> KernelFault | None:
    """Machine checks (``mce: [Hardware Error]: ...``), machine-check panics and
    EDAC memory-controller counts (``EDAC MC0: 1 UE ...`` / ``1 CE ...``).

    A bank line's severity comes from its MCi_STATUS word (PCC -> fatal,
    UC -> uncorrected, else corrected); 'Machine check events logged' does not
    say, so it is ``info``.
    """
    if (m := _MCE_BANK.search(message)) is not None:
        severity = _mce_status_severity(m.group("status"), m.group("exc") is not None)
        device: str | None = f"CPU {m.group('cpu')}"
    elif (m := _EDAC.search(message)) is not None:
        severity = "uncorrected" if m.group("kind") == "UE" else "corrected"
        device = m.group("mc")
    elif _MCE_FATAL.search(message):
        severity, device = "fatal", None
    elif _MCE_UNCORRECTED_MEMORY.search(message):
        severity, device = "uncorrected", None
    elif _MCE_LOGGED.search(message):
        severity, device = "info", None
    else:
        return None
    return KernelFault(fault="machine_check", severity=severity, device=device, message=message)


def parse_host_oom(message: str) -> KernelFault | None:
    """The host OOM killer: ``Out of memory: Killed process 1234 (python) ...``
    (also the cgroup form) and the one-line ``oom-kill:constraint=...`` summary."""
    if "emory" not in message and "oom-kill:" not in message:
        return None
    if _OOM.search(message) is None:
        return None
    return KernelFault(fault="host_oom", severity="info", message=message)


_PARSERS: tuple[Callable[[str], GpuLost | KernelFault | None], ...] = (
    parse_gpu_lost,
    parse_pcie_aer,
    parse_machine_check,
    parse_host_oom,
)


def parse_kmsg_line(line: str) -> GpuLost | KernelFault | None:
    """Parse one non-XID kernel line (any transport prefix), or return ``None``."""
    message = strip_prefix(line)
    for parse in _PARSERS:
        body = parse(message)
        if body is not None:
            return body
    return None
