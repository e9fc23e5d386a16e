"""How every ``faultline`` command prints: tables for a person, plain lines for a pipe, JSON for a script.

* **At a terminal** (:meth:`rich.console.Console.is_terminal`) a table is a rich table as wide as the
  terminal; ids and times never wrap or shorten (a person copies them), long text folds.
* **Into a pipe or a file** a table is plain text: a title line, a header line in capitals, one line
  per row, columns aligned with two spaces, nothing cut, wrapped or coloured, an empty cell as ``-``:
  ``faultline status | grep n03`` and ``awk '{print $NF}'`` work, and so does ``less``.
* **JSON** (``--json``) is one object per line, times in one RFC 3339 form (``2026-04-22T03:23:20.100000Z``:
  UTC, microseconds always; :func:`common.times.rfc3339`), NaN and infinities as ``null``: :func:`to_json`.

Times for people are UTC, marked ``Z``, to the second (``2026-04-22 03:23:20Z``), or to the
millisecond where the order of entries matters (timelines); :func:`human_time`.

Text from outside never acts on a terminal (:mod:`common.terminal_safe`): every cell and every string a
console prints has its control characters and bidi overrides written as escapes, rich markup in it is
not interpreted, and JSON escapes them (``\u001b``, ``\u202e``) while keeping the original text.
"""

from __future__ import annotations

import errno
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, TextIO
from uuid import UUID

from pydantic import BaseModel

from common.terminal_safe import UNSAFE, SafeStream, terminal_safe
from common.times import rfc3339

if TYPE_CHECKING:  # rich comes with the roles that print tables (the `sink` extra), not with the node agent
    from rich.console import Console

__all__ = ["Column", "age", "human_time", "make_console", "plural", "print_table", "rfc3339", "to_json", "to_plain"]

Kind = Literal["text", "id", "time", "time_ms", "number", "percent", "list", "age"]


def age(seconds: float) -> str:
    """kubectl's AGE: the largest whole unit (``59s``, ``7m``, ``3h``, ``2d``)."""
    s = max(0, int(seconds))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``1 incident``, ``3 incidents``, ``0 incidents`` (``many`` for irregular nouns)."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


def _utc(v: datetime) -> datetime:
    return v.astimezone(UTC) if v.tzinfo is not None else v.replace(tzinfo=UTC)


def _parsed(v: Any) -> Any:
    """An RFC 3339 text as a datetime; anything else as it is."""
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            return v
    return v


def human_time(v: Any, ms: bool = False) -> str:
    """A time for a person: ``2026-04-22 03:23:20Z`` (UTC), ``…:20.100Z`` when ``ms``; other values as text."""
    v = _parsed(v)
    if isinstance(v, str):
        return v
    if not isinstance(v, datetime):
        return "" if v is None else str(v)
    u = _utc(v)
    return u.strftime("%Y-%m-%d %H:%M:%S") + (f".{u.microsecond // 1000:03d}" if ms else "") + "Z"


def to_plain(value: Any) -> Any:
    """``value`` as plain JSON data: RFC 3339 times (one form), NaN/inf as None, tuples as lists, UUIDs as text.
    A pydantic model is its fields' values, converted the same way (not pydantic's own time format)."""
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_plain(v) for v in value]
    if isinstance(value, BaseModel):
        return to_plain(value.model_dump())
    if isinstance(value, type):  # e.g. the model class a topic carries
        return value.__name__
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def to_json(value: Any) -> str:
    """One line of strict JSON (no NaN), times in RFC 3339; controls and bidi overrides as ``\\uXXXX``."""
    text = json.dumps(to_plain(value), allow_nan=False, ensure_ascii=False)
    return UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)  # JSON escapes the C0 ones, not C1 or bidi


