"""The backtest on several cores: each policy side judged in a worker process of its own.

A backtest is a pure function of (cell, policy, history): an engine that starts empty and reads the
same events in the same order makes the same decisions, with the same ids, in whatever process it
runs. So the work splits into *units*, one per (policy side, cell), each judged whole by one engine
in one worker, and nothing else changes:

* **The unit is never smaller than a cell.** A cell's jobs are coupled -- the blast-radius caps, the
  restart gate and rate limit, the quarantine ledger and the lemon scores all span it -- so a cell is
  judged by one engine from its first event to its last, never split by job or by time.
* **A backtest's source is one cell today.** An event does not say its cell (the producers put it
  in the Kafka key, :mod:`streams.cells`), the archive does not keep that key, and a backtest has
  always judged a namespace's (or a capture's) events with one engine per policy. Splitting them by
  a guessed cell would change decisions. So the units are the policy sides: two against the current
  policy (the ceiling is 2x), one against live (judged here, in-process).
* **Each worker reads its history itself** (:attr:`~faultline.backtest.source.Source.reader`): the
  same capture file, or the same archive query with the window, warm-up, raw-telemetry cutoff and
  context fixed by the parent, so the events are not pickled across and the reads run in parallel
  too. A source that cannot be read again is judged in-process.
* **The merge is fixed, not first-come**: the sides' decisions are put back in the order of the
  policies given, whichever worker finishes first; what does not depend on the policy (the XIDs
  read, the jobs' timeline, the lines refused and rows unreadable) is taken from the first unit
  alone. The output is byte for byte that of the one-process pass (tests/faultline/backtest/).
* **Workers are spawned, not forked.** The parent may own the archive's embedded chDB engine (C++
  threads, an HTTP endpoint it serves to other processes) and holds the process's one connection
  per archive target (:mod:`sinks.archive.connection`): a forked child would inherit that state,
  locks perhaps held by threads it does not have, and believe it owns the directory. A spawned one
  starts clean and reaches the archive through its owner, as any other faultline command does.

The timing: ``read_s`` and ``engine_s`` add up over the workers (each worker reads the whole
history), so with several workers they can exceed ``total_s``; ``events_per_s_per_worker`` is the
events judged under every policy per second of the whole backtest, divided by the workers used --
the rate to multiply by cores.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from correlators.policy import Policy
from faultline.backtest.judge import Decided, Judged, judge
from faultline.backtest.source import ArchiveReader, CaptureReader, Source
from faultline.lost_hours import Timeline
from sinks.archive.history import Unreadable

__all__ = ["Unit", "judge_units", "units_of", "workers_for"]


@dataclass(frozen=True)
class Unit:
    """One engine's whole work: a policy side (its index among the policies given) over one cell."""

    side: int
    cell: str = "all"  # every event of the source: one cell, as the one-process pass judges it
    facts: bool = False  # also return what does not depend on the policy (the first unit only)


@dataclass
class _Done:
    """What a worker hands back for its unit."""

    unit: Unit
    decided: Decided
    events: int
    read_s: float
    engine_s: float
    xids: dict[str, int] = field(default_factory=dict)
    timeline: Timeline = field(default_factory=Timeline)
    bad_lines: int = 0
    unreadable: Unreadable = field(default_factory=Unreadable)


def units_of(policies: int) -> list[Unit]:
    """The units of a backtest of ``policies`` sides over a source of one cell, in merge order."""
    return [Unit(side, facts=side == 0) for side in range(policies)]


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def workers_for(requested: int | None, units: int) -> int:
    """Worker processes for ``units`` units: ``requested`` (None: every CPU), never more than the units,
    never fewer than 1 (1: judged in this process, in one pass, as before)."""
    return max(1, min(requested if requested is not None else cpus(), units))


def _judge_unit(unit: Unit, reader: CaptureReader | ArchiveReader, policy: Policy, since: datetime | None,
                until: datetime | None) -> _Done:
    """In a worker: read the source again and judge it under one policy."""
    counts = Source("", iter(()), since, until)
    j = judge(reader.events(counts), [policy], since, until)
    done = _Done(unit, j.decided[0], j.events, j.read_s, j.engine_s)
    if unit.facts:
        done.xids, done.timeline = j.xids, j.timeline
        done.bad_lines, done.unreadable = counts.bad_lines, counts.unreadable
    return done


def judge_units(source: Source, policies: Sequence[Policy], workers: int | None) -> tuple[Judged, int]:
    """``source`` judged under each policy (:func:`~faultline.backtest.judge.judge`'s result, the same
    decisions in the same order), on up to ``workers`` processes (None: one per CPU); and the workers used."""
    units = units_of(len(policies))
    used = workers_for(workers, len(units))
    if used == 1 or source.reader is None:
        return judge(source.events, policies, source.since, source.until), 1
    reader = source.reader
    with ProcessPoolExecutor(used, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_judge_unit, u, reader, policies[u.side], source.since, source.until) for u in units]
        done = [f.result() for f in futures]  # in unit order, not in the order they finish
    first = done[0]
    if any(d.events != first.events for d in done):
        raise RuntimeError(f"the workers read different histories: {[d.events for d in done]} events")
    source.bad_lines += first.bad_lines
    if first.unreadable.rows:
        u = source.unreadable  # the context's unreadable rows were counted here, the window's in the worker
        u.rows += first.unreadable.rows
        u.first = u.first or first.unreadable.first
        u.ids.extend(first.unreadable.ids[:max(0, 20 - len(u.ids))])
    judged = Judged([d.decided for d in done], first.xids, first.events, sum(d.read_s for d in done),
                    sum(d.engine_s for d in done), first.timeline)
    return judged, used
