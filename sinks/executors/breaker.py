"""The circuit breaker: no fencing of more than a set share of the fleet in a sliding window.

A bad policy, a flapping sensor or a rack-wide power blip can make the
correlator ask to fence many nodes at once; carried out blindly, that takes a
cluster down faster than any GPU fault. The breaker counts the distinct nodes
that capacity-removing commands (``GUARDED_TYPES``) touched within ``window``
and refuses one more once ``max_share`` of the fleet would be passed (e.g. more
than 10% of the nodes within 10 minutes). A node already counted in the window
costs nothing again (a quarantine, then a drain, of one node is one node).

It closes by itself: as the window slides past the old actions, fencing is
allowed again. ``min_nodes`` always allows that many nodes per window, however
small the fleet (without it, a fleet of five could never cordon a node at
10%). An unknown fleet size keeps the breaker open: guessing is not safe.

Pure: time is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta

from streams.decisions import Command

__all__ = ["GUARDED_TYPES", "CircuitBreaker"]

GUARDED_TYPES: frozenset[str] = frozenset(
    {"quarantine_gpu", "cordon_node", "drain_node", "reset_gpu", "reboot_node"})


class CircuitBreaker:
    """Counts fenced nodes in a sliding window and says when one more would be too many."""

    def __init__(
        self,
        *,
        max_share: float = 0.10,
        window: timedelta = timedelta(minutes=10),
        fleet_size: int | None = None,
        min_nodes: int = 1,
        guarded: Iterable[str] = GUARDED_TYPES,
    ) -> None:
        if not 0 < max_share <= 1:
            raise ValueError(f"max_share must be in (0, 1], not {max_share}")
        if window <= timedelta(0):
            raise ValueError(f"window must be positive, not {window}")
        self.max_share = max_share
        self.window = window
        self.fleet_size = fleet_size
        self.min_nodes = min_nodes
        self.guarded = frozenset(guarded)
        self._last_fenced: dict[str, datetime] = {}

    def guards(self, cmd: Command) -> bool:
        """Whether the command removes capacity from a named node (and so counts)."""
        return cmd.type in self.guarded and cmd.target.node is not None

    def limit(self) -> int | None:
        """How many distinct nodes may be fenced per window; None while the fleet size is unknown."""
        if self.fleet_size is None or self.fleet_size <= 0:
            return None
        return max(self.min_nodes, math.floor(self.max_share * self.fleet_size + 1e-9))

    def fenced(self, now: datetime) -> list[str]:
        """The nodes fenced within the window ending at ``now``, oldest first."""
        self._forget_before(now - self.window)
        return sorted(self._last_fenced, key=self._last_fenced.__getitem__)

    def check(self, node: str, now: datetime) -> str | None:
        """None when fencing ``node`` now is allowed, else why not (the breaker is open)."""
        limit = self.limit()
        if limit is None:
            return "fleet size unknown: configure it (--fleet-size) or use a backend that reports it"
        fenced = self.fenced(now)
        if node in self._last_fenced or len(fenced) < limit:
            return None
        minutes = self.window.total_seconds() / 60
        return (f"{len(fenced)} of {self.fleet_size} nodes already fenced within {minutes:g} min "
                f"(limit {limit}, {self.max_share:.0%} of the fleet): {', '.join(fenced[:10])}"
                f"{' ...' if len(fenced) > 10 else ''}")

    def record(self, node: str, now: datetime) -> None:
        """Count ``node`` as fenced at ``now``."""
        previous = self._last_fenced.get(node)
        if previous is None or previous < now:
            self._last_fenced[node] = now

    def _forget_before(self, cutoff: datetime) -> None:
        for node in [n for n, at in self._last_fenced.items() if at <= cutoff]:
            del self._last_fenced[node]
