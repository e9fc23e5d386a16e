"""The archived history, read back for a backtest: events in a deterministic order, and what was decided.

A backtest (``faultline backtest``) replays a window of the archive through the correlator. What
this module promises it:

* **Order.** Events come in event-time order, ties broken by event id: ``ORDER BY ts, id`` over
  ``events FINAL`` (a batch delivered twice counts once). The archive keeps no arrival order, so
  this is the one order a window has: the same window gives the same events, in the same order,
  every time. (Live, the correlator saw arrival order; events of the same millisecond may have
  come the other way round.)
* **Pages.** The window is read in pages of whole hours of at most about ``page_rows`` events
  (one hour busier than that is one page), so a month of a large fleet never sits in memory at once.
* **Retention.** Raw telemetry (:data:`~sinks.archive.migrations.RAW_TELEMETRY_KINDS`: NVML
  samples and agent heartbeats) expires ``ttl_days`` after ingestion, canonical events never.
  ClickHouse deletes expired rows when it merges, at a time of its choosing, so raw telemetry
  ingested before the retention cutoff is left out here whether or not it is still on disk: a
  window reads the same before and after a merge. :func:`without_raw` says which stretch of a
  window was judged without it.
* **Fail closed.** Rows are data: each page is validated as canonical events
  (:class:`~streams.events.Event`); a row that is not one is skipped and counted, never run.

Everything goes through :meth:`~sinks.archive.store.Archive.query` (time bounds as epoch
milliseconds, no values spliced into SQL).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import TypeAdapter, ValidationError

from sinks.archive.migrations import DEFAULT_RAW_TTL_DAYS, RAW_TELEMETRY_KINDS
from sinks.archive.store import Archive
from streams.decisions import Command, Incident
from streams.events import Event

__all__ = ["PAGE_ROWS", "RawRetention", "Unreadable", "context_events", "decided", "event_pages",
           "raw_retention", "time_span", "without_raw"]

PAGE_ROWS = 100_000
_EVENTS = TypeAdapter(list[Event])
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TTL_DAYS = re.compile(r"toIntervalDay\((\d+)\)")
_RAW = "(" + ", ".join(f"'{k}'" for k in RAW_TELEMETRY_KINDS) + ")"
# one event as the canonical JSON the contract's Event model reads (body as archived)
_AS_JSON = ("concat('{\"id\":', toJSONString(id), ',\"ts\":\"', formatDateTime(ts, '%Y-%m-%dT%H:%i:%S.%f', 'UTC'), "
            "'Z\",\"source\":', toJSONString(source), ',\"node\":', if(isNull(node), 'null', toJSONString("
            "assumeNotNull(node))), ',\"job\":', if(isNull(job), 'null', toJSONString(assumeNotNull(job))), "
            "',\"rank\":', if(isNull(rank), 'null', toString(assumeNotNull(rank))), ',\"body\":', body, '}') AS j")
_KEPT = f"(kind NOT IN {_RAW} OR ingested_at >= fromUnixTimestamp64Milli({{cutoff:Int64}}, 'UTC'))"


_LAST = datetime(2299, 12, 31, 23, 59, 59, tzinfo=UTC)  # DateTime64(3)'s last year


def _ms(ts: datetime) -> int:
    """Epoch milliseconds, within what DateTime64(3) holds (``datetime.max`` reads as its end)."""
    return (min(max(ts.astimezone(UTC), _EPOCH), _LAST) - _EPOCH) // timedelta(milliseconds=1)


@dataclass(frozen=True)
class RawRetention:
    """How long raw telemetry is kept (days after ingestion), and the cutoff that makes for now."""

    ttl_days: int
    cutoff: datetime
    kinds: tuple[str, ...] = RAW_TELEMETRY_KINDS


@dataclass
class Unreadable:
    """Archived rows that were not canonical events (skipped): how many, and the first reason."""

    rows: int = 0
    first: str = ""
    ids: list[str] = field(default_factory=list)


def raw_retention(archive: Archive, now: datetime | None = None) -> RawRetention:
    """The events table's raw-telemetry TTL (as set: :func:`~sinks.archive.migrations.set_raw_ttl`)."""
    rows = archive.query("SELECT engine_full FROM system.tables WHERE database = currentDatabase() "
                         "AND name = 'events'")
    found = _TTL_DAYS.search(str(rows[0]["engine_full"])) if rows else None
    days = int(found.group(1)) if found else DEFAULT_RAW_TTL_DAYS
    return RawRetention(days, (now or datetime.now(UTC)) - timedelta(days=days))


def time_span(archive: Archive) -> tuple[datetime, datetime] | None:
    """The event time of the oldest and the newest archived event (None: no events)."""
    row = archive.query("SELECT count() AS n, min(ts) AS first, max(ts) AS last FROM events")[0]
    return (row["first"], row["last"]) if row["n"] else None


def _params(since: datetime, until: datetime, cutoff: datetime) -> dict[str, Any]:
    return {"since": _ms(since), "until": _ms(until), "cutoff": _ms(cutoff)}


_WINDOW = ("ts >= fromUnixTimestamp64Milli({since:Int64}, 'UTC') "
           "AND ts <= fromUnixTimestamp64Milli({until:Int64}, 'UTC')")


