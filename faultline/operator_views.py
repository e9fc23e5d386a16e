"""What the on-call engineer reads: `faultline status`, `faultline incident ID`, `faultline timeline JOB`.

Each view is a function from the archive to plain data (for ``--json``: :func:`faultline.terminal.to_json`
writes its times in RFC 3339) and a renderer for a person (:func:`faultline.terminal.print_table`:
a table at a terminal, aligned plain lines in a pipe). The archive is the source of truth for
what happened; the topics only for what is in flight. An incident's entries are sentences,
repeated signals grouped (:mod:`faultline.story`).
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

from faultline.approval_view import COLUMNS as APPROVAL_COLUMNS
from faultline.approval_view import approval_rows
from faultline.deadletter_view import COLUMNS as DEADLETTER_COLUMNS
from faultline.deadletter_view import deadletter_groups
from faultline.pipeline_health import COLUMNS as PIPELINE_COLUMNS
from faultline.pipeline_health import pipeline_rows
from faultline.story import Entry, gate_lines, group, story
from faultline.terminal import Column, human_time, make_console, plural, print_table
from producers.spool.losses import SPOOL_STAGE
from sinks.archive.store import Archive

__all__ = ["status_data", "print_status", "incident_data", "print_incident", "job_incidents"]

_OPEN = "state NOT IN ('resolved', 'closed')"
#: The dead letters' reasons ``status`` shows, newest first (``faultline deadletters`` lists them all).
STATUS_REASONS = 5


def status_data(archive: Archive, namespace: str | None = None) -> dict[str, Any]:
    """Open incidents, fenced hardware, commands waiting for approval, pipeline health.

    ``namespace``: the topic namespace approve lines must name, when the archive read is not the live one's.
    """
    incidents = archive.query(
        f"SELECT id, job, category, severity, state, culprit_node, culprit_gpus, opened_at, summary "
        f"FROM incidents_latest WHERE {_OPEN} "
        "ORDER BY indexOf(['page', 'ticket', 'info'], severity), opened_at")
    fenced = archive.query(
        "SELECT node, gpu, argMax(state, ts) AS state, argMax(reason, ts) AS reason, "
        "argMax(incident, ts) AS incident, max(ts) AS since FROM gpu_ledger GROUP BY node, gpu "
        "HAVING state IN ('quarantined', 'validating') ORDER BY since")  # out of service until released
    cordoned = archive.query(
        "SELECT target_node AS node, any(incident) AS incident, min(issued_at) AS since, any(reason) AS reason "
        "FROM (SELECT node AS target_node, incident, issued_at, reason FROM commands FINAL "
        "WHERE type IN ('cordon_node', 'drain_node')) GROUP BY target_node ORDER BY since")
    waiting = approval_rows(archive, namespace=namespace)  # what executors hold, not what commands asked
    sources = archive.query("SELECT source, max(ts) AS last_event, count() AS events FROM events GROUP BY source "
                            "ORDER BY source")
    # What agents' spools lost (a full disk, the size bound), as each reported once it could deliver again.
    spool_losses = archive.query("SELECT at, reason FROM deadletters FINAL WHERE stage = {stage:String} "
                                 "ORDER BY at DESC LIMIT 10", {"stage": SPOOL_STAGE})
    return {"open_incidents": incidents, "quarantined_gpus": fenced, "cordoned_nodes": cordoned,
            "waiting_for_approval": waiting, "dead_letters": archive.count("deadletters"), "sources": sources,
            "spool_losses": spool_losses, "dead_letter_reasons": deadletter_groups(archive, limit=STATUS_REASONS),
            "pipeline": pipeline_rows(archive)}  # each stage's own heartbeat, up or down (pipeline_health.py)


def print_status(data: dict[str, Any], console: Console | None = None, wide: bool = False) -> None:
    c = console or make_console()
    sections: list[tuple[str, str, list[Column]]] = [
        ("Open incidents", "open_incidents", [
            Column("severity"), Column("category"), Column("job"), Column("culprit_node", "culprit"),
            Column("culprit_gpus", "gpus", wide=True), Column("state"), Column("opened_at", "opened", "time"),
            Column("opened_at", "age", "age"), Column("id", kind="id"), Column("summary", wide=True)]),
        ("Quarantined GPUs", "quarantined_gpus", [
            Column("node"), Column("gpu", kind="id"), Column("since", kind="time"), Column("since", "age", "age"),
            Column("incident", kind="id"), Column("reason")]),
        ("Cordoned nodes", "cordoned_nodes", [
            Column("node"), Column("since", kind="time"), Column("since", "age", "age"), Column("incident", kind="id"),
            Column("reason")]),
        ("Pipeline", "pipeline", PIPELINE_COLUMNS),
        ("Waiting for approval", "waiting_for_approval", APPROVAL_COLUMNS),
        ("Sources", "sources", [
            Column("source"), Column("last_event", "last event", "time"), Column("events", kind="number")]),
        ("Spool losses (newest 10)", "spool_losses", [Column("at", kind="time"), Column("reason")]),
    ]
    for title, key, columns in sections:
        rows = data[key]
        print_table(c, f"{title} ({len(rows)})", rows, columns, wide=wide)
    _print_dead_letters(c, data, wide)
    _print_pipeline_verdict(c, data.get("pipeline") or [])
    if data["waiting_for_approval"]:
        c.print("next: review each command waiting for approval, then run its line (`faultline approve ID`) or "
                "`faultline deny ID --reason ...`; `faultline approvals` lists only them", markup=False)


def _print_pipeline_verdict(c: Console, stages: list[dict[str, Any]]) -> None:
    """One line on the stages: which are down (silent past three heartbeat intervals), or that none beats."""
    if not stages:
        c.print("pipeline: no stage heartbeat archived (no worker, sink, executor or agent running since "
                "heartbeats began)", markup=False)
        return
    down = [f"{r['stage']} {r['instance']} down (silent {r['age']})" for r in stages if r["state"] == "down"]
    unknown = [r for r in stages if r["state"] == "unknown"]
    if down:
        c.print("pipeline: " + "; ".join(down), markup=False)
    if unknown:
        c.print(f"pipeline: {plural(len(unknown), 'stage')} unknown: the sink that archives heartbeats is down",
                markup=False)


def _print_dead_letters(c: Console, data: dict[str, Any], wide: bool = False) -> None:
    """The count, and the newest reasons with where to read the rest."""
    reasons = data.get("dead_letter_reasons") or []
    if not reasons:
        c.print(f"dead letters: {data['dead_letters']}", markup=False)
        return
    print_table(c, f"Dead letters ({data['dead_letters']}; the newest {plural(len(reasons), 'reason')})", reasons,
                DEADLETTER_COLUMNS, wide=wide)
    c.print("every reason, with filters: `faultline deadletters`", markup=False)


def incident_data(archive: Archive, incident_id: str) -> dict[str, Any] | None:
    """The incident's latest version and its story: grouped entries, each with its sentence."""
    rows = archive.query("SELECT * FROM incidents_latest WHERE id = {id:String}", {"id": incident_id})
    if not rows:
        return None
    inc = rows[0]
    payload = _payload(inc.pop("payload", None))
    inc["gate"], inc["faults"] = payload.get("gate"), payload.get("faults") or []
    entries = group(story(archive, inc))
    return {"incident": inc, "timeline": [_entry_json(e) for e in entries]}


