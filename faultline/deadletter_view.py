"""`faultline deadletters`: why records were set aside, by whom, how often, newest first.

Every stage that cannot use a record keeps it as a dead letter (:mod:`common.deadletters`), and the
archive sink writes them to the ``deadletters`` table. A person asks "what is being refused, and
why": this view answers with one row per **source and reason** (the source is the stage that set
the records aside: ``agent``, ``spool``, ``producer``, ``correlator``, ``archive-sink:TOPIC``,
``executor:NAME:TOPIC``), how many, the first and the last time, and the start of the newest
record, newest first. A capture's reasons start with the line (``line 17: not JSON``); the line
number is not part of the reason here, so a thousand lines bad in one way are one row, not a
thousand.

Filters: ``since`` (dead letters at or after it), ``reason`` (a case-insensitive part of the
reason) and ``source`` (a stage, or a stage's prefix before ``:``: ``archive-sink`` is every
topic's sink stage).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from faultline.terminal import Column, make_console, plural, print_table
from sinks.archive.store import Archive

__all__ = ["DeadLetterFilter", "EXAMPLE_CHARS", "deadletter_data", "deadletter_groups", "print_deadletters"]

#: The most of the newest record of a group a row shows.
EXAMPLE_CHARS = 120
_BEGINNING = datetime(1970, 1, 1, tzinfo=UTC)
_LINE_PREFIX = "'^line [0-9]+: '"  # a capture's reasons name the line first (producers/capture/screen.py)


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters to count: at or after ``since``, ``reason`` in the reason, ``source`` the stage."""

    since: datetime | None = None
    reason: str = ""
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"since": self.since, "reason": self.reason or None, "source": self.source or None}


def _where(f: DeadLetterFilter) -> tuple[str, dict[str, Any]]:
    clauses = ["at >= {since:DateTime64(3)}"]
    params: dict[str, Any] = {"since": f.since or _BEGINNING}
    if f.reason:
        clauses.append("positionCaseInsensitiveUTF8(reason, {reason:String}) > 0")
        params["reason"] = f.reason
    if f.source:
        clauses.append("(stage = {source:String} OR startsWith(stage, concat({source:String}, ':')))")
        params["source"] = f.source
    return " AND ".join(clauses), params


def deadletter_groups(archive: Archive, f: DeadLetterFilter | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """The newest ``limit`` groups (source, reason) of the dead letters ``f`` selects, newest first."""
    where, params = _where(f or DeadLetterFilter())
    rows = archive.query(
        "SELECT source, why, count() AS count, min(at) AS first_at, max(at) AS last_at, "
        f"argMax(substringUTF8(raw, 1, {EXAMPLE_CHARS}), at) AS example FROM ("
        f" SELECT stage AS source, replaceRegexpOne(reason, {_LINE_PREFIX}, '') AS why, at, raw"
        f" FROM deadletters FINAL WHERE {where}) "
        "GROUP BY source, why ORDER BY last_at DESC, count DESC, source, why LIMIT {limit:UInt32}",
        {**params, "limit": limit})
    return [{"source": r["source"], "reason": r["why"], "count": int(r["count"]), "first_at": r["first_at"],
             "last_at": r["last_at"], "example": r["example"]} for r in rows]


def deadletter_data(archive: Archive, f: DeadLetterFilter | None = None, limit: int = 50) -> dict[str, Any]:
    """The groups, how many dead letters and groups ``f`` selects in all, and the filter itself."""
    f = f or DeadLetterFilter()
    where, params = _where(f)
    [totals] = archive.query(
        f"SELECT count() AS letters, uniqExact(stage, replaceRegexpOne(reason, {_LINE_PREFIX}, '')) AS groups "
        f"FROM deadletters FINAL WHERE {where}", params)
    return {"dead_letters": int(totals["letters"]), "groups": int(totals["groups"]),
            "reasons": deadletter_groups(archive, f, limit), "filter": f.to_json()}


COLUMNS = [Column("last_at", "last", "time"), Column("last_at", "age", "age"), Column("source"),
           Column("count", kind="number"), Column("reason"), Column("first_at", "first", "time"),
           Column("example")]
"""How a group reads in a table (``status`` shows the same columns)."""


def print_deadletters(data: dict[str, Any], console: Console | None = None, wide: bool = False) -> None:
    c = console or make_console()
    rows = data["reasons"]
    shown = "" if len(rows) == data["groups"] else f", the newest {len(rows)} shown"
    title = (f"Dead letters ({plural(data['dead_letters'], 'record')} set aside for "
             f"{plural(data['groups'], 'reason')}{shown}; newest first)")
    print_table(c, title, rows, COLUMNS, wide=wide)
