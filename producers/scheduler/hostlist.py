"""Slurm host lists: ``n[01-03,07],gpu-[1-2]-b`` -> ``n01 n02 n03 n07 gpu-1-b gpu-2-b``."""

from __future__ import annotations

import re

__all__ = ["expand_hostlist"]

_BRACKET = re.compile(r"\[([^\]]*)\]")
_MAX_HOSTS = 100_000  # a list longer than this is a typo, not a cluster


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _range(spec: str) -> list[str]:
    out: list[str] = []
    for part in spec.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not sep:
            out.append(lo)
            continue
        if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo) or int(hi) - int(lo) > _MAX_HOSTS:
            raise ValueError(f"bad host range {part!r}")
        out.extend(str(n).zfill(len(lo)) for n in range(int(lo), int(hi) + 1))
    return out


def _expand_one(item: str) -> list[str]:
    m = _BRACKET.search(item)
    if m is None:
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    return [head + value + rest for value in _range(m.group(1)) for rest in _expand_one(tail)]


def expand_hostlist(text: str) -> list[str]:
    """The host names of a Slurm host list, in order; ``ValueError`` if it is malformed."""
    hosts: list[str] = []
    for item in _split_top(text.strip()):
        hosts.extend(_expand_one(item))
        if len(hosts) > _MAX_HOSTS:
            raise ValueError(f"host list too long: {text[:80]!r}")
    return hosts
