"""Namespaces in the archive: each its own database; replays never in the live one; dropped on demand."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import clickhouse_connect
import pytest

from faultline.cli import main
from faultline.operator_views import status_data
from sinks.archive import migrations
from sinks.archive.endpoint_file import EndpointFile
from sinks.archive.namespaces import NamespaceError
from sinks.archive.store import (
    _COMMAND_COLUMNS,
    _INCIDENT_COLUMNS,
    EVENT_COLUMNS,
    Archive,
    _command_row,
    _incident_row,
    event_row,
)
from sinks.report import build_report
from streams.decisions import Culprit, Incident

from .records import at, sample_records
from .test_archive_endpoint import owner

LIVE = "faultline"
REPLAY = "faultline.replay-0123456789"


def _fill(archive: Archive) -> None:
    s = sample_records()
    archive.write_events(s.events)
    archive.write_incidents(s.incidents)
    archive.write_commands(s.commands)
    archive.write_results(s.results)
    archive.write_deadletters(s.deadletters)


def _open_oom() -> Incident:
    """An incident only the replay has: open, on another job."""
    return Incident(id="inc-replay-only", job="j-replay", category="cuda_oom", culprit=Culprit(node="n7"),
                    opened_at=at(50), updated_at=at(50), severity="page", state="open", version=1)


def test_each_namespace_sees_only_its_own_rows(archive_url: str) -> None:
    with Archive.open(archive_url, LIVE) as live, Archive.open(archive_url, REPLAY, live=LIVE) as replay:
        assert live.database == "default" and replay.database == REPLAY
        _fill(live)
        _fill(replay)  # the same ids in both: kept apart, not replaced by one another
        replay.write_incidents([_open_oom()])
        s = sample_records()
        for archive in (live, replay):
            assert archive.count("events") == len(s.events) and archive.count("commands") == len(s.commands)
        assert [i["id"] for i in live.latest_incidents()] == ["inc-1"]
        assert {i["id"] for i in replay.latest_incidents()} == {"inc-1", "inc-replay-only"}
        assert status_data(live)["open_incidents"] == []
        assert [i["id"] for i in status_data(replay)["open_incidents"]] == ["inc-replay-only"]
        causes = {r["category"] for r in build_report(live).sections["failure_causes"]}
        assert "cuda_oom" not in causes and "gpu_off_bus" in causes
        assert "cuda_oom" in {r["category"] for r in build_report(replay).sections["failure_causes"]}
        assert not live.timeline("inc-replay-only") and replay.timeline("inc-replay-only")


def test_a_replay_is_dropped_and_the_live_namespace_is_not(archive_url: str) -> None:
    with Archive.open(archive_url, LIVE) as live:
        _fill(live)
        with Archive.open(archive_url, REPLAY, live=LIVE) as replay:
            _fill(replay)
        assert {n["namespace"]: n["live"] for n in live.namespaces()} == {LIVE: True, REPLAY: False}
        assert live.drop_namespace(REPLAY) == REPLAY
        assert [n["namespace"] for n in live.namespaces()] == [LIVE]
        assert not live.query("SELECT name FROM system.databases WHERE name = {db:String}", {"db": REPLAY})
        assert live.count("events") == len(sample_records().events)  # the live rows are untouched
        with pytest.raises(NamespaceError, match="live"):
            live.drop_namespace(LIVE)
        with pytest.raises(NamespaceError, match="faultline archive list"):
            live.drop_namespace(REPLAY)  # gone already
        with pytest.raises(NamespaceError, match="no namespace"):
            Archive.open(archive_url, REPLAY, live=LIVE, create=False)
        with Archive.open(archive_url, REPLAY, live=LIVE) as again:  # a new replay of that name starts empty
            assert again.count("events") == 0


def test_readers_do_not_make_namespaces_and_names_are_checked(archive_url: str) -> None:
    with Archive.open(archive_url, LIVE) as live:
        with pytest.raises(NamespaceError, match="archive list"):
            Archive.open(archive_url, "faultline.replay-typo", live=LIVE, create=False)
        assert [n["namespace"] for n in live.namespaces()] == [LIVE]
    for bad in ("", "has space", "../up", "-dash-first", "x" * 201, "a`b"):
        with pytest.raises(NamespaceError, match="not a name"):
            Archive.open(archive_url, bad, live=LIVE)
    with pytest.raises(NamespaceError, match="choose another name"):
        Archive.open(archive_url, "system", live=LIVE)


def _today_archive(url: str) -> None:
    """An archive as the code before namespaces left it: every table in the default database."""
    client = clickhouse_connect.get_client(dsn=url, tz_mode="aware")
    try:
        assert migrations.migrate(client) == [m.version for m in migrations.MIGRATIONS]
        s = sample_records()
        client.insert("events", [event_row(e) for e in s.events], column_names=EVENT_COLUMNS)
        client.insert("incident_versions", [_incident_row(i) for i in s.incidents], column_names=_INCIDENT_COLUMNS)
        client.insert("commands", [_command_row(c) for c in s.commands], column_names=_COMMAND_COLUMNS)
    finally:
        client.close()


def test_an_archive_from_before_namespaces_becomes_the_live_namespace(archive_url: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _today_archive(archive_url)
    # The first to open it after the upgrade is a replay: it must not take the old rows along.
    with Archive.open(archive_url, "prod.replay-1", live="prod") as replay:
        assert replay.database == "prod.replay-1" and replay.count("events") == 0
    with Archive.open(archive_url, "prod") as live:
        assert live.database == "default"
        assert [i["id"] for i in live.latest_incidents()] == ["inc-1"]
        assert live.count("events") == len(sample_records().events)
        recorded = live.query("SELECT version FROM schema_migrations FINAL ORDER BY version")
        assert [r["version"] for r in recorded] == [m.version for m in migrations.MIGRATIONS]  # none again
    monkeypatch.setenv("FAULTLINE_ARCHIVE", archive_url)
    monkeypatch.setenv("FAULTLINE_NAMESPACE", "prod")
    monkeypatch.setenv("FAULTLINE_DATA_DIR", str(tmp_path))
    assert main(["report", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sections"]["failure_causes"]["rows"][0]["category"] == "gpu_off_bus"
    assert main(["archive", "list", "--json"]) == 0
    listed = {d["namespace"]: d for d in map(json.loads, capsys.readouterr().out.splitlines())}
    assert listed["prod"]["live"] and listed["prod"]["incidents"] == 1
    assert not listed["prod.replay-1"]["live"] and listed["prod.replay-1"]["events"] == 0


def test_the_archive_command_lists_and_drops(archive_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with Archive.open(archive_url, LIVE) as live:
        _fill(live)
    for ns in (f"{LIVE}.replay-a", f"{LIVE}.demo-b", "other.replay-c"):
        with Archive.open(archive_url, ns, live=LIVE) as scratch:
            _fill(scratch)
    monkeypatch.setenv("FAULTLINE_ARCHIVE", archive_url)
    monkeypatch.setenv("FAULTLINE_NAMESPACE", LIVE)
    monkeypatch.setenv("FAULTLINE_DATA_DIR", str(tmp_path))
    assert main(["archive", "list"]) == 0
    out = capsys.readouterr().out
    assert f"{LIVE}: {len(sample_records().events)} events, 1 incidents; the archive's own database (live)" in out
    assert main(["archive", "drop"]) == 2
    assert "--scratch" in capsys.readouterr().err
    assert main(["archive", "drop", "--scratch"]) == 0
    assert capsys.readouterr().out.count("dropped namespace") == 2
    assert main(["archive", "drop", LIVE]) == 1
    assert "not dropped" in capsys.readouterr().err
    assert main(["archive", "drop", "other.replay-c"]) == 0
    capsys.readouterr()
    assert main(["status", "--namespace", "other.replay-c"]) == 1
    assert "no namespace 'other.replay-c'" in capsys.readouterr().err
    with Archive.open(archive_url) as live:  # no name: the live one
        assert live.namespace == LIVE and [n["namespace"] for n in live.namespaces()] == [LIVE]


def test_a_server_url_keeps_the_live_namespace_in_the_url_s_database(archive_url: str) -> None:
    """The ClickHouse-server path, with the owner's endpoint standing in for a server."""
    with owner(archive_url):
        found = EndpointFile.read(archive_url.removeprefix("chdb://"))
        assert found is not None
        with Archive.open(archive_url) as reader:
            reader.client.command("CREATE DATABASE IF NOT EXISTS site_archive")
        server = f"http://faultline:{found.token}@127.0.0.1:{found.port}/site_archive"
        with Archive.open(server, LIVE) as live, Archive.open(server, REPLAY, live=LIVE) as replay:
            assert (live.role, live.database, replay.database) == ("server", "site_archive", REPLAY)
            _fill(live)
            assert live.count("events") == len(sample_records().events) and replay.count("events") == 0
            newest = live.query("SELECT max(ts) AS t FROM events")[0]["t"]
            assert newest - at(0) == timedelta(seconds=90)  # DateTime64 round-trips through the endpoint
