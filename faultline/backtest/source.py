"""What a backtest replays: an archive window (with what comes before it), or a capture file.

**An archive window** ``[since, until]`` of one namespace is read in this order:

1. *context*: each node's newest inventory, and the newest ``job_started`` and saved checkpoint of
   every job still running, from before the warm-up (a window seldom holds them itself);
2. *warm-up*: the events of ``[since - warmup, since)``, judged like the rest but not compared, so
   a failure that began just before the window, and the fences and lemon scores of the days before,
   are where they were;
3. the window itself, in ``(ts, id)`` order (:mod:`sinks.archive.history`).

**Retention.** The archive keeps canonical events (every kind but raw telemetry) for as long as the
archive lives, and incidents, commands and results likewise; raw telemetry (NVML samples, agent
heartbeats) it keeps ``ttl_days`` (30 by default) after ingestion. Where a window reaches further
back, that stretch is judged without raw telemetry, by the candidate and the current policy alike:
decisions that rest on discrete events (XIDs, crashes, collectives, the scheduler, the BMC, the
trainer's steps and checkpoints, people's actions) are re-derived exactly; those that need NVML
samples or heartbeats (sustained temperature, ECC and remap counters, a node's silence) cannot be,
and the backtest says so (:class:`Retention`) and marks the differences that may come from it.

**A capture** is screened as ``faultline replay`` screens it and replayed in its own (arrival)
order; its whole span is judged, and ``since``/``until`` only choose what is compared.

**Read again elsewhere.** A source also says how to read the same events again in another process
(:attr:`Source.reader`: :class:`CaptureReader`, :class:`ArchiveReader`, both picklable), so that a
worker of :mod:`.parallel` reads its history itself rather than receiving it: the same file, or the
same archive query with the window, warm-up, raw-telemetry cutoff and context fixed here, so it reads
the same events in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sinks.archive.history import (
    RawRetention,
    Unreadable,
    context_events,
    event_pages,
    raw_retention,
    time_span,
    without_raw,
)
from sinks.archive.store import Archive
from streams.events import Event

__all__ = ["RAW_DEPENDENT", "ArchiveReader", "CaptureReader", "Retention", "Source", "from_archive",
           "from_capture"]

#: Categories a decision of which may rest on raw telemetry (NVML samples, heartbeats), and how.
RAW_DEPENDENT: dict[str, str] = {
    "gpu_thermal": "sustained temperature and slowdown reasons come from NVML samples",
    "gpu_ecc_degradation": "single-bit ECC counters come from NVML samples (XID 92 lines do not)",
    "gpu_memory_fault": "double-bit counters and XID 63's pending-remap confirmation come from NVML samples",
    "node_down": "a node's silence is the absence of its heartbeats",
    "node_hardware_fault": "a silent node with a hardware SEL needs the heartbeats that stopped",
    "rack_outage": "a rack's silence is the absence of its nodes' heartbeats",
}


@dataclass
class Retention:
    """What the archive's raw-telemetry retention means for this window."""

    raw: RawRetention
    events_without_raw: int = 0  # canonical events of the window older than the raw telemetry kept
    first: datetime | None = None
    last: datetime | None = None

    @property
    def reaches_past(self) -> bool:
        return self.events_without_raw > 0

    def note(self) -> str:
        kinds = ", ".join(self.raw.kinds)
        kept = (f"raw telemetry ({kinds}) is kept {self.raw.ttl_days} days after ingestion, canonical events "
                "for as long as the archive")
        if not self.reaches_past:
            return f"{kept}: this window is within it"
        return (f"{kept}: this window reaches past it, so {self.first:%Y-%m-%d %H:%M}Z to {self.last:%Y-%m-%d %H:%M}Z "
                f"is judged without raw telemetry under both policies. Decisions on discrete events are "
                f"re-derived exactly; those that need NVML samples or heartbeats ({', '.join(sorted(RAW_DEPENDENT))}) "
                "cannot be, and the differences of that stretch are marked 'raw telemetry expired'")

    def marks(self, opened_at: datetime) -> bool:
        """Whether an incident opened where raw telemetry had expired (a difference there may come from
        that, against live, rather than from the policy; and neither side could judge what needs it)."""
        return self.reaches_past and self.last is not None and opened_at <= self.last + timedelta(hours=1)


