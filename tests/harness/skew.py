"""One node's clock off: its lines restamped, arrival order unchanged (issue #26's clock family)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)  # the public captures' and the builder's start

Offset = Callable[[float], float]


def restamp(lines: Iterable[str], node: str, offset: Offset) -> list[str]:
    """``node``'s lines (all its sources) stamped ``offset(true time)`` seconds off; arrival order unchanged."""
    out = []
    for line in lines:
        d = json.loads(line)
        if d.get("node") == node and d.get("source") != "inventory":
            t = datetime.fromisoformat(d["ts"])
            d["ts"] = (t + timedelta(seconds=offset((t - T0).total_seconds()))).isoformat(timespec="milliseconds")
            line = json.dumps(d, separators=(",", ":"))
        out.append(line)
    return out


def jump(start: float, length: float, by: float) -> Offset:
    return lambda t: by if start <= t < start + length else 0.0


def drift(start: float, length: float, by: float) -> Offset:
    return lambda t: 0.0 if t < start else by * min(1.0, (t - start) / length)
