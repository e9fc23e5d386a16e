"""One pass over a backtest's events: one engine per policy, each event read once and judged by all.

Every engine starts empty and sees the same events in the same order, so the only difference
between their decisions is their policy. At the end every engine is finished as a replay's end
finishes it (every decision whose evidence is in is made; nothing waits for more time to pass), and
each one's decisions are collated as ``faultline replay --json`` prints them
(:func:`faultline.outcome.collate`): the latest version of each incident, every command once, in
issue order. What is compared is what falls in the window: incidents opened in it, commands issued
in it. The warm-up's are kept apart (``earlier``), so a command of the window can still name the
category of the incident it serves.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from correlators.engine import Correlator
from correlators.policy import Policy
from faultline.lost_hours import Timeline
from faultline.outcome import collate
from streams.decisions import Command, Incident
from streams.events import Event, Xid

__all__ = ["Decided", "Judged", "judge", "in_window"]

Json = dict[str, Any]


@dataclass
class Decided:
    """One policy's decisions in the window (contract JSON), and the incidents of before it, by id."""

    incidents: list[Json]
    commands: list[Json]
    earlier: dict[str, Json] = field(default_factory=dict)

    def incident(self, incident_id: str) -> Json | None:
        return next((i for i in self.incidents if i["id"] == incident_id), None) or self.earlier.get(incident_id)


@dataclass
class Judged:
    """Each policy's decisions (in the order the policies were given), and what the pass cost."""

    decided: list[Decided]
    xids: dict[str, int]  # event id -> XID code, of every XID event read (incidents name them as evidence)
    events: int
    read_s: float
    engine_s: float
    timeline: Timeline = field(default_factory=Timeline)  # each job's runs and saves: lost GPU-hours


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def in_window(out: dict[str, list[Json]], since: datetime | None, until: datetime | None) -> Decided:
    """The collated decisions split: those of the window, and the incidents opened before it."""
    def inside(ts: str) -> bool:
        t = _parse(ts)
        return (since is None or t >= since) and (until is None or t <= until)

    return Decided([i for i in out["incidents"] if inside(i["opened_at"])],
                   [c for c in out["commands"] if inside(c["issued_at"])],
                   {i["id"]: i for i in out["incidents"] if not inside(i["opened_at"])})


def judge(events: Iterable[Event], policies: Sequence[Policy], since: datetime | None = None,
          until: datetime | None = None) -> Judged:
    """Run ``events`` through one engine per policy; their decisions in ``[since, until]``."""
    engines = [Correlator(p) for p in policies]
    taken: list[tuple[list[Incident], list[Command]]] = [([], []) for _ in policies]
    xids: dict[str, int] = {}
    timeline = Timeline()
    n = 0
    read_s = engine_s = 0.0
    it = iter(events)
    while True:
        t0 = time.perf_counter()
        e = next(it, None)
        t1 = time.perf_counter()
        read_s += t1 - t0
        if e is None:
            break
        body = e.body
        if body.kind == "end_of_capture":
            continue  # a replay's marker is not an observation: this pass ends the window itself
        if isinstance(body, Xid):
            xids[e.id] = body.code
        timeline.observe(e)
        n += 1
        for eng, (incs, cmds) in zip(engines, taken, strict=True):
            for d in eng.process(e):
                (incs if isinstance(d, Incident) else cmds).append(d)  # type: ignore[arg-type]
        engine_s += time.perf_counter() - t1
    t1 = time.perf_counter()
    for eng, (incs, cmds) in zip(engines, taken, strict=True):
        for d in eng.finish():
            (incs if isinstance(d, Incident) else cmds).append(d)  # type: ignore[arg-type]
    engine_s += time.perf_counter() - t1
    decided = [in_window(collate(incs, cmds), since, until) for incs, cmds in taken]
    return Judged(decided, xids, n, read_s, engine_s, timeline)
