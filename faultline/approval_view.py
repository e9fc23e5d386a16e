"""`faultline approvals`: every command an executor holds for a person, and the line that decides it.

The rule: a command is **waiting for approval** while an executor's ``waiting_approval`` result for it
is in the archive (what the executor itself said it holds, whatever the command asked: a
``reset_gpu`` is held even when the correlator did not ask), that executor has not settled it since
(``done``, ``denied``, ``failed`` or ``refused``: a person decided, or it could no longer run), and it
has not expired (a command past its ``expires_at`` is never run, so approving it does nothing). A
command several executors hold is one row, naming them all. A dry-run executor holds nothing: it
only says what it would do.

Each row says what the command does, why (its reason), for which incident, since when it is held,
until when it can be approved, and the exact ``faultline approve ID`` line (with
``FAULTLINE_NAMESPACE=...`` in front when the archive namespace read is not the live one).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from faultline.story import describe_command
from faultline.terminal import Column, make_console, plural, print_table
from sinks.archive.store import Archive

__all__ = ["COLUMNS", "approval_rows", "print_approvals"]

#: The statuses with which an executor settles a command it held.
SETTLED = ("done", "denied", "failed", "refused")

_HELD_SQL = f"""
SELECT r.command AS id, groupArray(r.executor) AS executors, min(r.held_at) AS held_at,
       any(c.type) AS type, any(c.incident) AS incident, any(c.job) AS job, any(c.node) AS node,
       any(c.gpu) AS gpu, any(c.reason) AS reason, any(c.params) AS params, any(c.issued_at) AS issued_at,
       any(JSONExtractString(c.payload, 'expires_at')) AS expires_at
FROM (
    SELECT command, executor, min(at) AS held_at FROM command_results FINAL
    WHERE status = 'waiting_approval' GROUP BY command, executor
) AS r
INNER JOIN (SELECT id, type, incident, job, node, gpu, reason, params, issued_at, payload FROM commands FINAL) AS c
    ON c.id = r.command
WHERE (r.command, r.executor) NOT IN (
    SELECT command, executor FROM command_results FINAL WHERE status IN {SETTLED!r})
GROUP BY r.command
ORDER BY held_at, id
"""


def _time(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None
    return value.astimezone(UTC) if value is not None and value.tzinfo else value


def _what(row: dict[str, Any]) -> str:
    """``reset_gpu node n03 gpu 2``, with a restart's plan: what approving it makes happen."""
    target = " ".join(f"{k} {row[k]}" for k in ("job", "node", "gpu") if row.get(k))
    plan = describe_command(row["type"], str(row.get("params") or "{}")) if row["type"] == "restart_job" else ""
    return " ".join(x for x in (row["type"], target) if x) + (f": {plan}" if plan else "")


def _decide_line(command_id: str, namespace: str | None) -> str:
    where = f"FAULTLINE_NAMESPACE={namespace} " if namespace else ""
    return f"{where}faultline approve {command_id}"


def approval_rows(archive: Archive, now: datetime | None = None, namespace: str | None = None) -> list[dict[str, Any]]:
    """The commands held for a person now (see the module docstring), oldest held first.

    ``namespace``: the topic namespace the approve line must name, when it is not the reader's live one.
    """
    now = now or datetime.now(UTC)
    rows = []
    for r in archive.query(_HELD_SQL):
        until = _time(str(r.get("expires_at") or ""))
        if until is not None and until <= now:
            continue  # expired: no executor runs it now, approving it would change nothing
        rows.append({"id": r["id"], "type": r["type"], "what": _what(r), "why": r["reason"], "incident": r["incident"],
                     "job": r["job"], "node": r["node"], "gpu": r["gpu"], "executors": sorted(r["executors"]),
                     "issued_at": r["issued_at"], "held_at": r["held_at"], "expires_at": until,
                     "approve": _decide_line(r["id"], namespace)})
    return rows


COLUMNS = [Column("id", kind="id"), Column("what"), Column("why"), Column("incident", kind="id"),
           Column("held_at", "held", "time"), Column("held_at", "age", "age"),
           Column("expires_at", "approvable until", "time"), Column("approve", "to approve")]
"""How a held command reads in a table (``status`` shows the same columns)."""


def print_approvals(rows: list[dict[str, Any]], console: Console | None = None, wide: bool = False) -> None:
    c = console or make_console()
    print_table(c, f"Waiting for approval ({len(rows)})", rows, COLUMNS, wide=wide)
    if rows:
        c.print(f"next: review {'it' if len(rows) == 1 else 'each of the ' + plural(len(rows), 'command')}, then "
                "run its line above, or `faultline deny ID --reason ...`", markup=False)