def _payload(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if isinstance(raw, str | bytes) else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _entry_json(e: Entry) -> dict[str, Any]:
    return {"ts": e.ts, "last_ts": e.last_ts, "entry_type": e.lane, "what": e.what, "text": e.text,
            "count": e.count, "nodes": list(e.nodes), "ranks": list(e.ranks), "detail": e.raw,
            "command": e.command or None}  # a command's id: what `faultline approve` takes


def job_incidents(archive: Archive, job: str) -> list[str]:
    return [r["id"] for r in archive.query(
        "SELECT id FROM incidents_latest WHERE job = {job:String} ORDER BY opened_at", {"job": job})]


def entry_label(e: dict[str, Any]) -> str:
    """``31 × NCCL watchdog timeout (...)`` for a group, the sentence otherwise."""
    return f"{e['count']} × {e['text']}" if e.get("count", 1) > 1 else str(e["text"])


def entry_origin(e: dict[str, Any]) -> str:
    return Entry(e["ts"], e["entry_type"], e["what"], e["text"], nodes=tuple(e.get("nodes") or ()),
                 ranks=tuple(e.get("ranks") or ())).origin


def print_incident(data: dict[str, Any], console: Console | None = None, wide: bool = False) -> None:
    c = console or make_console()
    inc = data["incident"]
    culprit = " ".join(x for x in [inc.get("culprit_node") or "", ", ".join(inc.get("culprit_gpus") or [])] if x)
    lost = inc.get("lost_gpu_hours")
    lines = [
        f"{inc['id']}  {inc['category']}  job {inc.get('job') or '-'}  culprit {culprit or '-'}",
        f"severity {inc['severity']}, state {inc['state']}, opened {human_time(inc['opened_at'])}, "
        f"last change {human_time(inc.get('updated_at'))}"
        + (f", lost {lost:.2f} GPU-hours" if isinstance(lost, int | float) else ""),
    ]
    if inc.get("summary"):
        lines.append(str(inc["summary"]))
    lines += gate_lines(inc)
    for line in lines:
        c.print(line, markup=False, highlight=False)
    rows = [{"ts": e["ts"], "lane": e["entry_type"], "what": e["what"],
             "detail": e.get("detail") if e["entry_type"] == "incident" else entry_label(e),  # a version: its summary
             "from": entry_origin(e), "command": e.get("command")} for e in data["timeline"]]
    print_table(c, f"Timeline ({plural(len(rows), 'entry', 'entries')})", rows,
                [Column("ts", "time", "time_ms"), Column("lane"), Column("what"), Column("detail"),
                 Column("from"), Column("command", kind="id", wide=True)], wide=wide)
