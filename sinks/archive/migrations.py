"""The archive's schema, as an ordered list of versioned migrations.

:func:`migrate` applies, in order, every migration whose version is not yet in
``schema_migrations``; it runs whenever an :class:`~sinks.archive.store.Archive`
is opened. Statements are idempotent (``IF NOT EXISTS``), so a migration cut
short by a crash is simply applied again. Released migrations are never edited:
a schema change is a new entry at the end of :data:`MIGRATIONS`.

Every table is a ``ReplacingMergeTree`` keyed by the record's natural id, so a
batch delivered twice collapses to one row per id when read with ``FINAL`` or
through the ``*_latest`` views; non-replicated deduplication (insert tokens)
also drops an identical re-sent batch at insert time.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from clickhouse_connect.driver.client import Client

__all__ = [
    "DEFAULT_RAW_TTL_DAYS",
    "RAW_TELEMETRY_KINDS",
    "TABLES",
    "Migration",
    "MIGRATIONS",
    "applied_versions",
    "migrate",
    "set_raw_ttl",
]

DEFAULT_RAW_TTL_DAYS = 30
RAW_TELEMETRY_KINDS = ("gpu_sample", "agent_heartbeat")
"""Event kinds the ``events`` TTL deletes; every other event is kept."""

TABLES = (
    "events",
    "incident_versions",
    "commands",
    "command_results",
    "deadletters",
    "checkpoints",
    "gpu_ledger",
)
"""The archive's tables (all ReplacingMergeTree: read them with ``FINAL``)."""


class Migration(NamedTuple):
    version: int
    description: str
    statements: list[str]


_ENGINE = "ENGINE = ReplacingMergeTree"
# Remember recent insert tokens on plain (non-replicated) MergeTree tables too.
_SETTINGS = "SETTINGS non_replicated_deduplication_window = 10000"
_KINDS = ", ".join(f"'{kind}'" for kind in RAW_TELEMETRY_KINDS)


def _raw_ttl(days: int) -> str:
    # On ingestion time, not event time: a replayed capture from last year is
    # archived now and must not expire the moment it lands.
    return f"TTL toDateTime(ingested_at) + INTERVAL {int(days)} DAY DELETE WHERE kind IN ({_KINDS})"


_CORE = [
    f"""
    CREATE TABLE IF NOT EXISTS events (
        id String,
        ts DateTime64(3, 'UTC'),
        source LowCardinality(String),
        kind LowCardinality(String),
        node Nullable(String),
        job Nullable(String),
        rank Nullable(Int32),
        gpu Nullable(String),
        body String CODEC(ZSTD(3)),
        ingested_at DateTime64(3, 'UTC') DEFAULT now64(3),
        INDEX idx_job job TYPE bloom_filter GRANULARITY 4,
        INDEX idx_node node TYPE bloom_filter GRANULARITY 4,
        INDEX idx_ts ts TYPE minmax GRANULARITY 4
    ) {_ENGINE}
    ORDER BY id
    {_raw_ttl(DEFAULT_RAW_TTL_DAYS)}
    {_SETTINGS}
    """,
    f"""
    CREATE TABLE IF NOT EXISTS incident_versions (
        id String,
        version UInt32,
        job Nullable(String),
        category LowCardinality(String),
        culprit_node Nullable(String),
        culprit_gpus Array(String),
        opened_at DateTime64(3, 'UTC'),
        updated_at DateTime64(3, 'UTC'),
        severity LowCardinality(String),
        state LowCardinality(String),
        summary String,
        lost_gpu_hours Nullable(Float64),
        payload String
    ) {_ENGINE}
    ORDER BY (id, version)
    {_SETTINGS}
    """,
    f"""
    CREATE TABLE IF NOT EXISTS commands (
        id String,
        incident String,
        type LowCardinality(String),
        job Nullable(String),
        node Nullable(String),
        gpu Nullable(String),
        issued_at DateTime64(3, 'UTC'),
        requires_approval UInt8,
        params String,
        reason String,
        payload String
    ) {_ENGINE}
    ORDER BY id
    {_SETTINGS}
    """,
    f"""
    CREATE TABLE IF NOT EXISTS command_results (
        command String,
        executor LowCardinality(String),
        status LowCardinality(String),
        at DateTime64(3, 'UTC'),
        detail String
    ) {_ENGINE}
    ORDER BY (command, executor, status, at)
    {_SETTINGS}
    """,
    f"""
    CREATE TABLE IF NOT EXISTS deadletters (
        id String,
        stage LowCardinality(String),
        reason String,
        raw String CODEC(ZSTD(3)),
        at DateTime64(3, 'UTC')
    ) {_ENGINE}
    ORDER BY id
    {_SETTINGS}
    """,
]

_LATEST = [
    """
    CREATE VIEW IF NOT EXISTS incidents_latest AS
    SELECT id, version, job, category, culprit_node, culprit_gpus, opened_at, updated_at,
           severity, state, summary, lost_gpu_hours, payload
    FROM incident_versions FINAL
    ORDER BY id, version DESC
    LIMIT 1 BY id
    """,
]

