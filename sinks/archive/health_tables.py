"""The archive's table of stage heartbeats (:mod:`streams.health`), in a module of its own.

``stage_heartbeats`` keeps every heartbeat the sink consumed for a week (``TTL`` on the beat's own
time): `faultline status` reads each instance's newest one, and that is all it is for. Keyed by
``(stage, instance, at)``, so a re-delivered beat collapses to one row.
"""

from __future__ import annotations

__all__ = ["HEARTBEAT_COLUMNS", "HEARTBEAT_TTL_DAYS", "heartbeat_statements"]

HEARTBEAT_TTL_DAYS = 7
HEARTBEAT_COLUMNS = ["stage", "instance", "version", "dev_mode", "interval_s", "lag", "started_at", "at"]


def heartbeat_statements(engine: str, settings: str) -> list[str]:
    """The DDL of migration 10 (``engine`` and ``settings`` as every other archive table has them)."""
    return [f"""
    CREATE TABLE IF NOT EXISTS stage_heartbeats (
        stage LowCardinality(String),
        instance String,
        version LowCardinality(String),
        dev_mode Bool,
        interval_s Float64,
        lag Nullable(Int64),
        started_at DateTime64(3, 'UTC'),
        at DateTime64(3, 'UTC')
    ) {engine}
    ORDER BY (stage, instance, at)
    TTL toDateTime(at) + INTERVAL {HEARTBEAT_TTL_DAYS} DAY
    {settings}
    """]
