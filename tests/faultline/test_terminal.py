"""Output conventions: plurals, RFC 3339 JSON, plain tables in a pipe, rich ones at a terminal."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta, timezone

from rich.console import Console

from faultline.terminal import Column, human_time, make_console, plural, print_table, rfc3339, to_json

T = datetime(2026, 4, 22, 3, 23, 20, 100_000, tzinfo=UTC)


def test_plural() -> None:
    assert [plural(n, "incident") for n in (0, 1, 2)] == ["0 incidents", "1 incident", "2 incidents"]
    assert plural(3, "entry", "entries") == "3 entries"


def test_json_times_are_rfc3339_in_utc_and_nan_is_null() -> None:
    paris = T.astimezone(timezone(timedelta(hours=2)))
    doc = json.loads(to_json({"at": paris, "whole": T.replace(microsecond=0), "x": float("nan"), "t": (1, 2)}))
    assert doc == {"at": "2026-04-22T03:23:20.100000Z", "whole": "2026-04-22T03:23:20.000000Z", "x": None,
                   "t": [1, 2]}  # one form: whole seconds have their fraction too
    assert rfc3339(datetime(2026, 1, 1)) == "2026-01-01T00:00:00.000000Z"  # naive: UTC


def test_people_read_utc_times_marked_z() -> None:
    assert human_time(T) == "2026-04-22 03:23:20Z"
    assert human_time(T, ms=True) == "2026-04-22 03:23:20.100Z"
    assert human_time("2026-04-22T03:23:20+02:00") == "2026-04-22 01:23:20Z"


ROWS = [{"id": "inc-" + "a" * 60, "opened_at": T, "reason": "XID 79\non n03", "share": 1, "gone": None},
        {"id": "inc-b", "opened_at": T, "reason": "short", "share": 0.125, "gone": ""}]
COLUMNS = [Column("id", kind="id"), Column("opened_at", "opened", "time"), Column("reason"),
           Column("share", kind="percent"), Column("gone")]


def test_in_a_pipe_a_table_is_one_plain_line_per_row_nothing_cut() -> None:
    out = io.StringIO()
    console = make_console(file=out)
    assert not console.is_terminal
    print_table(console, "Open incidents (2)", ROWS, COLUMNS)
    lines = out.getvalue().splitlines()
    assert lines[0] == "Open incidents (2)"
    assert lines[1].split() == ["ID", "OPENED", "REASON", "SHARE", "GONE"]
    assert len(lines) == 4  # title, header, two rows: no wrapping
    assert lines[2].startswith("inc-" + "a" * 60 + "  ")  # the id whole
    assert "2026-04-22 03:23:20Z" in lines[2] and "XID 79 on n03" in lines[2] and "100 %" in lines[2]
    assert "12.5 %" in lines[3] and lines[3].rstrip().endswith("-")
    assert not set("│┃━─┏└") & set(out.getvalue())  # no box drawing
    starts = [line.index("OPENED") if i == 0 else line.index("2026") for i, line in enumerate(lines[1:])]
    assert len(set(starts)) == 1  # aligned


def test_at_a_terminal_ids_and_times_are_never_shortened() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    print_table(console, "Open incidents (2)", ROWS, COLUMNS)
    text = out.getvalue()
    assert "inc-" + "a" * 60 in text.replace("\n", "") or "inc-" + "a" * 60 in text
    assert "…" not in text and "2026-04-22 03:23:20Z" in text


def test_text_from_outside_cannot_act_on_a_terminal() -> None:
    """Issue 27: controls and bidi overrides are written out as escapes; tabs and newlines stay; JSON keeps the
    original text, escaped the JSON way, C1 and bidi included."""
    import io
    import json

    from common.terminal_safe import SafeStream, terminal_safe
    from faultline.terminal import Column, make_console, print_table, to_json

    hostile = "ok\x1b]0;t\x07\x1b[2J\r\x9b\u202eevil\u2066\ttab\nnext"
    assert terminal_safe(hostile) == "ok\\x1b]0;t\\x07\\x1b[2J\\x0d\\x9b\\u202eevil\\u2066\ttab\nnext"
    buf = io.StringIO()
    SafeStream(buf).write(hostile)
    assert "\x1b" not in buf.getvalue() and "\u202e" not in buf.getvalue()
    out = io.StringIO()
    print_table(make_console(file=out), f"title {hostile}", [{"a": hostile, "b": "[red]markup[/red]"}],
                [Column("a"), Column("b")])
    assert "\x1b" not in out.getvalue() and "\u202e" not in out.getvalue() and "[red]markup[/red]" in out.getvalue()
    doc = to_json({"line": hostile})
    assert "\u202e" not in doc and "\x9b" not in doc and json.loads(doc) == {"line": hostile}
