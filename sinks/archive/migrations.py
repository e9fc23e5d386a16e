"""The archive's schema, as an ordered list of versioned migrations.

:func:`migrate` applies, in order, every migration whose version is not yet in
``schema_migrations``; it runs whenever an :class:`~sinks.archive.store.Archive`
is opened, in that namespace's database (each namespace has one, with its own
``schema_migrations``: :mod:`sinks.archive.namespaces`). Statements are idempotent (``IF NOT EXISTS``), so a migration cut
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

from sinks.archive.advice_views import advice_statements
from sinks.archive.health_tables import heartbeat_statements
from sinks.archive.lost_views import lost_statements

__all__ = [
    "DEFAULT_RAW_TTL_DAYS",
    "RAW_TELEMETRY_KINDS",
    "TABLES",
    "Migration",
    "MIGRATIONS",
    "NAMESPACE_REPORT_PREFIX",
    "applied_versions",
    "migrate",
    "namespace_reports",
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
    "stage_heartbeats",
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

def _gpu_ledger_mv(validating: str) -> str:
    """The view that fills ``gpu_ledger`` from GPU commands; ``validating``: the state a ``validate_gpu`` marks."""
    return f"""
    CREATE MATERIALIZED VIEW IF NOT EXISTS gpu_ledger_mv TO gpu_ledger AS
    SELECT issued_at AS ts,
           ifNull(node, '') AS node,
           ifNull(gpu, '') AS gpu,
           multiIf(type = 'quarantine_gpu', 'quarantined', type = 'validate_gpu', '{validating}', 'released') AS state,
           reason,
           id AS command,
           incident
    FROM commands
    WHERE type IN ('quarantine_gpu', 'validate_gpu', 'release_gpu')
    """


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
    _gpu_ledger_mv("validated"),
]



# A validate_gpu command asks for the GPU's diagnostics to be run: it is being validated, not
# validated (migration 3 said so, and a ledger reader took the GPU for proven). The state is part
# of the sort key, so earlier rows are copied under the new state and the old ones deleted.
_VALIDATING = [
    "DROP VIEW IF EXISTS gpu_ledger_mv",
    "INSERT INTO gpu_ledger SELECT ts, node, gpu, 'validating', reason, command, incident "
    "FROM gpu_ledger WHERE state = 'validated'",
    "ALTER TABLE gpu_ledger DELETE WHERE state = 'validated' SETTINGS mutations_sync = 1",
    _gpu_ledger_mv("validating"),
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

# --- the operators' questions (migration 5) ---------------------------------------------------
#
# Two layers. Fact views hold one row per thing (a node's latest inventory, a GPU, an XID, a job
# run, an incident with everything known about it) and can be filtered on their time column.
# Answer views (``report_*``) are parameterized views that aggregate the facts of an event-time
# window given in epoch milliseconds:
#     SELECT * FROM report_recovery(since_ms = 1767225600000, until_ms = 1769904000000)
# The `faultline report` command and the Grafana dashboards read the answer views.

_HARDWARE = (
    "('gpu_off_bus', 'gpu_memory_fault', 'gpu_ecc_degradation', 'gpu_thermal', 'gpu_nvlink_fault', "
    "'gpu_firmware_fault', 'power_supply_fault', 'node_down', 'node_hardware_fault', 'rack_outage')"
)
"""Root-cause categories that blame hardware (the contract's GPU, power, node and rack classes)."""
_STOPS_JOB = (
    "('rack_outage', 'power_supply_fault', 'node_hardware_fault', 'node_down', 'gpu_off_bus', "
    "'gpu_memory_fault', 'gpu_firmware_fault', 'gpu_nvlink_fault', 'cuda_oom', 'software_crash', "
    "'network_timeout', 'training_hang')"
)
"""Categories of failure incidents (the job stopped); the others are conditions of a running job."""
_WINDOW = "fromUnixTimestamp64Milli({since_ms:Int64}, 'UTC') AND fromUnixTimestamp64Milli({until_ms:Int64}, 'UTC')"
"""The answer views' event-time window. Epoch milliseconds, so that callers pass plain integer literals
(Grafana's ``${__from}``): older servers take only literals as parameterized views' arguments."""
_FAR_PAST = "toDateTime64('1970-01-01 00:00:00', 3, 'UTC')"

_FACTS = [
    # The latest inventory of every node (hardware changes rarely: the latest names the model).
    """
    CREATE VIEW IF NOT EXISTS node_inventory AS
    SELECT node,
           JSONExtract(body, 'rack', 'Nullable(String)') AS rack,
           length(JSONExtractArrayRaw(body, 'gpus')) AS gpu_count,
           JSONExtractArrayRaw(body, 'gpus') AS gpus_json,
           seen_at
    FROM (
        SELECT assumeNotNull(node) AS node, argMax(body, ts) AS body, max(ts) AS seen_at
        FROM events FINAL
        WHERE kind = 'inventory' AND node IS NOT NULL
        GROUP BY node
    )
    """,
    """
    CREATE VIEW IF NOT EXISTS gpu_inventory AS
    SELECT node, rack,
           toInt32(JSONExtractInt(g, 'index')) AS gpu_index,
           JSONExtract(g, 'uuid', 'Nullable(String)') AS uuid,
           JSONExtract(g, 'pci', 'Nullable(String)') AS pci,
           if(JSONExtractString(g, 'name') = '', 'unknown', JSONExtractString(g, 'name')) AS gpu_name,
           JSONExtract(g, 'power_domain', 'Nullable(String)') AS power_domain,
           seen_at
    FROM node_inventory
    ARRAY JOIN gpus_json AS g
    """,
    # Every spelling a GPU went by (UUID, index, short PCI bus id) in any inventory, to name the GPUs
    # that events and incidents refer to; an index or PCI id means the GPU there most recently.
    """
    CREATE VIEW IF NOT EXISTS gpu_keys AS
    SELECT node, key, argMax(g_index, ts) AS gpu_index, argMax(g_uuid, ts) AS uuid,
           argMax(g_name, ts) AS gpu_name, argMax(g_rack, ts) AS rack
    FROM (
        SELECT assumeNotNull(node) AS node, ts,
               if(JSONExtractString(body, 'rack') = '', 'unknown', JSONExtractString(body, 'rack')) AS g_rack,
               toInt32(JSONExtractInt(g, 'index')) AS g_index,
               JSONExtractString(g, 'uuid') AS g_uuid,
               lower(JSONExtractString(g, 'pci')) AS g_pci,
               if(JSONExtractString(g, 'name') = '', 'unknown', JSONExtractString(g, 'name')) AS g_name
        FROM events FINAL
        ARRAY JOIN JSONExtractArrayRaw(body, 'gpus') AS g
        WHERE kind = 'inventory' AND node IS NOT NULL
    )
    ARRAY JOIN arrayFilter(k -> k != '', [g_uuid, toString(g_index), g_pci]) AS key
    GROUP BY node, key
    """,
    """
    CREATE VIEW IF NOT EXISTS xid_events AS
    SELECT e.ts AS ts, assumeNotNull(e.node) AS node, if(n.rack IS NULL, 'unknown', n.rack) AS rack,
           toUInt32(JSONExtractUInt(e.body, 'code')) AS code, ifNull(e.gpu, '') AS gpu,
           if(k.gpu_name = '', 'unknown', k.gpu_name) AS gpu_name,
           JSONExtractString(e.body, 'message') AS message, e.job AS job
    FROM events AS e FINAL
    LEFT JOIN node_inventory AS n ON n.node = e.node
    LEFT JOIN gpu_keys AS k ON k.node = e.node AND k.key = ifNull(e.gpu, '')
    WHERE e.kind = 'xid' AND e.node IS NOT NULL
    """,
    # One row per job_started: a run of the job, with its size and checkpoint policy.
    """
    CREATE VIEW IF NOT EXISTS job_runs AS
    SELECT assumeNotNull(job) AS job, ts AS started_at,
           toUInt32(if(JSONExtractUInt(body, 'world_size') > 0, JSONExtractUInt(body, 'world_size'),
               arraySum(a -> length(JSONExtractArrayRaw(a, 'gpus')), JSONExtractArrayRaw(body, 'allocation'))))
               AS world_size,
           JSONExtract(body, 'checkpoint', 'interval_s', 'Nullable(Float64)') AS checkpoint_interval_s,
           JSONExtract(body, 'gpu_class', 'Nullable(String)') AS gpu_class,
           JSONExtract(body, 'owner', 'Nullable(String)') AS owner,
           arrayMap(a -> JSONExtractString(a, 'node'), JSONExtractArrayRaw(body, 'allocation')) AS nodes
    FROM events FINAL
    WHERE kind = 'job_started' AND job IS NOT NULL
    """,
    # Culprit GPUs of every incident, named by the inventory (a culprit may be a UUID, an index or a PCI id).
    """
    CREATE VIEW IF NOT EXISTS incident_gpus AS
    SELECT i.id AS incident, i.job AS job, i.category AS category, i.opened_at AS opened_at,
           ifNull(i.culprit_node, '') AS node, g AS gpu,
           if(k.gpu_name = '', 'unknown', k.gpu_name) AS gpu_name,
           if(k.rack = '', 'unknown', k.rack) AS rack,
           i.lost_gpu_hours AS lost_gpu_hours
    FROM incidents_latest AS i
    ARRAY JOIN i.culprit_gpus AS g
    LEFT JOIN gpu_keys AS k
        ON k.node = ifNull(i.culprit_node, '')
        AND k.key = multiIf(startsWith(g, 'GPU-'), g, match(g, '^[0-9]+$'), g,
                            extract(lower(g), '([0-9a-f]{2}:[0-9a-f]{2})([.][0-9a-f])?$'))
    """,
    # One row per incident with what the operators ask about it:
    #   first_restart_outcome  what the incident did next after its first restart: resolved, failed_again
    #                          (back to open: reopened, or more hardware), escalated, closed, or pending;
    #                          'not_restarted' without a restart
    #   resolved_at, ttr_s     when it was last resolved (if it ends resolved or closed) and the time to
    #                          recovery from opened_at
    #   checkpoint_age_s       at the failure (opened_at), the age of the job's newest saved checkpoint, or
    #                          of the run's start when that is later: the compute the failure throws away
    #   lost_gpu_hours_at_failure  checkpoint_age_s x the run's GPUs, in GPU-hours (failure incidents only)
    f"""
    CREATE VIEW IF NOT EXISTS incident_facts AS
    WITH
        history AS (
            SELECT id, arraySort(x -> x.1, groupArray((version, state, updated_at))) AS h
            FROM incident_versions FINAL
            GROUP BY id
        ),
        lifecycle AS (
            SELECT id,
                   arrayFirstIndex(x -> x.2 IN ('restarting', 'awaiting_approval'), h) AS ri,
                   if(ri = 0, NULL, h[ri].3) AS first_restart_at,
                   arrayFirst(x -> x.2 IN ('resolved', 'escalated', 'open', 'closed'), arraySlice(h, ri + 1)).2
                       AS after_restart,
                   arrayFilter(x -> x.2 = 'resolved', h) AS resolutions
            FROM history
        ),
        restarts AS (
            SELECT incident, count() AS restarts
            FROM commands FINAL
            WHERE type = 'restart_job'
            GROUP BY incident
        ),
        saved AS (
            SELECT job, ts AS saved_at FROM checkpoints FINAL WHERE status = 'saved' AND job != ''
        ),
        base AS (
            SELECT i.id AS id, i.job AS job, ifNull(i.job, '') AS job_key, i.category AS category,
                   i.severity AS severity, i.state AS state, i.opened_at AS opened_at,
                   i.updated_at AS updated_at, i.culprit_node AS culprit_node,
                   i.culprit_gpus AS culprit_gpus, i.lost_gpu_hours AS lost_gpu_hours,
                   l.first_restart_at AS first_restart_at, l.after_restart AS after_restart,
                   l.ri AS ri, l.resolutions AS resolutions
            FROM incidents_latest AS i
            LEFT JOIN lifecycle AS l ON l.id = i.id
        )
    SELECT b.id AS id, b.job AS job, b.category AS category,
           toBool(b.category IN {_HARDWARE}) AS is_hardware,
           toBool(b.category IN {_STOPS_JOB}) AS stops_job,
           b.severity AS severity, b.state AS state, b.opened_at AS opened_at, b.updated_at AS updated_at,
           b.culprit_node AS culprit_node,
           if(b.culprit_node IS NULL, NULL, if(n.rack IS NULL OR n.rack = '', 'unknown', n.rack)) AS culprit_rack,
           b.culprit_gpus AS culprit_gpus, b.lost_gpu_hours AS lost_gpu_hours,
           ifNull(r.restarts, 0) AS restarts,
           b.first_restart_at AS first_restart_at,
           multiIf(b.ri = 0, 'not_restarted', b.after_restart = 'resolved', 'resolved',
                   b.after_restart = 'open', 'failed_again', b.after_restart = 'escalated', 'escalated',
                   b.after_restart = 'closed', 'closed', 'pending') AS first_restart_outcome,
           if(b.state IN ('resolved', 'closed') AND notEmpty(b.resolutions),
              arrayMax(x -> x.3, b.resolutions), NULL) AS resolved_at,
           if(resolved_at IS NULL, NULL, dateDiff('millisecond', b.opened_at, resolved_at) / 1000) AS ttr_s,
           if(c.saved_at > {_FAR_PAST}, c.saved_at, NULL) AS checkpoint_at,
           if(j.started_at > {_FAR_PAST}, j.started_at, NULL) AS run_started_at,
           if(j.started_at > {_FAR_PAST}, j.world_size, NULL) AS run_world_size,
           if(b.job IS NULL OR NOT stops_job OR (checkpoint_at IS NULL AND run_started_at IS NULL), NULL,
              dateDiff('millisecond', greatest(ifNull(checkpoint_at, {_FAR_PAST}), ifNull(run_started_at, {_FAR_PAST})),
                       b.opened_at) / 1000) AS checkpoint_age_s,
           if(checkpoint_age_s IS NULL OR run_world_size IS NULL, NULL,
              round(checkpoint_age_s * run_world_size / 3600, 3)) AS lost_gpu_hours_at_failure
    FROM base AS b
    LEFT JOIN restarts AS r ON r.incident = b.id
    LEFT JOIN node_inventory AS n ON n.node = ifNull(b.culprit_node, '')
    ASOF LEFT JOIN saved AS c ON c.job = b.job_key AND c.saved_at <= b.opened_at
    ASOF LEFT JOIN job_runs AS j ON j.job = b.job_key AND j.started_at <= b.opened_at
    """,
]

# Answer views: parameterized by the event-time window [since_ms, until_ms] (epoch milliseconds).
_ANSWERS = [
    # How often jobs fail for hardware: the share of job incidents whose category blames hardware.
    f"""
    CREATE VIEW IF NOT EXISTS report_hardware_share AS
    SELECT count() AS job_incidents,
           countIf(is_hardware) AS hardware_incidents,
           if(count() = 0, NULL, round(countIf(is_hardware) / count(), 4)) AS hardware_share,
           uniqExact(job) AS jobs,
           uniqExactIf(job, is_hardware) AS jobs_hit_by_hardware
    FROM incident_facts
    WHERE job IS NOT NULL AND opened_at BETWEEN {_WINDOW}
    """,
    f"""
    CREATE VIEW IF NOT EXISTS report_failure_causes AS
    SELECT category, any(is_hardware) AS is_hardware, count() AS incidents, uniqExact(job) AS jobs,
           round(count() / sum(count()) OVER (), 4) AS share,
           round(sum(ifNull(lost_gpu_hours, 0)), 3) AS lost_gpu_hours
    FROM incident_facts
    WHERE job IS NOT NULL AND opened_at BETWEEN {_WINDOW}
    GROUP BY category
    ORDER BY incidents DESC, category
    """,
    # Which GPU models cost the most lost GPU-hours: an incident's lost_gpu_hours are split evenly
    # between the models of its culprit GPUs (normally one).
    f"""
    CREATE VIEW IF NOT EXISTS report_gpu_models AS
    SELECT gpu_name, uniqExact(incident) AS incidents, sum(gpus) AS culprit_gpus,
           groupUniqArray(category) AS categories,
           round(sum(lost_share), 3) AS lost_gpu_hours
    FROM (
        SELECT incident, gpu_name, any(category) AS category, count() AS gpus,
               any(ifNull(lost_gpu_hours, 0)) / count() OVER (PARTITION BY incident) AS lost_share
        FROM incident_gpus
        WHERE opened_at BETWEEN {_WINDOW}
        GROUP BY incident, gpu_name
    )
    GROUP BY gpu_name
    ORDER BY lost_gpu_hours DESC, incidents DESC, gpu_name
    """,
    # Average compute lost between checkpoints: per job (and over all jobs), the age of the newest
    # checkpoint when a failure struck, and what that cost in GPU-hours.
    f"""
    CREATE VIEW IF NOT EXISTS report_checkpoint_loss AS
    SELECT if(grouping(j) = 1, '(all jobs)', j) AS job,
           count() AS failures,
           round(avg(checkpoint_age_s), 1) AS avg_checkpoint_age_s,
           round(max(checkpoint_age_s), 1) AS max_checkpoint_age_s,
           round(avg(lost_gpu_hours_at_failure), 3) AS avg_lost_gpu_hours,
           round(sum(lost_gpu_hours_at_failure), 3) AS lost_gpu_hours
    FROM (
        SELECT assumeNotNull(job) AS j, checkpoint_age_s, lost_gpu_hours_at_failure
        FROM incident_facts
        WHERE stops_job AND job IS NOT NULL AND checkpoint_age_s IS NOT NULL AND opened_at BETWEEN {_WINDOW}
    )
    GROUP BY GROUPING SETS ((j), ())
    ORDER BY job = '(all jobs)', lost_gpu_hours DESC, job
    """,
    # Mean time to recovery: opened_at -> the resolved state's updated_at, of failure incidents.
    f"""
    CREATE VIEW IF NOT EXISTS report_recovery AS
    SELECT if(grouping(c) = 1, '(all)', c) AS category,
           count() AS incidents,
           countIf(ttr_s IS NOT NULL) AS recovered,
           countIf(state = 'escalated') AS escalated,
           countIf(state NOT IN ('resolved', 'closed', 'escalated')) AS still_open,
           if(recovered = 0, NULL, round(avgIf(ttr_s, ttr_s IS NOT NULL), 1)) AS mttr_s,
           if(recovered = 0, NULL, round(quantileExactIf(0.5)(ttr_s, ttr_s IS NOT NULL), 1)) AS median_ttr_s,
           if(recovered = 0, NULL, round(maxIf(ttr_s, ttr_s IS NOT NULL), 1)) AS max_ttr_s
    FROM (
        SELECT toString(category) AS c, ttr_s, state
        FROM incident_facts
        WHERE stops_job AND opened_at BETWEEN {_WINDOW}
    )
    GROUP BY GROUPING SETS ((c), ())
    ORDER BY category = '(all)', incidents DESC, category
    """,
    # How often the first restart succeeds: what each restarted incident did after its first restart.
    f"""
    CREATE VIEW IF NOT EXISTS report_first_restart AS
    SELECT if(grouping(c) = 1, '(all)', c) AS category,
           count() AS restarted,
           countIf(first_restart_outcome = 'resolved') AS resolved,
           countIf(first_restart_outcome = 'failed_again') AS failed_again,
           countIf(first_restart_outcome = 'escalated') AS escalated,
           countIf(first_restart_outcome IN ('pending', 'closed')) AS undecided,
           if(resolved + failed_again + escalated = 0, NULL,
              round(resolved / (resolved + failed_again + escalated), 4)) AS success_rate
    FROM (
        SELECT toString(category) AS c, first_restart_outcome
        FROM incident_facts
        WHERE first_restart_at IS NOT NULL AND opened_at BETWEEN {_WINDOW}
    )
    GROUP BY GROUPING SETS ((c), ())
    ORDER BY category = '(all)', restarted DESC, category
    """,
    # Whether checkpoint writes are getting slower: per job, the mean write time of the first and
    # the second half of its saves in the window, and the least-squares slope in seconds per day.
    f"""
    CREATE VIEW IF NOT EXISTS report_checkpoint_trend AS
    SELECT job, count() AS saves, min(ts) AS first_at, max(ts) AS last_at,
           round(avg(seconds), 2) AS avg_seconds,
           if(countIf(rn <= n / 2) = 0, NULL, round(avgIf(seconds, rn <= n / 2), 2)) AS first_half_s,
           if(countIf(rn > n / 2) = 0, NULL, round(avgIf(seconds, rn > n / 2), 2)) AS second_half_s,
           if(first_half_s IS NULL OR first_half_s = 0, NULL,
              round((second_half_s - first_half_s) / first_half_s * 100, 1)) AS change_pct,
           if(count() < 2 OR max(hours) = 0, NULL,
              round(simpleLinearRegression(hours, seconds).1 * 24, 3)) AS slope_s_per_day,
           multiIf(count() < 4, 'too few saves', change_pct > 20, 'slower', change_pct < -20, 'faster',
                   'steady') AS trend
    FROM (
        SELECT job, ts, assumeNotNull(seconds) AS seconds,
               row_number() OVER (PARTITION BY job ORDER BY ts, event_id) AS rn,
               count() OVER (PARTITION BY job) AS n,
               dateDiff('millisecond', min(ts) OVER (PARTITION BY job), ts) / 3600000 AS hours
        FROM checkpoints FINAL
        WHERE status = 'saved' AND seconds IS NOT NULL AND job != '' AND ts BETWEEN {_WINDOW}
    )
    GROUP BY job
    ORDER BY change_pct DESC NULLS LAST, job
    """,
    # Which racks and nodes concentrate faults: incidents by culprit rack (ranked first), then by node.
    f"""
    CREATE VIEW IF NOT EXISTS report_fault_hotspots AS
    SELECT r AS rack, if(grouping(n) = 1, '(whole rack)', n) AS node,
           count() AS incidents, countIf(is_hardware) AS hardware_incidents, uniqExact(job) AS jobs,
           groupUniqArray(category) AS categories,
           round(sum(ifNull(lost_gpu_hours, 0)), 3) AS lost_gpu_hours,
           max(opened_at) AS last_at
    FROM (
        SELECT ifNull(culprit_rack, 'unknown') AS r, assumeNotNull(culprit_node) AS n,
               is_hardware, job, category, lost_gpu_hours, opened_at
        FROM incident_facts
        WHERE culprit_node IS NOT NULL AND opened_at BETWEEN {_WINDOW}
    )
    GROUP BY GROUPING SETS ((r, n), (r))
    ORDER BY node = '(whole rack)' DESC, hardware_incidents DESC, incidents DESC, rack, node
    """,
]

# --- lemons (migration 6) -----------------------------------------------------------------------
#
# What a lemon score is made of, as the archive keeps it: every failure incident of a job blamed on
# software or an unknown cause (the categories that stop a job but blame no hardware), once per GPU
# it names as culprit (a row with gpu '' when it names only the node), with the share of blame each
# GPU takes (1 / culprit_gpus). `faultline report lemons` scores these rows with the correlator's own
# arithmetic and policy (correlators/lemons.py: weights, half-life), so the archive and the
# correlator agree on every GPU's score; `lemon_fences` holds what the correlator fenced for it,
# with the score and the incidents it was fenced on (the command's params).
_UNEXPLAINED = "('software_crash', 'network_timeout', 'training_hang', 'cuda_oom')"

_LEMONS = [
    f"""
    CREATE VIEW IF NOT EXISTS lemon_implications AS
    SELECT i.id AS incident, assumeNotNull(i.job) AS job, i.category AS category, i.opened_at AS opened_at,
           i.state AS state, assumeNotNull(i.culprit_node) AS node, g AS gpu,
           length(i.culprit_gpus) AS culprit_gpus,
           if(g = '', NULL, k.gpu_index) AS gpu_index,
           i.lost_gpu_hours AS lost_gpu_hours
    FROM incidents_latest AS i
    LEFT ARRAY JOIN i.culprit_gpus AS g
    LEFT JOIN gpu_keys AS k
        ON k.node = ifNull(i.culprit_node, '')
        AND k.key = multiIf(startsWith(g, 'GPU-'), g, match(g, '^[0-9]+$'), g,
                            extract(lower(g), '([0-9a-f]{{2}}:[0-9a-f]{{2}})([.][0-9a-f])?$'))
    WHERE i.job IS NOT NULL AND i.culprit_node IS NOT NULL AND i.category IN {_UNEXPLAINED}
    """,
    """
    CREATE VIEW IF NOT EXISTS lemon_fences AS
    SELECT id AS command, incident, type, ifNull(node, '') AS node, ifNull(gpu, '') AS gpu, issued_at,
           JSONExtractFloat(params, 'score') AS score, JSONExtractFloat(params, 'threshold') AS threshold,
           JSONExtract(params, 'incidents', 'Array(String)') AS evidence,
           JSONExtract(params, 'jobs', 'Array(String)') AS jobs, reason
    FROM commands FINAL
    WHERE type IN ('quarantine_gpu', 'cordon_node') AND JSONExtractString(params, 'reason') = 'lemon'
    """,
]

# --- the questions of any namespace, for Grafana (migration 11) ---------------------------------
#
# ClickHouse cannot call a parameterized view qualified with a database whose name holds a dot
# (`faultline.replay-x`.report_recovery(...) is "Unknown table function"), and replays', demos' and
# cells' databases have one. A view's ``{db:Identifier}`` parameter can name the database its body
# reads, though: ``ns_report_X`` is ``report_X`` with every archive table and view it reads
# qualified with ``{db:Identifier}``, called from the data source's own database:
#     SELECT * FROM ns_report_recovery(db = 'faultline.replay-x', since_ms = ..., until_ms = ...)
# The copies are derived from the report views' own statements (the latest definition of each), so
# they cannot drift from them; a migration that redefines a report_* view adds a step regenerating
# them (:func:`namespace_reports`; tests/sinks/test_migrations.py checks it).

NAMESPACE_REPORT_PREFIX = "ns_"
_CREATED = re.compile(r"CREATE (?:OR REPLACE )?(?:MATERIALIZED VIEW|VIEW|TABLE) (?:IF NOT EXISTS )?(\w+)")
_REPORT = re.compile(r"CREATE (?:OR REPLACE )?VIEW (?:IF NOT EXISTS )?(report_\w+) AS")
_READ = re.compile(r"\b(FROM|JOIN)\s+(?!\()([\w{}:.]+)")


def namespace_reports(statements: list[str]) -> list[str]:
    """``ns_report_*``: each ``report_*`` view of ``statements`` (its latest definition there) reading the
    database its ``db`` parameter names; every other relation ``statements`` create is qualified with it."""
    relations = {m.group(1) for s in statements for m in [_CREATED.search(s)] if m}
    latest: dict[str, str] = {}
    for statement in statements:
        found = _REPORT.search(statement)
        if found:
            latest[found.group(1)] = statement
    return [_namespace_report(name, statement, relations) for name, statement in sorted(latest.items())]


def _namespace_report(name: str, statement: str, relations: set[str]) -> str:
    body = statement[_REPORT.search(statement).end():]  # type: ignore[union-attr]
    local = set(re.findall(r"\b(\w+) AS \(", body))  # the body's own WITH subqueries
    if local & relations:
        raise ValueError(f"{name}: a WITH subquery named like an archive relation: {sorted(local & relations)}")

    def qualify(m: re.Match[str]) -> str:
        target = m.group(2)
        if target in relations:
            return f"{m.group(1)} {{db:Identifier}}.{target}"
        if target in local:
            return m.group(0)
        raise ValueError(f"{name} reads {target!r}, neither an archive relation nor its own subquery")

    return f"CREATE OR REPLACE VIEW {NAMESPACE_REPORT_PREFIX}{name} AS{_READ.sub(qualify, body)}"


_EARLIER: list[Migration] = [
    Migration(1, "core tables: events, incident_versions, commands, command_results, deadletters", _CORE),
    Migration(2, "incidents_latest view", _LATEST),
    Migration(3, "checkpoints and gpu_ledger, filled by materialized views", _DERIVED),
    Migration(4, "incident_timeline view", _TIMELINE),
    Migration(5, "operator questions: fact views and report_* answer views", _FACTS + _ANSWERS),
    Migration(6, "lemons: lemon_implications and lemon_fences views", _LEMONS),
    Migration(7, "gpu_ledger: a validate_gpu command marks the GPU validating, not validated", _VALIDATING),
    Migration(8, "lost GPU-hours count the time a job is down until it runs again",
              lost_statements(_HARDWARE, _STOPS_JOB, _FAR_PAST)),
    Migration(9, "where the lost hours went (report_lost_phases) and checkpoint advice (checkpoint_advice)",
              advice_statements(_HARDWARE, _STOPS_JOB, _WINDOW)),
    Migration(10, "stage_heartbeats: each stage's own heartbeat, for status", heartbeat_statements(_ENGINE, _SETTINGS)),
]

MIGRATIONS: list[Migration] = [
    *_EARLIER,
    Migration(11, "ns_report_* views: the report_* answers of the namespace whose database db names, for Grafana",
              namespace_reports([s for m in _EARLIER for s in m.statements])),
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
