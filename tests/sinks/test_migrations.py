"""Schema migrations: applied once, in order, recorded in ``schema_migrations``."""

from __future__ import annotations

import re

from sinks.archive import MIGRATIONS, Archive, migrate
from sinks.archive.migrations import (
    _VALIDATING,
    NAMESPACE_REPORT_PREFIX,
    TABLES,
    applied_versions,
    namespace_reports,
    set_raw_ttl,
)

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
    created = re.search(r"CREATE (?:OR REPLACE )?(?:MATERIALIZED VIEW|VIEW|TABLE) (?:IF NOT EXISTS )?(\w+)", last.statements[-1])
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


def test_an_archive_that_said_validated_is_moved_to_validating(archive: Archive) -> None:
    """An archive made before migration 7 marked a GPU under diagnostics 'validated'; migrating says 'validating'."""
    client = archive.client
    for statement in _VALIDATING:  # undo 7: the old view, and a row as it wrote it
        if statement.startswith("CREATE"):
            client.command(statement.replace("'validating'", "'validated'"))
        elif statement.startswith("DROP"):
            client.command(statement)
    client.command("INSERT INTO gpu_ledger VALUES ('2026-04-22 01:00:00', 'n1', 'GPU-3', 'validated', 'XID 79', "
                   "'cmd-validate', 'inc-1')")
    client.command("DELETE FROM schema_migrations WHERE version = 7")
    assert migrate(client) == [7]
    rows = archive.query("SELECT state, command FROM gpu_ledger FINAL")
    assert [(r["state"], r["command"]) for r in rows] == [("validating", "cmd-validate")]


def _created(statement: str) -> str:
    found = re.search(r"CREATE (?:OR REPLACE )?(?:MATERIALIZED VIEW|VIEW|TABLE) (?:IF NOT EXISTS )?(\w+)", statement)
    return found.group(1) if found else ""


def test_every_report_view_has_a_namespace_copy_of_its_latest_definition() -> None:
    """``ns_report_X`` is derived from ``report_X``'s latest statement: a migration that redefines a
    report view must be followed by one regenerating the copies (the copies must not go stale)."""
    statements = [s for m in MIGRATIONS for s in m.statements]
    latest_copies = {_created(s): s for s in statements if _created(s).startswith(NAMESPACE_REPORT_PREFIX)}
    derived = {_created(s): s for s in namespace_reports(statements)}
    assert len(derived) == 9 and latest_copies == derived


def test_a_namespace_copy_reads_only_the_database_it_is_given() -> None:
    """Every archive relation a copy reads is qualified with ``{db:Identifier}``; only its own WITH
    subqueries are read unqualified."""
    for statement in namespace_reports([s for m in MIGRATIONS for s in m.statements]):
        read = re.findall(r"\b(?:FROM|JOIN)\s+(?!\()(\S+)", statement)
        assert read, statement
        unqualified = {r for r in read if not r.startswith("{db:Identifier}.")}
        assert unqualified <= {"published", "restarts", "done", "cut"}, (_created(statement), unqualified)


def test_a_copy_answers_for_a_namespace_whose_database_has_a_dot(archive_url: str) -> None:
    """`a.b-c`.report_x(...) is not callable; ns_report_x(db = 'a.b-c', ...) from the live database is,
    and gives what report_x gives in that database."""
    with Archive.open(archive_url, "t.dotted-ns", live="faultline") as other:
        other.client.command("INSERT INTO incident_versions (id, version, job, category, opened_at, updated_at, "
                             "severity, state, summary, payload) VALUES ('i1', 1, 'j-dotted', 'gpu_off_bus', "
                             "'2026-01-01 00:00:00', '2026-01-01 00:10:00', 'page', 'open', '', '{}')")
        own = other.query("SELECT * FROM report_hardware_share(since_ms = 0, until_ms = 1900000000000)")
        database = other.database
    assert "." in database and "-" in database
    with Archive.open(archive_url, live="faultline") as live:
        args = "since_ms = 0, until_ms = 1900000000000"
        shown = live.query(f"SELECT * FROM ns_report_hardware_share(db = '{database}', {args})")
        assert shown == own and shown[0]["job_incidents"] == 1
        assert live.query(f"SELECT * FROM ns_report_hardware_share(db = '{live.database}', {args})"
                          )[0]["job_incidents"] == 0