@dataclass(frozen=True)
class Column:
    """One column of a table: the row's key, its header, how its cells read (``age``: the time since the
    row's value, a time, as kubectl's AGE), and whether only ``-o wide`` shows it."""

    key: str
    header: str = ""
    kind: Kind = "text"
    wide: bool = False

    @property
    def title(self) -> str:
        return self.header or self.key.replace("_", " ")


def cell(value: Any, kind: Kind = "text") -> str:
    """One value as a person reads it in a table (``-`` for nothing)."""
    if value is None or value == "" or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if kind == "age":
        since = _parsed(value)
        return age((datetime.now(UTC) - _utc(since)).total_seconds()) if isinstance(since, datetime) else "-"
    if kind in ("time", "time_ms") or isinstance(value, datetime):
        return human_time(value, ms=kind == "time_ms")
    if kind == "percent" and isinstance(value, int | float) and not isinstance(value, bool):
        pct = value * 100
        return f"{pct:.0f} %" if pct == round(pct) else f"{pct:.1f} %"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, list | tuple | set | frozenset):
        return terminal_safe(", ".join(str(v) for v in value)) or "-"
    return terminal_safe(" ".join(str(value).split()))  # one line: a newline in a reason must not break the table


def make_console(stderr: bool = False, file: TextIO | None = None) -> Console:
    """A console on standard output (or error): rich at a terminal; plain, unwrapped, uncoloured elsewhere."""
    stream = file or (sys.stderr if stderr else sys.stdout)
    raw = stream.raw if isinstance(stream, SafeStream) else stream  # rich's own styling must reach a terminal
    safe = _safe_console()
    probe = safe(file=raw)
    if probe.is_terminal:
        return probe
    return safe(file=stream, width=100_000, no_color=True, highlight=False, emoji=False, soft_wrap=True)


@cache
def _safe_console() -> type[Console]:
    """A rich console that prints every string it is given terminal-safe (tables' cells are safe already), and
    whose broken pipe is a :class:`BrokenPipeError` like any other write's."""
    from rich.console import Console

    class SafeConsole(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            super().print(*(terminal_safe(o) if isinstance(o, str) else o for o in objects), **kwargs)

        def on_broken_pipe(self) -> None:
            """The reader of the pipe left: raised for :func:`faultline.cli.main` to exit 141, as every other
            write does (rich's own exits 1)."""
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader of the output left")

    return SafeConsole


def print_table(console: Console, title: str, rows: Sequence[Mapping[str, Any]], columns: Iterable[Column],
                caption: str = "", wide: bool = False) -> None:
    """``rows`` under ``title``: a rich table at a terminal, aligned plain text elsewhere; the ``wide``
    columns only when ``wide`` (``-o wide``)."""
    cols = [c for c in columns if wide or not c.wide]
    cells = [[cell(r.get(c.key), c.kind) for c in cols] for r in rows]
    if console.is_terminal:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=Text(terminal_safe(title)), caption=Text(terminal_safe(caption)) if caption else None,
                      title_justify="left", caption_justify="left")
        for c in cols:
            numeric = c.kind in ("number", "percent")
            fixed = c.kind in ("id", "time", "time_ms")
            table.add_column(c.title, justify="right" if numeric else "left", no_wrap=fixed,
                             overflow="fold", min_width=None)
        for line in cells:
            table.add_row(*(Text(v) for v in line))  # a cell's "[...]" is text, not rich markup
        console.print(table)
        return
    console.print(title, markup=False, highlight=False)
    if caption:
        console.print(f"# {caption}", markup=False, highlight=False)
    if not cols:
        return
    widths = [max([len(c.title)] + [len(line[i]) for line in cells]) for i, c in enumerate(cols)]
    header = [c.title.upper().replace(" ", "_") for c in cols]
    for line in [header, *cells]:
        text = "  ".join(v.ljust(w) if i < len(cols) - 1 else v for i, (v, w) in enumerate(zip(line, widths,
                                                                                                  strict=True)))
        console.print(text.rstrip(), markup=False, highlight=False)
