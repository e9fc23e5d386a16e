"""Lemon scores: how much each GPU and node has been implicated in failures nobody blamed on hardware.

A *lemon* is a card (or a node) that keeps hurting jobs while every single incident, taken alone,
looks like software or a transient: a crash here, a collective timeout there, each on another job.
Each failure incident whose category the policy weighs (``lemons.weights``: software crashes,
network timeouts, hangs -- never a hardware category, which fences by its own rule) *implicates*
the hardware it names as its culprit, and adds to that hardware's score

    weight(category) x confidence x 0.5 ** (age / half_life_s)

where ``confidence`` is the share of the blame: 1 shared equally by the GPUs the incident names,
1 for their node. The score is a sum over the hardware's implications, one per incident (a restart
loop reopens one incident, so it counts once), decayed to the time it is read at.

This module is the data and the arithmetic, shared by the correlator's rule
(:mod:`correlators.rules.lemons`, which keeps a :class:`LemonBook` in the engine's state, so
snapshots carry it) and ``faultline report lemons`` (which scores the implications the archive
keeps, :func:`score` on the same numbers): one definition, two readers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from correlators.quarantine_ledger import drop_hardware
from correlators.state_fields import Instant

__all__ = ["Implication", "LemonBook", "LemonRecord", "decayed", "implicated_jobs", "score"]


@dataclass
class Implication:
    """One incident's blame on one GPU or node: when it opened, whose job, why, and the share of blame."""

    ts: Instant
    job: str | None
    category: str
    confidence: float
    gpu: int | None = None  # node records: which of its GPUs the incident named (None: none)


@dataclass
class LemonRecord:
    """One GPU's (or node's) implications, by incident id, and whether a lemon fence holds it."""

    implications: dict[str, Implication] = field(default_factory=dict)
    uuid: str | None = None  # GPU records: the card implicated (a replaced card starts afresh)
    fenced_by: str | None = None  # the incident whose lemon fence holds it now
    fenced_at: Instant | None = None
    fences: int = 0  # lemon fences so far (each one validated and released before the next)


@dataclass
class LemonBook:
    """Every GPU's and node's record (node -> GPU index -> record; node -> record), and which hardware
    each incident implicates now (incident id -> [node, GPU index or None]), to move its blame when the
    incident changes."""

    gpus: dict[str, dict[int, LemonRecord]] = field(default_factory=dict)
    nodes: dict[str, LemonRecord] = field(default_factory=dict)
    placed: dict[str, list[tuple[str, int | None]]] = field(default_factory=dict)

    def gpu(self, node: str, index: int) -> LemonRecord:
        on_node = self.gpus.setdefault(node, {})
        rec = on_node.get(index)
        if rec is None:
            rec = on_node[index] = LemonRecord()
        return rec

    def node(self, node: str) -> LemonRecord:
        rec = self.nodes.get(node)
        if rec is None:
            rec = self.nodes[node] = LemonRecord()
        return rec

    def record(self, node: str, index: int | None) -> LemonRecord | None:
        """The record of a GPU (``index``) or of the node (None), if there is one."""
        return self.nodes.get(node) if index is None else self.gpus.get(node, {}).get(index)

    def forget(self, node: str, index: int | None) -> None:
        """Drop a record that holds nothing any more."""
        drop_hardware(self.gpus, self.nodes, node, index)


def decayed(i: Implication, now: datetime, weights: Mapping[str, float], half_life_s: float) -> float:
    """What one implication adds to a score read at ``now``."""
    age = max(0.0, (now - i.ts).total_seconds())
    return weights.get(i.category, 0.0) * i.confidence * 0.5 ** (age / half_life_s)


def score(implications: Iterable[Implication], now: datetime, weights: Mapping[str, float],
          half_life_s: float) -> float:
    """The lemon score of one GPU or node at ``now``: the decayed sum of its implications."""
    return sum(decayed(i, now, weights, half_life_s) for i in implications)


def implicated_jobs(implications: Iterable[Implication], weights: Mapping[str, float]) -> set[str]:
    """The jobs whose incidents count in a score (a weighted category, a job named)."""
    return {i.job for i in implications if i.job and weights.get(i.category, 0.0) > 0}
