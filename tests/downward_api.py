"""A pod's downward-API volume as the kubelet writes it, for tests without a kubelet.

:func:`format_map` is the kubelet's ``fieldpath.FormatMap`` (keys sorted, ``key="value"`` lines, values
quoted as Go's ``%q``, no final newline); :class:`DownwardVolume` is its ``AtomicWriter``: the files live
in a timestamped directory, ``..data`` links to it, and ``annotations`` links to ``..data/annotations``;
an update writes a new directory, swaps ``..data`` to it by a rename, and removes the old one.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

__all__ = ["DownwardVolume", "format_map", "go_quote"]

_ESCAPES = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t", "\v": r"\v",
            "\\": r"\\", '"': r"\""}


def go_quote(text: str) -> str:
    """``text`` as Go's ``strconv.Quote`` writes it (printable characters kept, the rest escaped)."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif not ch.isprintable():
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def format_map(values: dict[str, str]) -> str:
    return "\n".join(f"{k}={go_quote(values[k])}" for k in sorted(values))


class DownwardVolume:
    """A downward-API volume with one item, ``annotations`` (``metadata.annotations``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._serial = itertools.count()
        self.path = root / "annotations"

    def write(self, annotations: dict[str, str]) -> None:
        """What the kubelet does when the pod's annotations change (and once before the container starts)."""
        data = self.root / f"..2026_12_06_14_00_00.{next(self._serial):06d}"
        data.mkdir()
        (data / "annotations").write_text(format_map(annotations), encoding="utf-8")
        old = os.readlink(self.root / "..data") if (self.root / "..data").is_symlink() else None
        os.symlink(data.name, self.root / "..data_tmp")
        os.replace(self.root / "..data_tmp", self.root / "..data")
        if not self.path.is_symlink():
            os.symlink("..data/annotations", self.path)
        if old is not None:
            (self.root / old / "annotations").unlink()
            (self.root / old).rmdir()
