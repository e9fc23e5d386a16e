"""``faultline report`` for people: every section of :mod:`sinks.report` as a table.

The window reads as what it is ("every incident in the archive" without ``--since``, not
1970 → 2299); fractions read as percentages (:data:`sinks.report.PERCENT_COLUMNS`); a trend
with too few saves shows no figures; times are UTC. At a terminal the tables are rich; in a
pipe they are plain aligned lines (:func:`faultline.terminal.print_table`).
"""

from __future__ import annotations

from rich.console import Console

from faultline.terminal import Column, Kind, human_time, make_console, print_table
from sinks.report import PERCENT_COLUMNS, SECTIONS, Report, Section

__all__ = ["render_report", "window_text"]


def window_text(report: Report) -> str:
    """``every incident in the archive``, ``incidents opened since 2026-02-28 00:00:00Z``, ..."""
    if report.since is None and report.until is None:
        return "every incident in the archive (no --since)"
    since = f"since {human_time(report.since)}" if report.since else ""
    until = f"until {human_time(report.until)}" if report.until else ""
    return "incidents opened " + " ".join(x for x in (since, until) if x)


def _kind(column: str, rows: list[dict[str, object]]) -> Kind:
    if column in PERCENT_COLUMNS:
        return "percent"
    if column.endswith("_at"):
        return "time"
    if any(isinstance(r.get(column), int | float) and not isinstance(r.get(column), bool) for r in rows):
        return "number"
    return "text"


def _columns(section: Section, rows: list[dict[str, object]]) -> list[Column]:
    return [Column(c, kind=_kind(c, rows)) for c in section.columns]


def render_report(report: Report, console: Console | None = None) -> None:
    """Print every section (an empty one says so, with its question)."""
    console = console or make_console()
    console.print(f"faultline report: {window_text(report)}", markup=False, highlight=False)
    for section in SECTIONS:
        rows = report.sections.get(section.key, [])
        console.print()
        if rows:
            print_table(console, section.title, rows, _columns(section, rows), caption=section.question)
            if section.note:
                console.print(f"({section.note})", markup=False, highlight=False)
        else:
            console.print(f"{section.title}: no data in this window ({section.question})", markup=False,
                          highlight=False)
