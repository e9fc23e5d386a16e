"""GPU identity normalisation: the kernel, NVML and the scheduler name GPUs differently."""

from __future__ import annotations

import re

__all__ = ["short_pci"]

_PCI = re.compile(r"(?:[0-9a-f]{4,8}:)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.[0-7])?$")


def short_pci(value: str | None) -> str | None:
    """``'00000000:C1:00.0'``, ``'PCI:0000:c1:00'`` and ``'c1:00'`` all become ``'c1:00'``."""
    if not value:
        return None
    s = value.strip().lower()
    if s.startswith("pci:"):
        s = s[4:]
    m = _PCI.search(s)
    return f"{m.group(1)}:{m.group(2)}" if m else None