@dataclass
class Source:
    """Events to replay, in order, and what is compared: decisions made in ``[since, until]`` (None: open)."""

    describe: str
    events: Iterator[Event]
    since: datetime | None
    until: datetime | None
    read_from: datetime | None = None  # the warm-up's start (None: the beginning)
    retention: Retention | None = None
    unreadable: Unreadable = field(default_factory=Unreadable)
    bad_lines: int = 0  # a capture's lines the screen refused (see `faultline replay` for why)
    context: int = 0  # events read from before the warm-up
    reader: CaptureReader | ArchiveReader | None = None  # how another process reads these events (None: it cannot)


@dataclass(frozen=True)
class CaptureReader:
    """A capture's events, screened line by line; the lines the screen refuses are counted in
    ``src.bad_lines``."""

    path: Path

    def events(self, src: Source) -> Iterator[Event]:
        from producers.capture.reader import read_capture_lines
        from producers.capture.screen import Accepted, CaptureScreen

        with self.path.open("rb") as f:
            for verdict in CaptureScreen().screen(read_capture_lines(f)):
                if isinstance(verdict, Accepted):
                    yield from verdict.events
                else:
                    src.bad_lines += 1


@dataclass(frozen=True)
class ArchiveReader:
    """An archive window's events: the context (read once, before, and carried along), then the events
    of ``[read_from, until]`` less the raw telemetry ingested before ``cutoff``, in ``(ts, id)`` order;
    rows that are not events are counted in ``src.unreadable``. Read through ``archive`` when given,
    else through the archive at ``url`` opened here (for a chDB directory: through the process that
    owns it), with the raw-telemetry TTL it has (``ttl_days``: opening sets it, and must not change it)."""

    url: str
    namespace: str
    read_from: datetime
    until: datetime
    cutoff: datetime
    ttl_days: int
    context: tuple[Event, ...] = ()

    def events(self, src: Source, archive: Archive | None = None) -> Iterator[Event]:
        yield from self.context
        if archive is not None:
            for page in event_pages(archive, self.read_from, self.until, self.cutoff, src.unreadable):
                yield from page
            return
        with Archive.open(self.url, self.namespace, live=self.namespace, create=False,
                          raw_ttl_days=self.ttl_days) as own:
            for page in event_pages(own, self.read_from, self.until, self.cutoff, src.unreadable):
                yield from page


def from_archive(archive: Archive, since: datetime | None, until: datetime | None, warmup: timedelta,
                 now: datetime | None = None) -> Source:
    """An archive namespace's window (None: from its first event / to its last)."""
    span = time_span(archive)
    raw = raw_retention(archive, now)
    if span is None:
        return Source(f"archive namespace {archive.namespace} (no events)", iter(()), since, until,
                      retention=Retention(raw))
    first, last = span
    lo = since if since is not None else first
    hi = until if until is not None else last
    if lo > last or hi < first:
        return Source(f"archive namespace {archive.namespace} (no events in the window: they span "
                      f"{first:%Y-%m-%d %H:%M}Z to {last:%Y-%m-%d %H:%M}Z)", iter(()), since, until,
                      retention=Retention(raw))
    read_from = max(first, lo - warmup) if lo > first else first
    n, a, b = without_raw(archive, read_from, hi, raw.cutoff)
    # an open end compares everything decided on the window's evidence, the last settles included
    src = Source(f"archive namespace {archive.namespace}", iter(()), lo, until, read_from, Retention(raw, n, a, b))
    context = context_events(archive, read_from, src.unreadable) if read_from > first else []
    src.context = len(context)
    src.reader = ArchiveReader(archive.url, archive.namespace, read_from, hi, raw.cutoff, raw.ttl_days,
                               tuple(context))
    src.events = src.reader.events(src, archive)
    return src


def from_capture(path: Path, since: datetime | None, until: datetime | None) -> Source:
    """A capture file, screened line by line (bad lines refused and counted), in its own order."""
    src = Source(f"capture {path}", iter(()), since, until, reader=CaptureReader(path))
    src.events = CaptureReader(path).events(src)
    return src
