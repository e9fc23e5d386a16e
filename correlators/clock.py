"""The cell's clock: each source keeps its own watermark, and no single source can move the clock.

Event time is what the engine judges in, but a source's stamps are only as good as its clock: one
node whose RTC is wrong, or whose NTP stepped it ten minutes ahead and back, must not make every
other node's silence fall due, nor be judged silent itself because its last heartbeat lies in the
future. The rule, over (source key, event time) and nothing else:

* **Sources.** A node-bound source is keyed ``node|source`` (``n7|node_agent``), a global one
  (the scheduler, the BMC poller) by its source name. Only nodes the cell knows (its inventory or
  the scheduler named them) vote; a line of an unknown node is judged but moves nothing.
* **Watermarks.** Each voter's watermark is its newest stamp (its latest, when it stepped back by
  more than the tolerance: a clock stepped back is that source's time again).
* **The clock.** A voter is live when it was heard within the last ``max(32, 4 x voters)``
  arrivals (arrival order is the one witness every source shares) and its watermark is no more
  than the tolerance behind the cell clock (a quiet source, a scheduler between jobs, a job
  stepping every ten minutes, cannot say whether the time between its lines passed). Only while a
  periodic source is live (node agents' heartbeats, NVML samples: :data:`PERIODIC`) is there a
  vote; a capture without any (a scheduler and trainers only) keeps the newest stamp as its clock
  (no silence is timed there, and its sparse sources cannot tell a gap from a skew). One node's sources share one
  clock, so they are one *clock domain* (the node; a global source is a domain of its own), whose
  mark is the newest of its live watermarks. With three live domains or more, the candidate is the
  newest domain's mark if the second newest is within half the tolerance of it, else the second
  newest's: a domain ahead of every other one is alone and outvoted (the one it leads is
  corroborated by it), a quiet, lagging or dead one merely does not lead, and a gap the whole cell
  crosses is followed at its second witness. With one or two live domains there is no majority to
  ask and the candidate is the newest mark (tiny captures keep their time; a two-node capture is
  protected only while a third domain, the scheduler or a trainer, is live). On the live path the
  wall clock moves the cell clock too, and bounds it: no vote takes it more than ``tolerance`` past
  the wall time it was last advanced to. The cell clock is never moved back.
* **The screen.** An event stamped more than ``tolerance`` ahead of or behind the cell clock is
  *screened*: it is still judged, as evidence, but placed at the cell clock (the time it arrived
  at, in the cell's time), so its heartbeats and samples are judged against its own sequence and
  never time out another source. The skew is noted on its source (``skew_s``, ``screened``) and
  counted for the cell. A heartbeat stamped ahead of the cell clock (within the tolerance) counts
  from the cell clock too (:mod:`correlators.rules.liveness`): a node whose clock leads is judged
  silent no later than one in step.

The candidate is recomputed every ``max(1, voters // 16)`` arrivals (a fleet of hundreds of
sources would otherwise sort them on every line). Everything here is plain data in
:class:`~correlators.state.EngineState`, so a snapshot carries it and a takeover decides byte for
byte as the engine it replaces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from correlators.state_fields import Instant

__all__ = ["CellClock", "SourceMark", "source_key"]

MIN_LIVE = 32  # arrivals a voter stays live without a word, at least...
LIVE_PER_VOTER = 4  # ...or this many per voter known
RECOMPUTE_PER = 16  # the candidate is recomputed every voters // this arrivals
LEAD = 0.5  # the newest domain sets the clock only this share of the tolerance ahead of the next one
PERIODIC = frozenset({"node_agent", "nvml"})  # sources that speak on a cadence of their own, whatever happens
QUORUM = 3  # live clock domains needed before a lone newest one is outvoted


def source_key(node: str | None, source: str) -> str:
    """The key a source votes under: ``node|source`` for a node-bound one, the source name otherwise."""
    return f"{node}|{source}" if node else source


@dataclass
class SourceMark:
    """One source's watermark, when it was last heard (arrival number), and its skew when last screened."""

    mark: Instant
    heard: int = 0
    screened: int = 0
    skew_s: float = 0.0


