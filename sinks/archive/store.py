"""The archive store: typed writes into ClickHouse and a few read helpers.

:class:`Archive` is one namespace of the archive (:mod:`.namespaces`: its own database) over
one clickhouse-connect client: to a server (``http(s)://host:8123``), to the embedded chDB
engine on disk (``chdb:///abs/path``) this process owns, or, when another process owns that
directory, to the owner's endpoint (:mod:`.connection`, :mod:`.endpoint`); the code is the
same for all three. Archives of one process on the same target share one client (and one lock:
a client runs one query at a time), each setting its namespace's database for its own calls.

Every ``write_*`` is one batched insert, safe to repeat: the insert carries a
deduplication token derived from the batch's ids (an identical re-sent batch
is dropped by ClickHouse), and the tables replace rows by natural id, so even
a differently-cut redelivery never doubles rows as read through ``FINAL`` or
the latest-state views.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from clickhouse_connect.driver.client import Client
from pydantic_core import to_json

from sinks.archive.connection import DEFAULT_WAIT_S, Connection, acquire, release, schema_lock
from sinks.archive.connection import call as conn_call
from sinks.archive.event_rows import EVENT_COLUMNS, EventRows, event_columns, event_row, events_columns
from sinks.archive.health_tables import HEARTBEAT_COLUMNS
from sinks.archive.migrations import DEFAULT_RAW_TTL_DAYS, TABLES, migrate, set_raw_ttl
from sinks.archive.namespaces import check_namespace, drop_namespace, list_namespaces, resolve
from streams.decisions import Command, CommandResult, DeadLetter, Incident
from streams.events import Event
from streams.health import StageHeartbeat

__all__ = ["Archive", "deadletter_id", "event_columns", "event_row", "EVENT_COLUMNS"]

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
_T = TypeVar("_T")


def deadletter_id(stage: str, raw: str, at: datetime) -> str:
    """The dead letter's natural id: a hash of where, what and when."""
    return _digest([stage, raw, at.isoformat()])


def _digest(parts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:32]


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


class Archive:
    """One namespace of the incident archive in ClickHouse. Open with :meth:`open`; use as a context manager."""

    def __init__(self, conn: Connection, namespace: str, database: str) -> None:
        self._conn = conn
        self.url = conn.target
        self.namespace = namespace
        self.database = database
        self._closed = False

    @classmethod
    def open(cls, url: str, namespace: str | None = None, *, live: str | None = None, create: bool = True,
             raw_ttl_days: int = DEFAULT_RAW_TTL_DAYS, wait_s: float = DEFAULT_WAIT_S) -> Archive:
        """Connect, find (or create) the namespace's database, migrate its schema, set the raw TTL.

        ``url`` is ``chdb:///path`` (created if missing; served by whichever process owns it, see
        :mod:`sinks.archive.connection`) or ``http(s)://host:port[/database]``. ``namespace`` None
        opens the live namespace: the one that keeps the archive's own database
        (:mod:`sinks.archive.namespaces`). ``live`` names the installation's live namespace (default:
        ``namespace``), which claims that database if nobody has yet; replays and demos name the
        live one here so that they never take it. Without ``create`` a namespace that is not the live one must exist
        (:class:`~sinks.archive.namespaces.NamespaceError` otherwise): for readers. ``wait_s``: how
        long to wait for a busy chDB directory's owner.
        """
        if namespace is not None:
            check_namespace(namespace)
        conn = acquire(url, wait_s)
        archive: Archive | None = None
        try:
            with schema_lock(conn, wait_s):  # one process at a time creates and migrates (connection.py)
                name, database = conn_call(conn, conn.base_database,
                                           lambda c: resolve(c, conn.base_database, namespace, live, create))
                archive = cls(conn, name, database)
                archive._call(lambda c: (migrate(c), set_raw_ttl(c, raw_ttl_days)))
        except BaseException:
            if archive is not None:
                archive.close()
            else:
                release(conn)
            raise
        return archive

    @property
    def role(self) -> str:
        """How this process reaches the archive: ``owner``, ``reader`` (through the owner) or ``server``."""
        return self._conn.role

    @property
    def client(self) -> Client:
        """The underlying clickhouse-connect client in this namespace's database, for administration.

        It is shared by every archive of the process on the same target and not thread-safe; use
        :meth:`query` and the ``write_*`` methods where you can.
        """
        client = self._conn.client
        client.database = self.database
        return client

    def close(self) -> None:
        """Release this archive; the connection closes with its last user."""
        if self._closed:
            return
        self._closed = True
        release(self._conn)

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- namespaces -------------------------------------------------------------------------

    def namespaces(self) -> list[dict[str, Any]]:
        """Every namespace of the archive, with its database and row counts (``faultline archive list``)."""
        return self._call(lambda c: list_namespaces(c, self._conn.base_database))

    def drop_namespace(self, namespace: str) -> str:
        """Remove another namespace's rows (its database); the live namespace is refused."""
        return self._call(lambda c: drop_namespace(c, self._conn.base_database, namespace))

    def _call(self, work: Callable[[Client], _T]) -> _T:
        return conn_call(self._conn, self.database, work)

    # --- writes -----------------------------------------------------------------------------

    def write_events(self, events: Sequence[Event | EventRows]) -> int:
        """Archive canonical events (checkpoint events also fill ``checkpoints``), as one columnar insert; the
        rows written. Events come as models, or as the rows the sink read from a record (:class:`EventRows`)."""
        columns = events_columns(events)
        if not columns:
            return 0
        token = _digest(["events", *columns[0]])
        self._call(lambda c: c.insert("events", columns, column_names=EVENT_COLUMNS, column_oriented=True,
                                      settings={"insert_deduplication_token": token}))
        return len(columns[0])

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

    def write_heartbeats(self, beats: Sequence[StageHeartbeat]) -> int:
        """Archive stages' heartbeats (``stage_heartbeats``), keyed by stage, instance and time."""
        rows = [tuple(getattr(b, c) for c in HEARTBEAT_COLUMNS) for b in beats]
        return self._insert("stage_heartbeats", HEARTBEAT_COLUMNS, rows,
                            [f"{b.stage}/{b.instance}@{b.at.isoformat()}" for b in beats])

    def _insert(self, table: str, columns: list[str], rows: list[tuple[Any, ...]], keys: list[str]) -> int:
        if not rows:
            return 0
        token = _digest([table, *keys])
        self._call(lambda c: c.insert(table, rows, column_names=columns,
                                      settings={"insert_deduplication_token": token}))
        return len(rows)

    # --- reads ------------------------------------------------------------------------------

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run a query (``{name:Type}`` placeholders bound from ``params``); rows as dicts."""
        return self._call(lambda c: list(c.query(sql, parameters=dict(params or {})).named_results()))

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
