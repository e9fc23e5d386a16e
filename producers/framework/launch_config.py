"""torchelastic's launch configuration, as the launcher logs it: how many nodes, of how many workers each.

torchelastic's elasticity is in *nodes*, each running ``nproc_per_node`` workers; the launcher says so in
one of these forms (all read here, a line or a whole message at a time)::

    Starting elastic_operator with launch configs:      torch.distributed.launcher.api's block, one field a
      min_nodes        : 2                              line (a capture may hold each line on its own, or
      max_nodes        : 4                              the block as one message)
      nproc_per_node   : 8
    LaunchConfig(min_nodes=2, max_nodes=4, nproc_per_node=8, run_id='pt', ...)
    [torchelastic] ... min_nodes=2, max_nodes=4, nproc_per_node=8
    torchrun --nnodes=2:4 --nproc_per_node=8 train.py   (also --nnodes 4, --nproc-per-node 8)

A field line of the block counts on its own (``min_nodes : 2``); a ``key=value`` line only with a sign
that it is the launcher speaking (``LaunchConfig``, ``elastic``, ``torchrun``, ``launch``). Values that
cannot be a launch configuration (0 nodes, min above max) are dropped, not guessed at.
"""

from __future__ import annotations

import re

from streams.events import LaunchConfig
from streams.ranges import INT32_MAX

__all__ = ["parse_launch_config"]

_FIELD_LINE = re.compile(r"\s*(min_nodes|max_nodes|nproc_per_node)\s*:\s*(\d{1,10})\s*")
_FIELD = re.compile(r"\b(min_nodes|max_nodes|nproc_per_node)\s*[:=]\s*(\d{1,10})\b")
_LAUNCHER = re.compile(r"LaunchConfig|elastic|torchrun|torch\.distributed\.(?:run|launch)|launch config",
                       re.IGNORECASE)
_NNODES = re.compile(r"--nnodes[= ](\d{1,10})(?::(\d{1,10}))?\b")
_NPROC = re.compile(r"--nproc[-_]per[-_]node[= ](\d{1,10})\b")


def _fields(text: str) -> dict[str, int]:
    if _FIELD_LINE.fullmatch(text):
        return {m.group(1): int(m.group(2)) for m in _FIELD.finditer(text)}
    if not _LAUNCHER.search(text):
        return {}
    found = {m.group(1): int(m.group(2)) for m in _FIELD.finditer(text)}
    if (nodes := _NNODES.search(text)) is not None:
        found.setdefault("min_nodes", int(nodes.group(1)))
        found.setdefault("max_nodes", int(nodes.group(2) or nodes.group(1)))
    if (nproc := _NPROC.search(text)) is not None:
        found.setdefault("nproc_per_node", int(nproc.group(1)))
    return found


def parse_launch_config(text: str) -> LaunchConfig | None:
    """The launch configuration ``text`` states (some of its fields, at least), or ``None``."""
    found = {k: v for k, v in _fields(text).items() if 1 <= v <= INT32_MAX}
    lo, hi = found.get("min_nodes"), found.get("max_nodes")
    if lo is not None and hi is not None and lo > hi:
        found.pop("min_nodes"), found.pop("max_nodes")
    return LaunchConfig(**found) if found else None