@dataclass
class CellClock:
    """The sources' watermarks and the arrivals counted; :meth:`arrive` gives the clock and an event's place."""

    sources: dict[str, SourceMark] = field(default_factory=dict)
    arrivals: int = 0
    candidate: Instant | None = None
    wall: Instant | None = None  # the live path: the newest wall-clock time the cell was advanced to
    screened: int = 0  # lines screened in this cell
    worst_skew_s: float = 0.0  # the largest skew screened (signed, by magnitude)

    def arrive(self, key: str | None, ts: datetime, clock: datetime | None,
               tolerance_s: float) -> tuple[datetime, datetime]:
        """One event of source ``key`` (None: a source that may not vote) stamped ``ts`` arrives while the
        cell clock reads ``clock``: return the clock to advance to and the time to judge the event at."""
        self.arrivals += 1
        tol = timedelta(seconds=tolerance_s)
        if key is not None:
            src = self.sources.get(key)
            if src is None:
                self.sources[key] = SourceMark(ts, self.arrivals)
                self.candidate = None  # a new voter: recompute now
            else:
                if ts > src.mark or src.mark - ts > tol:
                    src.mark = ts
                src.heard = self.arrivals
        now = self._candidate(ts, clock, tol)
        if self.wall is not None and now is not None and now > self.wall + tol:
            now = self.wall + tol  # live: no stamp moves the clock far past the time it arrived at
        if clock is not None and now is not None and now < clock:
            now = clock
        if now is None:
            now = clock if clock is not None else ts
        if abs((ts - now).total_seconds()) <= tolerance_s:
            return now, ts
        skew = (ts - now).total_seconds()
        self.screened += 1
        if abs(skew) > abs(self.worst_skew_s):
            self.worst_skew_s = skew
        if key is not None:
            mark = self.sources[key]
            mark.screened += 1
            mark.skew_s = skew
        return now, now

    def tick(self, wall: datetime) -> None:
        """The live path advanced the cell to the wall clock's ``wall``: the bound on what a stamp can move."""
        if self.wall is None or wall > self.wall:
            self.wall = wall

    def _candidate(self, ts: datetime, clock: datetime | None, tol: timedelta) -> datetime | None:
        n = len(self.sources)
        if n == 0:
            return ts  # nobody may vote: the lines' own time (as a capture of unknown nodes has)
        every = max(1, n // RECOMPUTE_PER)
        if self.candidate is None or self.arrivals % every == 0:
            self.candidate = self._vote(n, clock, tol)
        return self.candidate

    def _vote(self, n: int, clock: datetime | None, tol: timedelta) -> datetime | None:
        since = self.arrivals - max(MIN_LIVE, LIVE_PER_VOTER * n)
        floor = clock - tol if clock is not None else None
        newest: dict[str, datetime] = {}  # clock domain (a node, or a global source) -> its newest live mark
        steady: dict[str, datetime] = {}  # ...of its periodic sources
        for key, src in self.sources.items():
            if src.heard > since and (floor is None or src.mark >= floor):
                dom, _, source = key.partition("|")
                if dom not in newest or src.mark > newest[dom]:
                    newest[dom] = src.mark
                if source in PERIODIC and (dom not in steady or src.mark > steady[dom]):
                    steady[dom] = src.mark
        if not steady:  # no periodic source: nothing times out on a node's silence here; the newest stamp
            return max(newest.values()) if newest else None
        if not newest:
            return None
        top = sorted(newest.values(), reverse=True)
        if len(top) < QUORUM or top[0] - top[1] <= tol * LEAD:
            return top[0]
        return top[1]  # the newest is alone that far ahead: the second newest is corroborated by it
