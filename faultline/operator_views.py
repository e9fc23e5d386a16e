"""What the on-call engineer reads: `faultline status`, `faultline incident ID`, `faultline timeline JOB`.

Each view is a function from the archive to plain data (for ``--json``) and a
renderer to a terminal table (rich). The archive is the source of truth for
what happened; the topics only for what is in flight.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from sinks.archive.store import Archive

__all__ = ["status_data", "print_status", "incident_data", "print_incident", "job_incidents"]

_OPEN = "state NOT IN ('resolved', 'closed')"


def status_data(archive: Archive) -> dict[str, Any]:
    """Open incidents, fenced hardware, commands waiting for approval, pipeline health."""
    incidents = archive.query(
        f"SELECT id, job, category, severity, state, culprit_node, culprit_gpus, opened_at, summary "
        f"FROM incidents_latest WHERE {_OPEN} "
        "ORDER BY indexOf(['page', 'ticket', 'info'], severity), opened_at")
    fenced = archive.query(
        "SELECT node, gpu, argMax(state, ts) AS state, argMax(reason, ts) AS reason, "
        "argMax(incident, ts) AS incident, max(ts) AS since FROM gpu_ledger GROUP BY node, gpu "
        "HAVING state = 'quarantined' ORDER BY since")
    cordoned = archive.query(
        "SELECT target_node AS node, any(incident) AS incident, min(issued_at) AS since, any(reason) AS reason "
        "FROM (SELECT node AS target_node, incident, issued_at, reason FROM commands FINAL "
        "WHERE type IN ('cordon_node', 'drain_node')) GROUP BY target_node ORDER BY since")
    waiting = archive.query(
        "SELECT c.id AS id, c.type AS type, c.job AS job, c.node AS node, c.gpu AS gpu, c.issued_at AS issued_at, "
        "c.incident AS incident FROM commands AS c FINAL WHERE c.requires_approval = 1 AND c.id NOT IN "
        "(SELECT command FROM command_results FINAL WHERE status IN ('done', 'denied', 'failed', 'dry_run')) "
        "ORDER BY c.issued_at")
    sources = archive.query("SELECT source, max(ts) AS last_event, count() AS events FROM events GROUP BY source "
                            "ORDER BY source")
    return {"open_incidents": incidents, "quarantined_gpus": fenced, "cordoned_nodes": cordoned,
            "waiting_for_approval": waiting, "dead_letters": archive.count("deadletters"), "sources": sources}


def _table(title: str, rows: list[dict[str, Any]], cols: list[str]) -> Table:
    t = Table(title=f"{title} ({len(rows)})", title_justify="left", expand=False)
    for c in cols:
        t.add_column(c)
    for r in rows:
        t.add_row(*[_cell(r.get(c)) for c in cols])
    return t


def _cell(v: Any) -> str:
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    return "" if v is None else str(v)[:80]


def print_status(data: dict[str, Any], console: Console | None = None) -> None:
    c = console or Console()
    c.print(_table("Open incidents", data["open_incidents"],
                   ["severity", "category", "job", "culprit_node", "state", "opened_at", "id"]))
    c.print(_table("Quarantined GPUs", data["quarantined_gpus"], ["node", "gpu", "reason", "since", "incident"]))
    c.print(_table("Cordoned nodes", data["cordoned_nodes"], ["node", "reason", "since", "incident"]))
    c.print(_table("Waiting for approval", data["waiting_for_approval"],
                   ["id", "type", "job", "node", "gpu", "issued_at"]))
    c.print(_table("Sources", data["sources"], ["source", "last_event", "events"]))
    c.print(f"dead letters: {data['dead_letters']}")
    if data["waiting_for_approval"]:
        c.print("next: review each command above, then `faultline approve ID` or `faultline deny ID --reason ...`")


def incident_data(archive: Archive, incident_id: str) -> dict[str, Any] | None:
    rows = archive.query("SELECT * FROM incidents_latest WHERE id = {id:String}", {"id": incident_id})
    if not rows:
        return None
    inc = rows[0]
    inc.pop("payload", None)
    return {"incident": inc, "timeline": archive.timeline(incident_id)}


def job_incidents(archive: Archive, job: str) -> list[str]:
    return [r["id"] for r in archive.query(
        "SELECT id FROM incidents_latest WHERE job = {job:String} ORDER BY opened_at", {"job": job})]


def print_incident(data: dict[str, Any], console: Console | None = None) -> None:
    c = console or Console()
    inc = data["incident"]
    c.print(f"[bold]{inc['id']}[/bold] {inc['category']} job={inc['job']} culprit={inc['culprit_node']} "
            f"{_cell(inc['culprit_gpus'])} severity={inc['severity']} state={inc['state']} "
            f"lost_gpu_hours={inc.get('lost_gpu_hours')}")
    c.print(inc.get("summary") or "")
    t = Table(title="timeline", title_justify="left")
    for col in ("time", "lane", "what", "detail"):
        t.add_column(col, overflow="fold")
    for e in data["timeline"]:
        t.add_row(str(e["ts"]), e["entry_type"], e["what"], str(e.get("detail") or "")[:120])
    c.print(t)
