"""``scontrol show job|node`` text (any Slurm version) as records of ``Key=Value`` fields.

Records are separated by blank lines, one field group per line (the default
multi-line form, not ``-o``). A value runs to the next `` Key=``; a line that
starts with one of the keys in :data:`FREE_TEXT` (comments, commands, paths,
a node's reason: scontrol prints them on a line of their own) is that one
field, spaces and ``=`` included.
Detail lines of ``scontrol show job -d`` (``Nodes=n01 CPU_IDs=0-3 Mem=0
GRES=gpu:4(IDX:0-3)``) are kept apart, in order, in :attr:`Record.details`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["FREE_TEXT", "Record", "parse_records"]

FREE_TEXT = ("Comment", "AdminComment", "SystemComment", "Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Reason")
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][\w/:.]*)=")
_FREE = re.compile(r"^(" + "|".join(FREE_TEXT) + r")=")


@dataclass
class Record:
    """One job or node: its fields, and the ``Nodes=...`` detail lines of a job."""

    fields: dict[str, str] = field(default_factory=dict)
    details: list[dict[str, str]] = field(default_factory=list)

    def get(self, key: str) -> str | None:
        value = self.fields.get(key)
        return None if value in (None, "", "(null)", "N/A", "None", "Unknown") else value


def _pairs(line: str) -> dict[str, str]:
    """The ``Key=Value`` fields of one (stripped) line."""
    free = _FREE.match(line)
    if free:
        return {free.group(1): line[free.end() :].strip()}
    out: dict[str, str] = {}
    matches = list(_KEY.finditer(line))
    ends = [m.start() for m in matches[1:]] + [len(line)] if matches else []
    for m, end in zip(matches, ends, strict=True):
        out.setdefault(m.group(1), line[m.end() : end].strip())
    return out


def parse_records(text: str, first_key: str) -> list[Record]:
    """The records of ``text``; a record starts at a line beginning with ``first_key=``."""
    records: list[Record] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith(first_key + "="):
            records.append(Record())
        if not records:
            continue
        if line.startswith("Nodes=") and "CPU_IDs=" in line:
            records[-1].details.append(_pairs(line))
        else:
            for key, value in _pairs(line).items():
                records[-1].fields.setdefault(key, value)
    return records