def event_pages(archive: Archive, since: datetime, until: datetime, cutoff: datetime,
                unreadable: Unreadable | None = None, page_rows: int = PAGE_ROWS) -> Iterator[list[Event]]:
    """The events of ``[since, until]`` in ``(ts, id)`` order, page by page; raw telemetry ingested before
    ``cutoff`` left out; rows that are not events skipped (counted in ``unreadable``)."""
    hours = archive.query(f"SELECT toStartOfHour(ts) AS h, count() AS n FROM events WHERE {_WINDOW} AND {_KEPT} "
                          "GROUP BY h ORDER BY h", _params(since, until, cutoff))
    pages: list[tuple[datetime, datetime]] = []
    rows = 0
    for hour in hours:
        start = hour["h"].replace(tzinfo=UTC) if hour["h"].tzinfo is None else hour["h"]
        if pages and rows + hour["n"] <= page_rows:
            pages[-1] = (pages[-1][0], start + timedelta(hours=1))
            rows += hour["n"]
        else:
            pages.append((start, start + timedelta(hours=1)))
            rows = hour["n"]
    for first, end in pages:
        lo, hi = max(first, since), min(end - timedelta(milliseconds=1), until)
        found = archive.query(f"SELECT {_AS_JSON}, id FROM events FINAL WHERE {_WINDOW} AND {_KEPT} ORDER BY ts, id",
                              _params(lo, hi, cutoff))
        yield _decode(found, unreadable if unreadable is not None else Unreadable())


def _decode(rows: list[dict[str, Any]], unreadable: Unreadable) -> list[Event]:
    """One page as events: validated at once, or row by row when a row is not an event."""
    try:
        return _EVENTS.validate_json("[" + ",".join(r["j"] for r in rows) + "]")
    except (ValidationError, TypeError):
        pass
    out: list[Event] = []
    for r in rows:
        try:
            out.append(Event.model_validate_json(r["j"]))
        except (ValidationError, TypeError) as exc:
            unreadable.rows += 1
            unreadable.first = unreadable.first or f"event {r['id']}: {str(exc).splitlines()[0]}"
            if len(unreadable.ids) < 20:
                unreadable.ids.append(str(r["id"]))
    return out


def context_events(archive: Archive, before: datetime, unreadable: Unreadable | None = None) -> list[Event]:
    """What the correlator must know of the time before ``before`` to judge what comes after: each node's
    newest inventory, the newest ``job_started`` of every job still running then, and that run's newest
    saved checkpoint; in ``(ts, id)`` order. (Inventory is sent when hardware changes, and a job may run
    for weeks: a window's own events seldom hold them.)"""
    p = {"before": _ms(before)}
    earlier = "ts < fromUnixTimestamp64Milli({before:Int64}, 'UTC')"
    rows = archive.query(f"""
        WITH runs AS (
            SELECT job, argMax(id, (ts, id)) AS started, max(ts) AS started_at
            FROM events FINAL WHERE kind = 'job_started' AND job IS NOT NULL AND {earlier} GROUP BY job
        ),
        ends AS (
            SELECT job, max(ts) AS ended_at
            FROM events FINAL WHERE kind = 'job_ended' AND job IS NOT NULL AND {earlier} GROUP BY job
        ),
        running AS (
            SELECT r.job AS job, r.started AS started, r.started_at AS started_at
            FROM runs AS r LEFT JOIN ends AS e ON e.job = r.job
            WHERE e.job IS NULL OR e.ended_at < r.started_at
        ),
        wanted AS (
            SELECT argMax(id, (ts, id)) AS id FROM events FINAL
            WHERE kind = 'inventory' AND node IS NOT NULL AND {earlier} GROUP BY node
            UNION ALL SELECT started FROM running
            UNION ALL
            SELECT argMax(e.id, (e.ts, e.id)) FROM events AS e FINAL INNER JOIN running AS r ON e.job = r.job
            WHERE e.kind = 'checkpoint_saved' AND e.ts >= r.started_at AND e.{earlier} GROUP BY e.job
        )
        SELECT {_AS_JSON}, id FROM events FINAL WHERE id IN (SELECT id FROM wanted) ORDER BY ts, id
    """, p)
    return _decode(rows, unreadable if unreadable is not None else Unreadable())


def without_raw(archive: Archive, since: datetime, until: datetime, cutoff: datetime
                ) -> tuple[int, datetime | None, datetime | None]:
    """Canonical events of the window ingested before the raw-telemetry cutoff: how many, the first and the
    last event time. Where there are some, the telemetry archived with them has expired (or is read as
    if it had): that stretch is judged without NVML samples and heartbeats."""
    row = archive.query(
        f"SELECT count() AS n, min(ts) AS first, max(ts) AS last FROM events WHERE {_WINDOW} "
        f"AND kind NOT IN {_RAW} AND ingested_at < fromUnixTimestamp64Milli({{cutoff:Int64}}, 'UTC')",
        _params(since, until, cutoff))[0]
    return (int(row["n"]), row["first"], row["last"]) if row["n"] else (0, None, None)


def decided(archive: Archive, since: datetime, until: datetime) -> tuple[list[Incident], list[Command]]:
    """What the live correlator decided in the window: every command issued in it, and the latest version
    of every incident opened in it or served by one of those commands (as the models they were published
    as; the latter may have opened before the window)."""
    p = {"since": _ms(since), "until": _ms(until)}
    at = ("BETWEEN fromUnixTimestamp64Milli({since:Int64}, 'UTC') "
          "AND fromUnixTimestamp64Milli({until:Int64}, 'UTC')")
    commands = [Command.model_validate_json(r["payload"]) for r in archive.query(
        f"SELECT payload FROM commands FINAL WHERE issued_at {at} ORDER BY issued_at, id", p)]
    incidents = [Incident.model_validate_json(r["payload"]) for r in archive.query(
        f"SELECT payload FROM incidents_latest WHERE opened_at {at} OR id IN (SELECT incident FROM commands FINAL "
        f"WHERE issued_at {at}) ORDER BY opened_at, id", p)]
    return incidents, commands
