"""The archive store: typed writes into ClickHouse and a few read helpers.

:class:`Archive` wraps one clickhouse-connect client, either an embedded chDB
engine on disk (``chdb:///abs/path``) or a server (``http(s)://host:8123``);
the code is the same for both. chDB allows one engine path per process, so
archives opened on the same path share one client (and one lock: a client
runs one query at a time).

Every ``write_*`` is one batched insert, safe to repeat: the insert carries a
deduplication token derived from the batch's ids (an identical re-sent batch
is dropped by ClickHouse), and the tables replace rows by natural id, so even
a differently-cut redelivery never doubles rows as read through ``FINAL`` or
the latest-state views.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlparse

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from pydantic_core import to_json

from common.redact import mask_url
from sinks.archive.migrations import DEFAULT_RAW_TTL_DAYS, TABLES, migrate, set_raw_ttl
from streams.decisions import Command, CommandResult, DeadLetter, Incident
from streams.events import Event

__all__ = ["Archive", "deadletter_id", "event_row", "EVENT_COLUMNS"]

EVENT_COLUMNS = ["id", "ts", "source", "kind", "node", "job", "rank", "gpu", "body"]
_INCIDENT_COLUMNS = [
    "id", "version", "job", "category", "culprit_node", "culprit_gpus", "opened_at", "updated_at",
    "severity", "state", "summary", "lost_gpu_hours", "payload",
]
_COMMAND_COLUMNS = [
    "id", "incident", "type", "job", "node", "gpu", "issued_at", "requires_approval", "params", "reason",
    "payload",
]
_RESULT_COLUMNS = ["command", "executor", "status", "at", "detail"]
_DEADLETTER_COLUMNS = ["id", "stage", "reason", "raw", "at"]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def deadletter_id(stage: str, raw: str, at: datetime) -> str:
    """The dead letter's natural id: a hash of where, what and when."""
    return _digest([stage, raw, at.isoformat()])


def _digest(parts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:32]


def _event_gpu(event: Event) -> str | None:
    ref = getattr(event.body, "gpu", None)
    if ref is None:
        return None
    if ref.uuid:
        return str(ref.uuid)
    if ref.pci:
        return str(ref.pci)
    return None if ref.index is None else str(ref.index)


def _millis(ts: datetime) -> int:
    """DateTime64(3) ticks, computed here: much cheaper than the driver's conversion (naive = UTC)."""
    aware = ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
    return (aware - _EPOCH) // _MILLISECOND


def event_row(e: Event) -> tuple[Any, ...]:
    return (e.id, _millis(e.ts), e.source, e.kind, e.node, e.job, e.rank, _event_gpu(e), to_json(e.body).decode())


def _incident_row(i: Incident) -> tuple[Any, ...]:
    return (
        i.id, i.version, i.job, i.category, i.culprit.node, list(i.culprit.gpus), i.opened_at,
        i.updated_at or i.opened_at, i.severity, i.state, i.summary, i.lost_gpu_hours, i.model_dump_json(),
    )


def _command_row(c: Command) -> tuple[Any, ...]:
    return (
        c.id, c.incident, c.type, c.target.job, c.target.node, c.target.gpu, c.issued_at,
        int(c.requires_approval), to_json(c.params).decode(), c.reason,
        c.model_dump_json(),
    )


def _result_row(r: CommandResult) -> tuple[Any, ...]:
    return (r.command, r.executor, r.status, r.at, r.detail)


def _deadletter_row(d: DeadLetter) -> tuple[Any, ...]:
    return (deadletter_id(d.stage, d.raw, d.at), d.stage, d.reason, d.raw, d.at)


@dataclass
class _Shared:
    """One client per target, with the lock that serialises its queries."""

    client: Client
    lock: threading.RLock = field(default_factory=threading.RLock)
    users: int = 0


_SHARED: dict[str, _Shared] = {}
_SHARED_LOCK = threading.Lock()


def _target(url: str) -> str:
    """Normalise the url so that spellings of one chDB path share one client."""
    parsed = urlparse(url)
    if parsed.scheme == "chdb":
        if not parsed.path or parsed.netloc:
            raise ValueError(f"chdb archive url must be chdb:///absolute/path, got {mask_url(url)!r}")
        path = os.path.realpath(parsed.path)
        os.makedirs(path, exist_ok=True)
        return f"chdb://{path}"
    if parsed.scheme in ("http", "https"):
        return url
    raise ValueError(f"archive url must be chdb:///path or http(s)://host:port, got {mask_url(url)!r}")


