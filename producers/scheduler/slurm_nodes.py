"""Slurm node readiness, from ``sinfo --json`` or ``scontrol show node`` text, as :class:`NodeView` s.

A node's state is a base state plus flags: ``IDLE+DRAIN`` (drained),
``MIXED+DRAIN`` (draining), ``DOWN+NOT_RESPONDING``, ``IDLE*`` (``*``: not
responding). The node is **not ready** when any part is ``DOWN``, ``DRAIN``
(``DRAINED``, ``DRAINING``), ``FAIL`` (``FAILING``) or ``NOT_RESPONDING``;
**ready** when its base is ``IDLE``, ``ALLOCATED``, ``MIXED``, ``COMPLETING``,
``RESERVED`` or ``PLANNED``; and no verdict otherwise (``UNKNOWN`` while the
controller starts, ``FUTURE``, cloud nodes powered down).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from producers.scheduler.scontrol_text import parse_records
from producers.scheduler.tracking import NodeView

__all__ = ["node_ready", "nodes_from_json", "nodes_from_text"]

_NOT_READY = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND"})
_READY = frozenset({"IDLE", "ALLOCATED", "ALLOC", "MIXED", "MIX", "COMPLETING", "RESERVED", "PLANNED"})


def node_ready(parts: Iterable[str]) -> bool | None:
    """Readiness from the state parts, base first (``["IDLE", "DRAIN"]``); ``None``: no verdict."""
    names: list[str] = []
    for part in parts:
        part = part.strip().upper()
        if part.endswith("*"):
            names.append("NOT_RESPONDING")
        names.append(part.rstrip("*~#!%$@^-"))
    if not names:
        return None
    if any(name in _NOT_READY for name in names):
        return False
    return True if names[0] in _READY else None


def _json_parts(node: Mapping[str, Any]) -> list[str]:
    state = node.get("state")
    parts = [str(s) for s in state] if isinstance(state, list) else [str(state or "")]
    flags = node.get("state_flags")
    return parts + ([str(f) for f in flags] if isinstance(flags, list) else [])


def nodes_from_json(doc: Mapping[str, Any]) -> list[NodeView]:
    """The nodes of a ``sinfo --json`` (or ``scontrol show node --json``) document."""
    return [
        NodeView(str(n.get("name")), node_ready(_json_parts(n)), str(n.get("reason") or "") or None)
        for n in doc.get("nodes") or []
        if isinstance(n, Mapping) and n.get("name")
    ]


def nodes_from_text(text: str) -> list[NodeView]:
    """The nodes of ``scontrol show node`` output."""
    return [
        NodeView(rec.fields["NodeName"], node_ready((rec.get("State") or "").split("+")), rec.get("Reason"))
        for rec in parse_records(text, "NodeName")
        if rec.fields.get("NodeName")
    ]
