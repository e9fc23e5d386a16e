"""Schema migrations: applied once, in order, recorded in ``schema_migrations``."""

from __future__ import annotations

import re

from sinks.archive import MIGRATIONS, Archive, migrate
from sinks.archive.migrations import TABLES, applied_versions, set_raw_ttl

VIEWS = ("incidents_latest", "incident_timeline", "checkpoints_mv", "gpu_ledger_mv", "lemon_implications", "lemon_fences")


def _names(archive: Archive) -> set[str]:
    rows = archive.query("SELECT name FROM system.tables WHERE database = currentDatabase()")
    return {row["name"] for row in rows}


def test_versions_are_unique_and_increasing() -> None:
    versions = [m.version for m in MIGRATIONS]
    assert versions == sorted(set(versions))
    assert all(m.statements and m.description for m in MIGRATIONS)


def test_fresh_directory_is_migrated(archive: Archive) -> None:
    assert _names(archive) >= {*TABLES, *VIEWS, "schema_migrations"}
    recorded = archive.query("SELECT version, description FROM schema_migrations FINAL ORDER BY version")
    assert [(r["version"], r["description"]) for r in recorded] == [(m.version, m.description) for m in MIGRATIONS]


def test_reopening_applies_nothing_again(archive_url: str) -> None:
    with Archive.open(archive_url) as first:
        before = first.query("SELECT version, applied_at FROM schema_migrations ORDER BY version")
    with Archive.open(archive_url) as second:
        after = second.query("SELECT version, applied_at FROM schema_migrations ORDER BY version")
        assert after == before  # no second row per version: nothing was re-applied
        assert len(after) == len(MIGRATIONS)


def test_migrate_twice_is_a_no_op(archive: Archive) -> None:
    client = archive.client
    assert migrate(client) == []
    assert applied_versions(client) == {m.version for m in MIGRATIONS}


def test_missing_versions_are_applied(archive: Archive) -> None:
    client = archive.client
    last = MIGRATIONS[-1]
    created = re.search(r"CREATE (?:VIEW|TABLE) IF NOT EXISTS (\w+)", last.statements[-1])
    assert created, "the last migration should create something"
    name = created.group(1)
    client.command(f"DROP TABLE {name}")
    client.command(f"DELETE FROM schema_migrations WHERE version = {last.version}")
    assert migrate(client) == [last.version]
    assert name in _names(archive)


def test_raw_telemetry_ttl_is_configurable(archive_url: str) -> None:
    with Archive.open(archive_url, raw_ttl_days=7) as archive:
        engine = archive.query("SELECT engine_full FROM system.tables WHERE name = 'events'")[0]["engine_full"]
        assert "toIntervalDay(7)" in engine and "gpu_sample" in engine and "agent_heartbeat" in engine
        assert set_raw_ttl(archive.client, 7) is False
