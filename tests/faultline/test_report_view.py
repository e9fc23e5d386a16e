"""`faultline report` for people: the window in words, shares as percentages, no trend without saves."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from faultline.report_view import render_report, window_text
from faultline.terminal import make_console
from sinks.report import Report


def _text(report: Report) -> str:
    out = io.StringIO()
    render_report(report, make_console(file=out))
    return out.getvalue()


def test_an_unbounded_window_is_said_as_such_not_as_1970() -> None:
    text = _text(Report(since=None, until=None))
    assert "every incident in the archive" in text and "1970" not in text and "2299" not in text
    assert window_text(Report(since=datetime(2026, 2, 28, tzinfo=UTC), until=None)) == \
        "incidents opened since 2026-02-28 00:00:00Z"


def test_shares_read_as_percentages_and_a_trend_needs_saves() -> None:
    report = Report(since=None, until=None, sections={
        "hardware_share": [{"job_incidents": 4, "hardware_incidents": 4, "hardware_share": 1.0, "jobs": 2,
                            "jobs_hit_by_hardware": 2}],
        "first_restart": [{"category": "(all)", "restarted": 3, "resolved": 2, "failed_again": 1, "escalated": 0,
                           "undecided": 0, "success_rate": 0.6667}],
        "checkpoint_trend": [{"job": "pt-70b", "saves": 2, "avg_seconds": 5.01, "first_half_s": None,
                              "second_half_s": None, "change_pct": None, "slope_s_per_day": None,
                              "trend": "too few saves"}],
    })
    lines = _text(report).splitlines()
    share = lines[lines.index("Hardware failures") + 3]
    assert share.split()[2:4] == ["100", "%"]
    assert "66.7 %" in lines[lines.index("First restarts") + 3]
    trend = lines[lines.index("Checkpoint write times") + 3].split()
    assert trend[:3] == ["pt-70b", "2", "5.01"] and trend[3:7] == ["-", "-", "-", "-"]
