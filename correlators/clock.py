"""The cell's clock: each source keeps its own watermark, and no single source can move the clock far.

Event time is what the engine judges in, but a source's stamps are only as good as its clock: one
node whose RTC is wrong, or whose NTP stepped it ten minutes ahead and back, must not make every
other node's silence fall due, nor be judged silent itself because its last heartbeat lies in the
future; nor may one kind of source whose clock runs ahead on every node (a collector in a container
of its own). The rule, over (source key, event time, arrival order) and nothing else:

* **Sources.** A node-bound source is keyed ``node|source`` (``n7|node_agent``), a global one (the
  scheduler) by its source name. Only nodes the cell knows (its inventory or the scheduler named
  them) are sources; a line of an unknown node is judged, bounded and screened like any other, but
  no mark of it is kept. Each source's watermark is its newest stamp (its latest, when it stepped
  back by more than the reach, below: a clock stepped back is that source's time again).
* **The vote.** The voters are the nodes' agents (their heartbeats keep a cadence whatever happens;
  in a cell where no agent was ever heard, NVML's), each its node's *clock domain*, and the global
  sources, each a domain of its own. A voter is live until another voter has spoken ``PASSES`` (3)
  times since it last spoke (lines of one voter stamped within ``BURST`` of its last turn are that
  turn: a node's GPUs sampled at once): arrival order is the one witness every source shares, and it
  tells a dead voter (the others go on speaking, it does not) from one that lags or leads (it speaks
  in turn with the rest, whatever its stamps). A count of turns, not of rounds of every voter: when
  all but one voter stop (a rack of a small cell down), the last one's third line retires them, so
  the clock follows it within three of its cadences, not after rounds sized for a cell that is gone.
  The scheduler, which speaks rarely, is live only around its own lines. With three live domains or more, the
  vote is the newest domain's mark if the second newest is within the reach of it, else the second
  newest's: one ahead of every other is alone and outvoted, and a gap the whole cell crosses is
  followed at its second witness; once outvoted, a domain stays so until within half the tolerance
  of the second (one hovering at the reach must not move the vote back and forth). With one or two there is no majority to ask and the vote is the
  newest (a two-node cell is protected against one node's jump only while a third domain, the
  scheduler, is live). No voter live (schedulers and trainers only): no vote, the newest stamp is
  the clock, as nothing is timed on silence there.
* **The reach.** Between two heartbeats the world goes on, so a line may be stamped up to one cadence
  of the voters past the vote. The *reach* is that cadence (the lower median of the live voters' last
  gaps: one voter's jump is no cadence) plus half the tolerance, never less than the tolerance; until
  most voters have shown a gap, ``COLD`` tolerances (no silence is judged before a node's cadence is
  known either, :mod:`correlators.rules.liveness`). A line moves the clock to its own stamp; one
  stamped past the vote by more than the reach moves nothing, so a source of any kind, on one node or
  on all, ahead by more than that moves the clock no further, and a skew within it can time nobody
  out (a node is silent only past ``silence_factor`` (3) cadences). The wall clock bounds nothing
  here: what a live worker's ticks decided a successor could not replay from the log. The cell
  clock is never moved back.
* **The screen.** A line past that bound is *screened*: judged as evidence, but at the voters' time
  (the vote), where it arrived in the cell's time: never at a clock another line
  pushed ahead, never moving the clock. So is a line more than the reach behind the clock from a source
  whose newest stamp is behind too (placed at the clock); a late line of a source in step is judged at
  its own time, as every late line is. A source once screened stays so until back within half the
  tolerance (one hovering at a bound must not alternate between two clocks). What learns a cadence
  from a source's gaps reads its own stamps (``stamp``, the line's as its source wrote it): a placed
  line's gap is the cell's, not the source's (:mod:`correlators.nvml_presence`). A heartbeat stamped
  ahead of the cell clock counts from the cell clock (:mod:`correlators.rules.liveness`): a node whose
  clock leads is judged silent no later than one in step. The skew is noted on its source, counted for
  the cell, and the sources screened lately are a metric (:meth:`CellClock.skewed`, alert
  ``SourceClockSkewed``).
* **Lagging sources.** A source behind the cell by less than the reach (a trainer 20 s slow) is never
  screened: its stamps are judged as written. But it *lags*: ``LAGGING`` (2) of its last ``LAG_LINES``
  (8) lines arrived with the vote more than ``LAG`` (1 s) past their stamps (:meth:`CellClock.lags`) --
  the voters' time, not the clock, which a source ahead within the reach (NVML 45 s fast) may lead,
  and every source in step would then look behind.
  Where order against a failure decides (is a save before it? :mod:`correlators.checkpoints`), such a
  line is also dated by the clock it arrived at: a save made 4 s after an XID by a trainer 20 s slow is
  stamped 16 s before it, and only its arrival after the XID tells. One late line is not a lagging source.

The vote is recomputed every ``max(1, sources // 16)`` arrivals (a fleet of hundreds of sources
would otherwise sort them on every line). Everything here is plain data in
:class:`~correlators.state.EngineState`, so a snapshot carries it and a takeover decides byte for
byte as the engine it replaces.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from correlators.state_fields import Instant

__all__ = ["CellClock", "SourceMark", "source_key"]

MIN_LIVE = 32  # arrivals a source counts as screened lately, at least...
LIVE_PER_VOTER = 4  # ...or this many per source known
PASSES = 3  # a voter is dead once another voter has spoken this many times since it last spoke
BURST = timedelta(seconds=0.5)  # lines of a voter stamped this close to its last turn are that turn (NVML's GPUs)
RECOMPUTE_PER = 16  # the vote is recomputed every sources // this arrivals
LEAD = 0.5  # the reach is the voters' cadence plus this share of the tolerance (and never under the tolerance)
QUORUM = 3  # live clock domains needed before a lone newest one is outvoted
COLD = 6  # until the voters' cadence is known, it is taken as this many tolerances (3 minutes at 30 s)
LAG = timedelta(seconds=1)  # a line stamped this far behind the vote when it arrived arrived behind the cell...
LAG_LINES, LAGGING = 8, 2  # ...and a source with this many of its last LAG_LINES lines so runs behind the cell


def source_key(node: str | None, source: str) -> str:
    """The key a source is known by: ``node|source`` for a node-bound one, the source name otherwise."""
    return f"{node}|{source}" if node else source


@dataclass
class SourceMark:
    """One source's watermark, when it was last heard (arrival number), its last gap, and its skew."""

    mark: Instant
    heard: int = 0
    heard_before: int = 0  # the arrival of its line before (was that one screened?)
    spoke: int = 0  # a voter's: the turn (CellClock.voter_lines) it last spoke at
    said: Instant | None = None  # a voter's: its stamp when it last spoke (a burst of one moment speaks once)
    recent: list[int] = field(default_factory=list)  # a voter's: ``spoke`` of its last PASSES times
    gap_s: float = 0.0  # between its last two marks: a voter's cadence
    screened: int = 0
    skew_s: float = 0.0  # when last screened
    last_screened: int = 0  # the arrival at which a line of it was last screened
    outvoted: bool = False  # a voter alone ahead of the others: its mark is not the vote
    behind: int = 0  # its last ``LAG_LINES`` lines, a bit each (newest lowest): arrived ``LAG`` behind the vote