class Archive:
    """The incident archive in ClickHouse. Open with :meth:`open`; use as a context manager."""

    def __init__(self, target: str, shared: _Shared) -> None:
        self.url = target
        self._shared = shared
        self._closed = False

    @classmethod
    def open(cls, url: str, *, raw_ttl_days: int = DEFAULT_RAW_TTL_DAYS) -> Archive:
        """Connect (``chdb:///path`` creates the directory), migrate the schema, set the raw TTL."""
        target = _target(url)
        with _SHARED_LOCK:
            shared = _SHARED.get(target)
            if shared is None:
                shared = _Shared(clickhouse_connect.get_client(dsn=target, tz_mode="aware"))
                _SHARED[target] = shared
            shared.users += 1
        archive = cls(target, shared)
        try:
            with shared.lock:
                migrate(shared.client)
                set_raw_ttl(shared.client, raw_ttl_days)
        except BaseException:
            archive.close()
            raise
        return archive

    @property
    def client(self) -> Client:
        """The underlying clickhouse-connect client, for administration; it is shared, not thread-safe."""
        return self._shared.client

    def close(self) -> None:
        """Release this archive; the client closes with its last user."""
        if self._closed:
            return
        self._closed = True
        with _SHARED_LOCK:
            self._shared.users -= 1
            if self._shared.users == 0:
                del _SHARED[self.url]
                with self._shared.lock:
                    self._shared.client.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writes -----------------------------------------------------------------------------

    def write_events(self, events: Sequence[Event]) -> int:
        """Archive canonical events (checkpoint events also fill ``checkpoints``)."""
        return self._insert("events", EVENT_COLUMNS, [event_row(e) for e in events], [e.id for e in events])

    def write_incidents(self, incidents: Sequence[Incident]) -> int:
        """Archive incident versions; ``incidents_latest`` shows the highest version per id."""
        keys = [f"{i.id}@{i.version}" for i in incidents]
        return self._insert("incident_versions", _INCIDENT_COLUMNS, [_incident_row(i) for i in incidents], keys)

    def write_commands(self, commands: Sequence[Command]) -> int:
        """Archive commands (GPU quarantine/validate/release also fill ``gpu_ledger``)."""
        return self._insert("commands", _COMMAND_COLUMNS, [_command_row(c) for c in commands], [c.id for c in commands])

    def write_results(self, results: Sequence[CommandResult]) -> int:
        """Archive executors' command results."""
        keys = [f"{r.command}|{r.executor}|{r.status}|{r.at.isoformat()}" for r in results]
        return self._insert("command_results", _RESULT_COLUMNS, [_result_row(r) for r in results], keys)

    def write_deadletters(self, letters: Sequence[DeadLetter]) -> int:
        """Archive dead letters, keyed by :func:`deadletter_id`."""
        rows = [_deadletter_row(d) for d in letters]
        return self._insert("deadletters", _DEADLETTER_COLUMNS, rows, [row[0] for row in rows])

    def _insert(self, table: str, columns: list[str], rows: list[tuple[Any, ...]], keys: list[str]) -> int:
        if not rows:
            return 0
        token = _digest([table, *keys])
        with self._shared.lock:
            self._shared.client.insert(
                table, rows, column_names=columns, settings={"insert_deduplication_token": token}
            )
        return len(rows)

    # --- reads ------------------------------------------------------------------------------

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run a query (``{name:Type}`` placeholders bound from ``params``); rows as dicts."""
        with self._shared.lock:
            result = self._shared.client.query(sql, parameters=dict(params or {}))
            return list(result.named_results())

    def latest_incidents(self, job: str | None = None) -> list[dict[str, Any]]:
        """The latest version of every incident (of one job, if given), oldest first."""
        if job is None:
            return self.query("SELECT * FROM incidents_latest ORDER BY opened_at, id")
        return self.query(
            "SELECT * FROM incidents_latest WHERE job = {job:String} ORDER BY opened_at, id", {"job": job}
        )

    def commands(self, incident: str | None = None) -> list[dict[str, Any]]:
        """Archived commands (of one incident, if given) in the order issued."""
        if incident is None:
            return self.query("SELECT * FROM commands FINAL ORDER BY issued_at, id")
        return self.query(
            "SELECT * FROM commands FINAL WHERE incident = {incident:String} ORDER BY issued_at, id",
            {"incident": incident},
        )

    def timeline(self, incident: str) -> list[dict[str, Any]]:
        """One incident's timeline (signals, versions, commands, results) in time order."""
        return self.query(
            "SELECT * FROM incident_timeline WHERE incident = {incident:String}"
            " ORDER BY ts, indexOf(['signal', 'incident', 'command', 'result'], entry_type)",
            {"incident": incident},
        )

    def count(self, table: str) -> int:
        """Rows in ``table`` after replacement (``FINAL``); views are counted as they are."""
        final = "FINAL" if table in TABLES else ""
        rows = self.query(f"SELECT count() AS n FROM {{table:Identifier}} {final}", {"table": table})
        return int(rows[0]["n"])
