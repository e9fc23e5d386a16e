"""A backtest from end to end: the source's events through the engines, then the comparison.

Against **the current policy** (the default) both sides are judged here, in one pass, on the same
events in the same order: every difference is the policy's. Against **live** only the candidate is
judged, and the baseline is what the live correlator decided and archived in the window; its
differences also hold whatever the live run saw otherwise (arrival order within a millisecond, the
state before the warm-up, a policy that changed during the window, raw telemetry since expired).

With ``workers`` above 1 each side is judged in a worker process of its own (:mod:`.parallel`): the
same decisions, the same output, in less time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from correlators.policy import Policy
from faultline.backtest.diff import compare, differs
from faultline.backtest.judge import Decided, Judged, in_window
from faultline.backtest.parallel import judge_units
from faultline.backtest.source import Source
from faultline.outcome import collate
from streams.decisions import Command, Incident

__all__ = ["Backtest", "backtest"]

Against = Literal["current", "live"]


@dataclass
class Backtest:
    source: Source
    against: Against
    labels: dict[str, str]  # which policy each side ran: {"candidate": ..., "baseline": ...}
    judged: Judged
    baseline: Decided
    candidate: Decided
    diff: dict[str, Any]
    total_s: float
    workers: int = 1  # processes that judged (1: this one, in one pass)

    @property
    def differs(self) -> bool:
        return differs(self.diff)

    def to_json(self) -> dict[str, Any]:
        src, r, j = self.source, self.source.retention, self.judged
        return {
            "source": src.describe, "against": self.against, "policies": self.labels,
            "window": {"since": src.since, "until": src.until, "read_from": src.read_from,
                       "context_events": src.context},
            "events": j.events,
            "timing": {"read_s": round(j.read_s, 3), "engine_s": round(j.engine_s, 3),
                       "total_s": round(self.total_s, 3),
                       "events_per_s": round(j.events / self.total_s) if self.total_s > 0 else None,
                       "workers": self.workers,
                       "events_per_s_per_worker": (round(j.events / self.total_s / self.workers)
                                                   if self.total_s > 0 else None)},
            "retention": None if r is None else {
                "raw_ttl_days": r.raw.ttl_days, "raw_kinds": list(r.raw.kinds), "raw_cutoff": r.raw.cutoff,
                "reaches_past": r.reaches_past, "without_raw_from": r.first, "without_raw_until": r.last,
                "note": r.note()},
            "unreadable_events": {"rows": src.unreadable.rows, "first": src.unreadable.first or None},
            "bad_lines": src.bad_lines,
            "differs": self.differs,
            **self.diff,
        }


def backtest(source: Source, candidate: Policy, current: Policy | None,
             live: Callable[[], tuple[list[Incident], list[Command]]] | None = None,
             labels: dict[str, str] | None = None, workers: int | None = 1) -> Backtest:
    """Judge ``source`` under ``candidate`` and compare with ``current`` (or, with ``live``, with what the
    live correlator decided: ``live()`` gives the archived incidents and commands of the window); on up
    to ``workers`` processes (None: one per CPU; :mod:`.parallel`), which changes nothing but the time."""
    if live is None and current is None:
        raise ValueError("a backtest compares with the current policy or with live: give one")
    started = time.perf_counter()
    judged, used = judge_units(source, [candidate] if current is None else [candidate, current], workers)
    cand = judged.decided[0]
    against: Against = "current"
    if live is not None:
        incidents, commands = live()
        base, against = in_window(collate(incidents, commands), source.since, source.until), "live"
    else:
        base = judged.decided[1]
    retention = source.retention

    def mark(category: str, opened_at: str) -> bool:
        return retention is not None and retention.marks(datetime.fromisoformat(opened_at.replace("Z", "+00:00")))

    diff = compare(base, cand, judged.xids, mark, judged.timeline)
    return Backtest(source, against, labels or {}, judged, base, cand, diff, time.perf_counter() - started, used)
