"""Hardware taken out of service, and why. Restarts never land on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["Fence", "QuarantineLedger"]


@dataclass
class Fence:
    since: datetime
    incident: str
    reason: str


@dataclass
class QuarantineLedger:
    gpus: dict[tuple[str, int], Fence] = field(default_factory=dict)
    nodes: dict[str, Fence] = field(default_factory=dict)

    def quarantine(self, node: str, index: int, fence: Fence) -> bool:
        """True when the GPU was not quarantined before."""
        if (node, index) in self.gpus or node in self.nodes:
            return False
        self.gpus[(node, index)] = fence
        return True

    def cordon(self, node: str, fence: Fence) -> bool:
        if node in self.nodes:
            return False
        self.nodes[node] = fence
        return True

    def release(self, node: str, index: int | None = None) -> None:
        if index is None:
            self.nodes.pop(node, None)
        else:
            self.gpus.pop((node, index), None)

    def fenced_by(self, node: str, index: int | None = None) -> str | None:
        """The incident that fenced this GPU (or, without ``index``, this node), if any."""
        fence = self.gpus.get((node, index)) if index is not None else None
        fence = fence or self.nodes.get(node)
        return fence.incident if fence else None

    def is_fenced(self, node: str, index: int | None = None) -> bool:
        return node in self.nodes or (index is not None and (node, index) in self.gpus)