@dataclass
class CellClock:
    """The sources' watermarks and the arrivals counted; :meth:`arrive` gives the clock and an event's place."""

    sources: dict[str, SourceMark] = field(default_factory=dict)
    arrivals: int = 0
    voter_lines: int = 0  # times voters (and global sources) spoke: the voters' own count of turns
    passed: int = 0  # the newest turn after which some voter spoke PASSES times: a voter not heard since is dead
    agents: bool = False  # a node agent was heard: from then on, only agents vote among the nodes' sources
    voters: list[str] = field(default_factory=list)  # the keys of the sources that vote, as first heard
    vote: Instant | None = None  # the voters' time, recomputed every sources // RECOMPUTE_PER arrivals
    cadence_s: float = 0.0  # the voters' cadence (lower median of their last gaps)
    screened: int = 0  # lines screened in this cell
    stamp: Instant | None = None  # the stamp of the line being judged, as its source wrote it (screened or not)
    worst_skew_s: float = 0.0  # the largest skew screened (signed, by magnitude)
    tolerance_s: float = 30.0  # the policy's, as the last line arrived with it

    def reach(self, tolerance_s: float) -> timedelta:
        """How far past the vote a stamp may move the clock: one cadence of the voters and half the
        tolerance, never less than the tolerance (a skew within it can time nobody out); ``COLD`` tolerances
        while no voter's cadence is known yet."""
        cadence = self.cadence_s if self.cadence_s > 0 else COLD * tolerance_s
        return timedelta(seconds=max(tolerance_s, cadence + LEAD * tolerance_s))

    def arrive(self, key: str | None, ts: datetime, clock: datetime | None,
               tolerance_s: float) -> tuple[datetime, datetime]:
        """One event of source ``key`` (None: a node the cell does not know) stamped ``ts`` arrives while the
        cell clock reads ``clock``: return the clock to advance to and the time to judge the event at.

        A source once screened stays screened until its lines are back within half the tolerance of the
        vote (ahead) or of the clock (behind): one hovering at a bound must not alternate between its own time
        and the cell's, which would mix two clocks in one sequence (its heartbeats' cadence, its GPUs' samples)."""
        self.arrivals += 1
        self.tolerance_s, self.stamp = tolerance_s, ts
        tol = timedelta(seconds=tolerance_s)
        reach = self.reach(tolerance_s)
        if key is not None:
            self._heard(key, ts, reach)
        src = None if key is None else self.sources[key]
        was = 0.0 if src is None or src.last_screened != src.heard_before or not src.heard_before else src.skew_s
        vote = self._voted(reach)
        if src is not None:  # behind the voters' time, not the clock: a source ahead within the reach moves that
            ref = vote if vote is not None else clock
            src.behind = ((src.behind << 1) | (ref is not None and ref - ts > LAG)) & ((1 << LAG_LINES) - 1)
        reach = self.reach(tolerance_s)  # the vote may have learned the cadence
        ahead = tol * LEAD if was > 0 else reach
        if vote is not None and ts > vote + ahead:  # ahead of the vote by more than the reach: it moves nothing
            self._note(key, (ts - vote).total_seconds())
            return (vote if clock is None or vote > clock else clock), vote  # judged at the voters' time
        else:
            now = ts if clock is None or ts > clock else clock
            behind = tol * LEAD if was < 0 else reach
            if src is None or now - ts <= behind or now - src.mark <= behind:
                return now, ts  # in step; or a late line of a source whose newest stamp is in step
        self._note(key, (ts - now).total_seconds())
        return now, now

    def lags(self, key: str | None) -> bool:
        """Whether source ``key`` runs behind the cell: ``LAGGING`` of its last ``LAG_LINES`` lines arrived with the
        vote (the clock where no voter is live) already ``LAG`` past their stamps. Its clock is behind (a trainer
        20 s slow, within the tolerance and so never screened), or its lines come late as a rule: either way,
        when the cell heard of a line of it says more of when it happened than its stamp does. One late line is
        not a lagging source."""
        src = None if key is None else self.sources.get(key)
        return src is not None and src.behind.bit_count() >= LAGGING

    def screened_now(self, key: str | None) -> bool:
        """Whether the line of ``key`` that arrived last was screened (judged at the cell's time it arrived)."""
        src = None if key is None else self.sources.get(key)
        return src is not None and src.screened > 0 and src.last_screened == src.heard

    def skewed(self, most: int = 20) -> list[tuple[str, float]]:
        """The sources whose clocks disagree now (a line screened within the live window), as (key, skew s),
        largest first, at most ``most`` (a gauge's series stay bounded)."""
        since = self.arrivals - max(MIN_LIVE, LIVE_PER_VOTER * len(self.sources))
        now = [(k, s.skew_s) for k, s in self.sources.items() if s.screened and s.last_screened > since]
        return sorted(now, key=lambda ks: (-abs(ks[1]), ks[0]))[:most]

    def _heard(self, key: str, ts: datetime, reach: timedelta) -> None:
        src = self.sources.get(key)
        if src is None:
            src = self.sources[key] = SourceMark(ts, self.arrivals)
            self.vote = None  # a new source: vote now
            if self._votes(key):
                self.voters.append(key)
        elif ts > src.mark:
            src.gap_s = (ts - src.mark).total_seconds()
            src.mark = ts
        elif src.mark - ts > reach:
            src.mark = ts  # stepped back: its own time again (a line only late is not back by that much)
        src.heard_before, src.heard = src.heard, self.arrivals
        if self._votes(key) and (src.said is None or abs(ts - src.said) > BURST):
            self._spoke(src, ts)

    def _spoke(self, src: SourceMark, ts: datetime) -> None:
        """A voter speaks: a new turn. Once it has spoken PASSES times since another last did, that one is dead
        (its node or agent stopped; a voter whose clock is only wrong goes on speaking in turn with the rest)."""
        self.voter_lines += 1
        src.spoke, src.said = self.voter_lines, ts
        src.recent.append(self.voter_lines)
        if len(src.recent) > PASSES:
            del src.recent[0]
        if len(src.recent) == PASSES and src.recent[0] > self.passed:
            self.passed = src.recent[0]

    def _note(self, key: str | None, skew: float) -> None:
        self.screened += 1
        if abs(skew) > abs(self.worst_skew_s):
            self.worst_skew_s = skew
        if key is not None:
            src = self.sources[key]
            src.screened += 1
            src.skew_s = skew
            src.last_screened = self.arrivals

    def _voted(self, reach: timedelta) -> datetime | None:
        every = max(1, len(self.sources) // RECOMPUTE_PER)
        if self.vote is None or self.arrivals % every == 0:
            self.vote = self._vote(reach)
        return self.vote

    def _votes(self, key: str) -> bool:
        """Whether a source votes: a node's agent, or its NVML in a cell where no agent was ever heard; or a
        global source (the scheduler: a clock domain of its own)."""
        kind = key.partition("|")[2]
        if kind == "node_agent" and not self.agents:
            self.agents = True  # from now on NVML votes no more
            self.voters = [k for k in self.voters if not k.endswith("|nvml")]
        return not kind or kind == "node_agent" or (kind == "nvml" and not self.agents)

    def _vote(self, reach: timedelta) -> datetime | None:
        live = [v for k in self.voters if (v := self.sources[k]).spoke >= self.passed]  # a dead voter drops out
        gaps = sorted(v.gap_s for k in self.voters if "|" in k and (v := self.sources[k]).spoke >= self.passed)
        if not gaps:
            return None  # no voter live: nothing times out on silence here, the newest stamp is the clock
        self.cadence_s = gaps[(len(gaps) - 1) // 2]  # the lower median: one voter's jump is not a cadence
        top = heapq.nlargest(2, live, key=lambda v: v.mark)
        if len(live) < QUORUM:
            return top[0].mark
        first, second = top
        was = first.outvoted
        for v in live:
            v.outvoted = False
        # outvoted once, a domain stays so until within half the tolerance: one hovering at the reach must not
        # move the vote back and forth (every line of it would then be judged by two clocks in turn)
        first.outvoted = first.mark - second.mark > (LEAD * timedelta(seconds=self.tolerance_s) if was else reach)
        return second.mark if first.outvoted else first.mark  # the second newest is corroborated by the newest
