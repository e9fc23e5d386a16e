"""Lemons: fence hardware implicated in repeated failures that were each blamed on software or unknown causes.

No event and no timer of its own: it watches every incident version the lifecycle publishes
(:meth:`LemonRules.on_version`, the lifecycle's watcher) and keeps each GPU's and node's lemon
score (:mod:`correlators.lemons`) in the engine's state. The order of checks, on every published
version of a failure incident of a job:

1. **What it implicates now.** Its culprit GPUs (each with an equal share of the blame) and their
   node, if its category is one the policy weighs (``lemons.weights``); nothing otherwise. An
   incident refined to a hardware cause, or blaming other hardware, takes its earlier blame back.
2. **Fresh records.** A GPU fenced as a lemon and since released (the release needs a recorded
   validation: :mod:`correlators.rules.operator`) starts afresh, and so does a replaced card (another
   UUID at that index); implications decayed below ``forget_below`` are forgotten.
3. **The verdict.** A GPU not fenced already, whose score reaches ``threshold`` with incidents of at
   least ``min_jobs`` jobs, is quarantined and a ``validate_gpu`` asks for ``diagnostic``; a node at
   ``node_threshold`` whose failures spread over more than one GPU (or name none; one GPU's failures
   are that GPU's) is cordoned and validated. The fence goes into the ledger before the lifecycle
   goes on, so the restart the incident then asks for excludes it.

Both commands serve the incident that tipped the score, and say why in their ``reason`` and
``params`` (score, threshold, the incidents and jobs): the evidence is the incidents themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from correlators.incident_state import OpenIncident, stable_id
from correlators.lemons import Implication, LemonRecord, decayed, implicated_jobs, score
from correlators.quarantine_ledger import Fence
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.timers import TimerName
from streams.decisions import Command, Target

__all__ = ["LEMON_REASON", "LemonRules"]

#: ``params.reason`` of the lemon fences (the archive's ``lemon_*`` views find them by it).
LEMON_REASON = "lemon"
_MAX_IMPLICATIONS = 64  # per record: more than a threshold ever needs


class LemonRules:
    """Lemon scores per GPU and per node, and the fence when one reaches the policy's threshold."""

    def __init__(self, ctx: RuleContext) -> None:
        self.state = ctx.state
        self.p = ctx.policy
        self.out = ctx.out

    def event_handlers(self) -> Mapping[str, EventHandler]:
        return {}

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        return {}

    # --- 1. what the incident implicates --------------------------------------------------
    def on_version(self, inc: OpenIncident, now: datetime) -> None:
        """A version of ``inc`` was published: move its blame, then judge the hardware it blames."""
        lp = self.p.lemons
        book = self.state.lemons
        weight = lp.weights.get(inc.category, 0.0)
        wanted: list[tuple[str, int | None]] = []
        if lp.enabled and weight > 0 and inc.job is not None and inc.node is not None:
            wanted = [(inc.node, i) for i in sorted(inc.gpus)] + [(inc.node, None)]
        had = book.placed.get(inc.id)
        if had is None and not wanted:
            return
        for node, idx in had or ():
            if (node, idx) not in wanted:
                self._unplace(inc.id, node, idx)
        if not wanted:
            book.placed.pop(inc.id, None)
            return
        book.placed[inc.id] = wanted
        share = 1.0 / len(inc.gpus) if inc.gpus else 1.0
        for node, idx in wanted:
            rec = self._fresh(node, idx, now)
            rec.implications[inc.id] = Implication(inc.opened_at, inc.job, inc.category,
                                                   share if idx is not None else 1.0,
                                                   gpu=idx if idx is not None else self._one_gpu(inc))
            self._prune(inc.id, node, idx, rec, now)
        for node, idx in wanted:
            self._judge(inc, node, idx, now)

    @staticmethod
    def _one_gpu(inc: OpenIncident) -> int | None:
        return next(iter(inc.gpus)) if len(inc.gpus) == 1 else None

    def _unplace(self, incident: str, node: str, idx: int | None) -> None:
        rec = self.state.lemons.record(node, idx)
        if rec is not None and rec.fenced_by != incident:
            rec.implications.pop(incident, None)
            if not rec.implications and rec.fenced_by is None:
                self.state.lemons.forget(node, idx)

    # --- 2. fresh records ---------------------------------------------------------------------
    def _fresh(self, node: str, idx: int | None, now: datetime) -> LemonRecord:
        book = self.state.lemons
        rec = book.gpu(node, idx) if idx is not None else book.node(node)
        ledger = self.state.ledger
        released = rec.fenced_by is not None and not ledger.is_fenced(node, idx)
        uuid = self.state.topology.gpu(node, idx).uuid if idx is not None else None
        replaced = idx is not None and rec.uuid is not None and uuid is not None and uuid != rec.uuid
        if released or replaced:
            for incident in rec.implications:
                self._drop_placement(incident, node, idx)
            rec.implications.clear()
            rec.fenced_by = rec.fenced_at = None
        if idx is not None and uuid is not None:
            rec.uuid = uuid
        return rec

    def _prune(self, keep: str, node: str, idx: int | None, rec: LemonRecord, now: datetime) -> None:
        """Forget implications decayed below ``forget_below`` of their weight, and the oldest past the bound."""
        lp = self.p.lemons
        oldest_first = sorted(rec.implications.items(), key=lambda kv: (kv[1].ts, kv[0]))
        gone = [i for i, imp in oldest_first if i != keep and decayed(imp, now, lp.weights, lp.half_life_s)
                < lp.forget_below * lp.weights.get(imp.category, 0.0)]
        rest = [i for i, _ in oldest_first if i != keep and i not in gone]
        gone += rest[: max(0, len(rest) + 1 - _MAX_IMPLICATIONS)]
        for incident in gone:
            del rec.implications[incident]
            self._drop_placement(incident, node, idx)

    def _drop_placement(self, incident: str, node: str, idx: int | None) -> None:
        placed = self.state.lemons.placed.get(incident)
        if placed is None:
            return
        rest = [p for p in placed if p != (node, idx)]
        if rest:
            self.state.lemons.placed[incident] = rest
        else:
            del self.state.lemons.placed[incident]

    # --- 3. the verdict -------------------------------------------------------------------
    def _judge(self, inc: OpenIncident, node: str, idx: int | None, now: datetime) -> None:
        lp = self.p.lemons
        rec = self.state.lemons.record(node, idx)
        ledger = self.state.ledger
        if rec is None or rec.fenced_by is not None or ledger.is_fenced(node, idx):
            return
        imps = list(rec.implications.values())
        s = score(imps, now, lp.weights, lp.half_life_s)
        jobs = implicated_jobs(imps, lp.weights)
        if len(jobs) < lp.min_jobs:
            return
        if idx is not None:
            if s < lp.threshold or not ledger.quarantine(node, idx, Fence(now, inc.id, LEMON_REASON)):
                return
        else:
            spread = {i.gpu for i in imps}
            if s < lp.node_threshold or (len(spread) < 2 and None not in spread):
                return
            if not ledger.cordon(node, Fence(now, inc.id, LEMON_REASON)):
                return
        rec.fenced_by, rec.fenced_at, rec.fences = inc.id, now, rec.fences + 1
        self.out.extend(self._fence_commands(inc, node, idx, rec, s, sorted(jobs), now))

    def _fence_commands(self, inc: OpenIncident, node: str, idx: int | None, rec: LemonRecord, s: float,
                        jobs: list[str], now: datetime) -> list[Command]:
        lp = self.p.lemons
        topo = self.state.topology
        gpu = topo.gpu_id(node, idx) if idx is not None else None
        what = f"GPU {idx} of {node}" if idx is not None else f"node {node}"
        incidents = [i for i, _ in sorted(rec.implications.items(), key=lambda kv: (kv[1].ts, kv[0]))]
        threshold = lp.threshold if idx is not None else lp.node_threshold
        why = (f"lemon: {what} implicated in {len(incidents)} failures of {len(jobs)} jobs blamed on software "
               f"or unknown causes (score {s:.2f} >= {threshold:g}); out of service until validated "
               f"({lp.diagnostic})")
        evidence: dict[str, Any] = {"reason": LEMON_REASON, "score": round(s, 3), "threshold": threshold,
                                    "incidents": incidents, "jobs": jobs}
        fence_type = "quarantine_gpu" if idx is not None else "cordon_node"
        release = f"faultline release {node}{f':{idx}' if idx is not None else ''} --validated-by '...'"
        target = Target(job=inc.job, node=node, gpu=gpu)
        return [
            self._cmd(inc, fence_type, target, evidence, why, now),
            self._cmd(inc, "validate_gpu", target, {"reason": LEMON_REASON, "diagnostic": lp.diagnostic,
                                                    "then": release}, why, now),
        ]

    @staticmethod
    def _cmd(inc: OpenIncident, ctype: str, target: Target, params: dict[str, Any], why: str,
             now: datetime) -> Command:
        cid = stable_id("cmd", inc.id, ctype, target.job, target.node, target.gpu, LEMON_REASON)
        inc.issued.add(cid)
        return Command(id=cid, incident=inc.id, type=ctype, target=target, issued_at=now,  # type: ignore[arg-type]
                       params=params, reason=why)
