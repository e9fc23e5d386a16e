"""Kernel lines other than XIDs: lost GPUs, PCIe AER, machine checks, host OOM; and prefixes."""

from __future__ import annotations

import pytest

from producers.kernel import parse_kernel_line
from producers.kernel.kmsg import parse_kmsg_line
from producers.kernel.prefix import strip_prefix
from streams.events import GpuLost, KernelFault, Xid

PREFIXES = [
    "",
    "Apr 22 03:14:17 n01 kernel: ",
    "6,1234,5678,-;",
    "[12345.678901] ",
    "[Wed Apr 22 03:14:17 2026] ",
]


# --- prefixes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("Apr 22 03:14:17 host kernel: NVRM: x", "NVRM: x"),
        ("Apr  2 03:14:17 host kernel: NVRM: x", "NVRM: x"),
        ("6,1234,5678,-;NVRM: x", "NVRM: x"),
        ("6,1234,5678,-,caller=T1234;NVRM: x", "NVRM: x"),
        ("[12345.678901] NVRM: x", "NVRM: x"),
        ("[    0.000000] NVRM: x", "NVRM: x"),
        ("[Wed Apr 22 03:14:17 2026] NVRM: x", "NVRM: x"),
        ("2026-04-22T03:14:17+0000 host kernel: NVRM: x", "NVRM: x"),
        ("2026-04-22T03:14:17.123456+00:00 host kernel: [ 12.3] NVRM: x", "NVRM: x"),
        ("NVRM: x", "NVRM: x"),
        ("  NVRM: x  \n", "NVRM: x"),
        ("[drm] not a timestamp", "[drm] not a timestamp"),
    ],
)
def test_strip_prefix(line: str, message: str) -> None:
    assert strip_prefix(line) == message


# --- GPU lost ------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(
    ("message", "pci"),
    [
        ("NVRM: GPU at PCI:0000:c1:00: GPU has fallen off the bus.", "c1:00"),
        (
            "NVRM: GPU at PCI:0000:C1:00: GPU-2bf18c10-b2a9-75da-6bbb-9645d75d27d6 has fallen off the bus.",
            "c1:00",
        ),
        (
            "NVRM: The NVIDIA GPU 0000:c1:00.0 (PCI ID: 10de:2330) installed in this system has fallen off the bus"
            " and is not responding to commands.",
            "c1:00",
        ),
        ("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", "3b:00"),
    ],
)
def test_gpu_lost(prefix: str, message: str, pci: str) -> None:
    body = parse_kmsg_line(prefix + message)
    assert isinstance(body, GpuLost)
    assert body.gpu.pci == pci
    assert body.message == message
    assert parse_kernel_line(prefix + message) == body


def test_xid_79_is_an_xid_not_a_gpu_lost() -> None:
    line = "NVRM: Xid (PCI:0000:81:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    assert parse_kmsg_line(line) is None
    assert isinstance(parse_kernel_line(line), Xid)


# --- PCIe AER ------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(
    ("message", "severity", "device"),
    [
        (
            "pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0",
            "fatal",
            "0000:01:00.0",
        ),
        (
            "pcieport 0000:00:01.0: AER: Uncorrected (Non-Fatal) error received: 0000:01:00.0",
            "uncorrected",
            "0000:01:00.0",
        ),
        (
            "pcieport 0000:00:01.0: AER: Multiple Uncorrected (Non-Fatal) error received: 0000:c1:00.0",
            "uncorrected",
            "0000:c1:00.0",
        ),
        ("pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0", "corrected", "0000:01:00.0"),
        (
            "pcieport 0000:00:01.0: AER: Multiple Corrected error received: 0000:00:01.0",
            "corrected",
            "0000:00:01.0",
        ),
        (
            "pcieport 0000:00:03.1: AER: Correctable error message received from 0000:C1:00.0",
            "corrected",
            "0000:c1:00.0",
        ),
        (
            "pcieport 0000:00:03.1: AER: Uncorrectable (Fatal) error message received from 0000:c1:00.0",
            "fatal",
            "0000:c1:00.0",
        ),
        ("pcieport 0000:00:01.0: AER: Corrected error received: id=0008", "corrected", "0000:00:01.0"),
        (
            "pcieport 0000:00:01.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer,"
            " (Requester ID)",
            "uncorrected",
            "0000:00:01.0",
        ),
        (
            "nvidia 0000:c1:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, (Unregistered Agent ID)",
            "fatal",
            "0000:c1:00.0",
        ),
        (
            "pcieport 0000:00:01.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
            "corrected",
            "0000:00:01.0",
        ),
        (
            "PCIe Bus Error: severity=Corrected, type=Data Link Layer, id=00e0(Transmitter ID)",
            "corrected",
            None,
        ),
    ],
)
def test_pcie_aer(prefix: str, message: str, severity: str, device: str | None) -> None:
    body = parse_kernel_line(prefix + message)
    assert body == KernelFault(fault="pcie_aer", severity=severity, device=device, message=message)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "line",
    [
        "pcieport 0000:00:01.0:   device [8086:2030] error status/mask=00000001/00002000",
        "pcieport 0000:00:01.0:    [ 0] RxErr                  (First)",
        "pcieport 0000:00:01.0: AER: enabled with IRQ 26",
        "pcieport 0000:00:01.0: AER:   Error of this Agent is reported first",
        "acpi PNP0A08:00: _OSC: OS now controls [PCIeHotplug SHPCHotplug PME AER PCIeCapability LTR]",
    ],
)
def test_aer_detail_and_setup_lines_give_none(line: str) -> None:
    assert parse_kernel_line(line) is None