# Derived tables, filled by materialized views as the source rows are inserted.
_DERIVED = [
    f"""
    CREATE TABLE IF NOT EXISTS checkpoints (
        job String,
        step Nullable(Int64),
        ts DateTime64(3, 'UTC'),
        status LowCardinality(String),
        path Nullable(String),
        bytes Nullable(Int64),
        seconds Nullable(Float64),
        error String,
        event_id String
    ) {_ENGINE}
    ORDER BY (job, ts, event_id)
    {_SETTINGS}
    """,
    """
    CREATE MATERIALIZED VIEW IF NOT EXISTS checkpoints_mv TO checkpoints AS
    SELECT ifNull(job, '') AS job,
           JSONExtract(body, 'step', 'Nullable(Int64)') AS step,
           ts,
           replaceOne(kind, 'checkpoint_', '') AS status,
           JSONExtract(body, 'path', 'Nullable(String)') AS path,
           JSONExtract(body, 'bytes', 'Nullable(Int64)') AS bytes,
           JSONExtract(body, 'seconds', 'Nullable(Float64)') AS seconds,
           JSONExtractString(body, 'error') AS error,
           id AS event_id
    FROM events
    WHERE kind IN ('checkpoint_saved', 'checkpoint_failed', 'checkpoint_loaded')
    """,
    f"""
    CREATE TABLE IF NOT EXISTS gpu_ledger (
        ts DateTime64(3, 'UTC'),
        node String,
        gpu String,
        state LowCardinality(String),
        reason String,
        command String,
        incident String
    ) {_ENGINE}
    ORDER BY (node, gpu, ts, state)
    {_SETTINGS}
    """,
    """
    CREATE MATERIALIZED VIEW IF NOT EXISTS gpu_ledger_mv TO gpu_ledger AS
    SELECT issued_at AS ts,
           ifNull(node, '') AS node,
           ifNull(gpu, '') AS gpu,
           multiIf(type = 'quarantine_gpu', 'quarantined', type = 'validate_gpu', 'validated', 'released') AS state,
           reason,
           id AS command,
           incident
    FROM commands
    WHERE type IN ('quarantine_gpu', 'validate_gpu', 'release_gpu')
    """,
]

# One row per thing that happened to an incident. Signals are the job's events,
# and the culprit node's job-less (hardware) events, from an hour before the
# incident opened to its latest update; periodic kinds are left out as noise.
_NOISE = "('gpu_sample', 'agent_heartbeat', 'trainer_heartbeat', 'train_step', 'end_of_capture')"
_TIMELINE = [
    f"""
    CREATE VIEW IF NOT EXISTS incident_timeline AS
    WITH spans AS (
        SELECT id AS incident, job, culprit_node AS node,
               opened_at - INTERVAL 1 HOUR AS since, greatest(opened_at, updated_at) AS until
        FROM incidents_latest
    )
    SELECT job, incident, ts, entry_type, what, detail
    FROM (
        SELECT s.job AS job, s.incident AS incident, e.ts AS ts,
               'signal' AS entry_type, toString(e.kind) AS what, e.body AS detail
        FROM events AS e FINAL
        INNER JOIN spans AS s ON e.job = s.job
        WHERE e.ts BETWEEN s.since AND s.until AND e.kind NOT IN {_NOISE}
        UNION ALL
        SELECT s.job, s.incident, e.ts, 'signal', toString(e.kind), e.body
        FROM events AS e FINAL
        INNER JOIN spans AS s ON e.node = s.node
        WHERE e.job IS NULL AND e.ts BETWEEN s.since AND s.until AND e.kind NOT IN {_NOISE}
        UNION ALL
        SELECT job, id, updated_at, 'incident',
               concat('v', toString(version), ' ', category, ' ', state, ' (', severity, ')'), summary
        FROM incident_versions FINAL
        UNION ALL
        SELECT coalesce(s.job, c.job), c.incident, c.issued_at, 'command', toString(c.type),
               concat(if(c.requires_approval = 1, '[needs approval] ', ''), c.reason, ' ', c.params)
        FROM commands AS c FINAL
        LEFT JOIN spans AS s ON c.incident = s.incident
        UNION ALL
        SELECT coalesce(s.job, c.job), c.incident, r.at, 'result', toString(r.status),
               concat(r.executor, ': ', r.detail)
        FROM command_results AS r FINAL
        INNER JOIN (SELECT id, incident, job FROM commands FINAL) AS c ON r.command = c.id
        LEFT JOIN spans AS s ON c.incident = s.incident
    )
    ORDER BY incident, ts
    """,
]

MIGRATIONS: list[Migration] = [
    Migration(1, "core tables: events, incident_versions, commands, command_results, deadletters", _CORE),
    Migration(2, "incidents_latest view", _LATEST),
    Migration(3, "checkpoints and gpu_ledger, filled by materialized views", _DERIVED),
    Migration(4, "incident_timeline view", _TIMELINE),
]

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version UInt32,
    description String,
    applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree ORDER BY version
"""


def applied_versions(client: Client) -> set[int]:
    """Versions recorded in ``schema_migrations`` (creating that table if needed)."""
    client.command(_BOOKKEEPING)
    return {int(row[0]) for row in client.query("SELECT version FROM schema_migrations FINAL").result_rows}


def migrate(client: Client) -> list[int]:
    """Apply the missing migrations in version order; return the versions applied now."""
    done = applied_versions(client)
    applied: list[int] = []
    for migration in sorted(MIGRATIONS, key=lambda m: m.version):
        if migration.version in done:
            continue
        for statement in migration.statements:
            client.command(statement)
        client.insert(
            "schema_migrations",
            [(migration.version, migration.description)],
            column_names=["version", "description"],
        )
        applied.append(migration.version)
    return applied


_TTL_DAYS = re.compile(r"toIntervalDay\((\d+)\)")


def set_raw_ttl(client: Client, days: int) -> bool:
    """Make raw telemetry expire ``days`` after ingestion; return whether the TTL changed."""
    if days < 1:
        raise ValueError(f"raw telemetry TTL must be at least one day, got {days}")
    engine = client.command(
        "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = 'events'"
    )
    current = _TTL_DAYS.search(str(engine))
    if current is not None and int(current.group(1)) == days:
        return False
    client.command(f"ALTER TABLE events MODIFY {_raw_ttl(days)}")
    return True
