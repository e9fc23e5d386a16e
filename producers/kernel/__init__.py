"""Kernel log lines -> canonical bodies (XIDs, lost GPUs, AER, machine checks, host OOM)."""

from __future__ import annotations

from producers.kernel.kmsg import parse_kmsg_line
from producers.kernel.prefix import strip_prefix
from producers.kernel.xid import XID_DESCRIPTIONS, parse_xid_line
from streams.events import GpuLost, KernelFault, Xid

__all__ = ["XID_DESCRIPTIONS", "parse_kernel_line", "parse_kmsg_line", "parse_xid_line", "strip_prefix"]


def parse_kernel_line(line: str) -> Xid | GpuLost | KernelFault | None:
    """Parse one kernel log line (XID first, then the other kernel evidence).

    Returns ``None`` for lines that carry nothing the pipeline uses.
    """
    return parse_xid_line(line) or parse_kmsg_line(line)