# --- machine checks ----------------------------------------------------------------------


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(
    ("message", "severity", "device"),
    [
        ("mce: [Hardware Error]: Machine check events logged", "info", None),
        ("mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: be00000000800400", "fatal", "CPU 3"),
        ("mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 7: bc00000000010090", "uncorrected", "CPU 0"),
        ("mce: [Hardware Error]: CPU 12: Machine Check: 0 Bank 1: 9c00000000010090", "corrected", "CPU 12"),
        (
            "mce: [Hardware Error]: CPU 3: Machine Check Exception: 5 Bank 5: 8c00000000800400",
            "uncorrected",
            "CPU 3",
        ),
        ("Kernel panic - not syncing: Fatal machine check", "fatal", None),
        ("mce: [Hardware Error]: Machine check: Processor context corrupt", "fatal", None),
        ("mce: Uncorrected hardware memory error in user-access at 1f4e3b2000", "uncorrected", None),
        (
            "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x1234)",
            "uncorrected",
            "MC0",
        ),
        (
            "EDAC MC1: 3 CE memory read error on CPU_SrcID#1_MC#1_Chan#0_DIMM#0 (channel:0 slot:0 page:0x5678)",
            "corrected",
            "MC1",
        ),
        ("EDAC skx MC2: 1 CE memory scrubbing error on DIMM_B1", "corrected", "MC2"),
        ('EDAC MC0: UE row 2, channel 0, label "DIMM_A1": i3200 UE', "uncorrected", "MC0"),
    ],
)
def test_machine_checks(prefix: str, message: str, severity: str, device: str | None) -> None:
    body = parse_kernel_line(prefix + message)
    assert body == KernelFault(fault="machine_check", severity=severity, device=device, message=message)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "line",
    [
        "mce: [Hardware Error]: RIP !INEXACT! 10:<ffffffff8102d3a0> {intel_idle+0x40/0x130}",
        "mce: [Hardware Error]: TSC 0 ADDR 1f4e3b2000 MISC 86 ",
        "mce: [Hardware Error]: PROCESSOR 0:50654 TIME 1776828201 SOCKET 0 APIC 0 microcode 2006e05",
        "mce: [Hardware Error]: Run the above through 'mcelog --ascii'",
        "mce: CPU0: Thermal monitoring enabled (TM1)",
        "EDAC MC: Ver: 3.0.0",
        "EDAC sbridge: Seeking for: PCI ID 8086:3ca0",
    ],
)
def test_machine_check_detail_lines_give_none(line: str) -> None:
    assert parse_kernel_line(line) is None


# --- host OOM ------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(
    "message",
    [
        "Out of memory: Killed process 1234 (python) total-vm:123456789kB, anon-rss:98765432kB, file-rss:0kB,"
        " shmem-rss:0kB, UID:1000 pgtables:200000kB oom_score_adj:0",
        "Out of memory: Kill process 1234 (python) score 912 or sacrifice child",
        "Memory cgroup out of memory: Killed process 4321 (pt_main_thread) total-vm:9000kB, anon-rss:8000kB",
        "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,"
        "task_memcg=/user.slice,task=python,pid=1234,uid=1000",
    ],
)
def test_host_oom(prefix: str, message: str) -> None:
    body = parse_kernel_line(prefix + message)
    assert body == KernelFault(fault="host_oom", severity="info", message=message)


# --- unrelated -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   ",
        "Apr 22 03:14:17 n01 kernel: usb 1-1: new high-speed USB device number 2 using xhci_hcd",
        "6,1234,5678,-;EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode",
        "[12345.678901] nvidia-nvlink: Nvlink Core is being initialized",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
        "python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
        "Memory: 2097152K/2147483648K available",
        "the GPU has fallen off the bus, said nobody in particular",
    ],
)
def test_unrelated_lines_give_none(line: str) -> None:
    assert parse_kernel_line(line) is None
