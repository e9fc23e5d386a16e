"""Hardware taken out of service, and why. Restarts never land on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from correlators.state_fields import Instant

__all__ = ["Fence", "QuarantineLedger", "drop_hardware"]

_R = TypeVar("_R")


def drop_hardware(gpus: dict[str, dict[int, _R]], nodes: dict[str, _R], node: str, index: int | None) -> None:
    """Drop the entry of GPU ``index`` of ``node`` (of the node itself when None) from a by-node pair of maps;
    a node left without GPUs goes too."""
    if index is None:
        nodes.pop(node, None)
        return
    on_node = gpus.get(node)
    if on_node is not None:
        on_node.pop(index, None)
        if not on_node:
            del gpus[node]


@dataclass
class Fence:
    since: Instant
    incident: str
    reason: str
    command: str | None = None  # the quarantine_gpu / cordon_node command that carries it out


@dataclass
class QuarantineLedger:
    gpus: dict[str, dict[int, Fence]] = field(default_factory=dict)  # node -> GPU index -> fence
    nodes: dict[str, Fence] = field(default_factory=dict)  # cordoned nodes

    def quarantine(self, node: str, index: int, fence: Fence) -> bool:
        """True when the GPU was not quarantined before."""
        on_node = self.gpus.get(node)
        if (on_node is not None and index in on_node) or node in self.nodes:
            return False
        self.gpus.setdefault(node, {})[index] = fence
        return True

    def cordon(self, node: str, fence: Fence) -> bool:
        if node in self.nodes:
            return False
        self.nodes[node] = fence
        return True

    def release(self, node: str, index: int | None = None) -> None:
        drop_hardware(self.gpus, self.nodes, node, index)

    def fenced_by(self, node: str, index: int | None = None) -> str | None:
        """The incident that fenced this GPU (or, without ``index``, this node), if any."""
        fence = self.gpus.get(node, {}).get(index) if index is not None else None
        fence = fence or self.nodes.get(node)
        return fence.incident if fence else None

    def is_fenced(self, node: str, index: int | None = None) -> bool:
        return node in self.nodes or (index is not None and index in self.gpus.get(node, {}))

    def quarantined(self, node: str | None = None) -> list[tuple[str, int]]:
        """(node, GPU index) of every quarantined GPU (of ``node`` only, when given), by node."""
        nodes = [node] if node is not None else list(self.gpus)
        return [(n, i) for n in nodes for i in self.gpus.get(n, {})]
