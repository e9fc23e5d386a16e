"""The archive store on a real embedded ClickHouse (chDB) in a temporary directory."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from sinks.archive import Archive
from sinks.archive.store import deadletter_id
from streams.decisions import DeadLetter
from streams.events import Event, GpuMetrics, GpuRef, GpuSample

from .records import T0, Sample, at


def _write_all(archive: Archive, sample: Sample) -> None:
    archive.write_events(sample.events)
    archive.write_incidents(sample.incidents)
    archive.write_commands(sample.commands)
    archive.write_results(sample.results)
    archive.write_deadletters(sample.deadletters)


def _counts(archive: Archive) -> dict[str, int]:
    tables = ("events", "incident_versions", "incidents_latest", "commands", "command_results", "deadletters",
              "checkpoints", "gpu_ledger")
    return {table: archive.count(table) for table in tables}


def test_round_trip_of_every_table(archive: Archive, sample: Sample) -> None:
    _write_all(archive, sample)

    xid = archive.query("SELECT * FROM events FINAL WHERE id = {id:String}", {"id": "e-xid"})[0]
    assert (xid["ts"], xid["source"], xid["kind"], xid["node"], xid["job"], xid["rank"], xid["gpu"]) == (
        at(30), "kernel", "xid", "n1", None, None, "c1:00")
    assert Event.model_validate({**xid, "body": json.loads(xid["body"])}) == sample.events[6]
    exit_ = archive.query("SELECT rank, job FROM events FINAL WHERE id = 'e-exit'")[0]
    assert exit_ == {"rank": 0, "job": "j1"}
    assert archive.query("SELECT gpu FROM events FINAL WHERE id = 'e-sample'")[0]["gpu"] == "GPU-3"

    [incident] = archive.latest_incidents(job="j1")
    assert incident["culprit_gpus"] == ["GPU-3"] and incident["culprit_node"] == "n1"
    assert incident["opened_at"] == at(33) and incident["severity"] == "page"
    assert json.loads(incident["payload"])["summary"] == "version 3"

    commands = archive.commands("inc-1")
    assert [c["id"] for c in commands] == [c.id for c in sample.commands]
    restart = commands[1]
    assert restart["job"] == "j1" and restart["requires_approval"] == 0
    assert json.loads(restart["params"]) == sample.commands[1].params
    assert json.loads(restart["payload"])["target"] == {"job": "j1", "node": None, "gpu": None}

    results = archive.query("SELECT command, executor, status, at, detail FROM command_results FINAL ORDER BY at")
    assert [(r["command"], r["status"], r["at"]) for r in results] == [
        (r.command, r.status, r.at) for r in sample.results]

    letters = archive.query("SELECT * FROM deadletters FINAL ORDER BY at")
    assert [(d["stage"], d["reason"], d["raw"], d["at"]) for d in letters] == [
        (d.stage, d.reason, d.raw, d.at) for d in sample.deadletters]
    assert letters[0]["id"] == deadletter_id("parse:kernel", "{oops", at(5))


def test_same_batches_twice_do_not_duplicate(archive: Archive, sample: Sample) -> None:
    _write_all(archive, sample)
    once = _counts(archive)
    _write_all(archive, sample)
    assert _counts(archive) == once
    assert once == {"events": 10, "incident_versions": 3, "incidents_latest": 1, "commands": 4,
                    "command_results": 3, "deadletters": 2, "checkpoints": 3, "gpu_ledger": 3}


def test_redelivery_cut_differently_does_not_duplicate(archive: Archive, sample: Sample) -> None:
    """A re-delivered batch with other boundaries passes insert dedup; the replacing engine catches it."""
    archive.write_events(sample.events[:4])
    archive.write_events(sample.events)
    archive.write_commands(sample.commands[1:])
    archive.write_commands(sample.commands)
    assert archive.count("events") == len(sample.events)
    assert archive.count("commands") == len(sample.commands)
    assert archive.count("checkpoints") == 3
    assert archive.count("gpu_ledger") == 3
    assert len(archive.commands()) == len(sample.commands)


def test_latest_incident_is_the_highest_version(archive: Archive, sample: Sample) -> None:
    archive.write_incidents(list(reversed(sample.incidents)))  # arrival order must not matter
    [latest] = archive.latest_incidents()
    assert (latest["id"], latest["version"], latest["state"]) == ("inc-1", 3, "resolved")
    assert latest["updated_at"] == at(73)
    assert archive.count("incident_versions") == 3
    assert archive.latest_incidents(job="other") == []


def test_checkpoints_are_filled_from_trainer_events(archive: Archive, sample: Sample) -> None:
    archive.write_events(sample.events)
    rows = archive.query("SELECT * FROM checkpoints FINAL ORDER BY ts")
    assert [(r["job"], r["status"], r["step"], r["path"], r["event_id"]) for r in rows] == [
        ("j1", "saved", 100, "/ckpt/100", "e-ckpt-saved"),
        ("j1", "failed", 200, "/ckpt/200", "e-ckpt-failed"),
        ("j1", "loaded", 100, "/ckpt/100", "e-ckpt-loaded"),
    ]
    assert (rows[0]["bytes"], rows[0]["seconds"], rows[0]["error"]) == (1 << 30, 12.5, "")
    assert (rows[1]["bytes"], rows[1]["error"]) == (None, "No space left on device")


def test_gpu_ledger_is_filled_from_gpu_commands(archive: Archive, sample: Sample) -> None:
    archive.write_commands(sample.commands)
    rows = archive.query("SELECT * FROM gpu_ledger FINAL ORDER BY ts")
    assert [(r["node"], r["gpu"], r["state"], r["command"], r["incident"], r["ts"]) for r in rows] == [
        ("n1", "GPU-3", "quarantined", "cmd-quarantine", "inc-1", at(34)),
        ("n1", "GPU-3", "validating", "cmd-validate", "inc-1", at(60)),
        ("n1", "GPU-3", "released", "cmd-release", "inc-1", at(70)),
    ]
    assert rows[0]["reason"] == "XID 79"


def test_timeline_is_in_time_order(archive: Archive, sample: Sample) -> None:
    _write_all(archive, sample)
    timeline = archive.timeline("inc-1")
    assert [r["ts"] for r in timeline] == sorted(r["ts"] for r in timeline)
    assert all(r["job"] == "j1" and r["incident"] == "inc-1" for r in timeline)
    entries = [(r["entry_type"], r["what"]) for r in timeline]
    assert entries == [
        ("signal", "job_started"),
        ("signal", "checkpoint_saved"),
        ("signal", "checkpoint_failed"),
        ("signal", "xid"),           # the culprit node's hardware event, job-less
        ("signal", "worker_exit"),
        ("incident", "v1 gpu_off_bus open (page)"),
        ("command", "quarantine_gpu"),
        ("command", "restart_job"),
        ("result", "done"),
        ("result", "waiting_approval"),
        ("result", "done"),
        ("incident", "v2 gpu_off_bus mitigating (page)"),
        ("command", "validate_gpu"),
        ("command", "release_gpu"),
        ("incident", "v3 gpu_off_bus resolved (page)"),
    ]
    # Left out: raw telemetry and steps (noise), another node's XID, and what came after the last update.


def test_deadletter_id_is_stable_and_distinct() -> None:
    letter = DeadLetter(stage="s", reason="r", raw="x", at=T0)
    assert deadletter_id(letter.stage, letter.raw, letter.at) == deadletter_id("s", "x", T0)
    assert deadletter_id("s", "x", T0) != deadletter_id("s", "x", T0 + timedelta(milliseconds=1))
    assert deadletter_id("s", "x", T0) != deadletter_id("sx", "", T0)


def test_naive_event_time_is_taken_as_utc(archive: Archive) -> None:
    naive = Event(id="naive", ts=T0.replace(tzinfo=None), source="nvml", node="n1",
                  body=GpuSample(gpu=GpuRef(index=0), metrics=GpuMetrics()))
    archive.write_events([naive])
    assert archive.query("SELECT ts, gpu FROM events FINAL")[0] == {"ts": T0, "gpu": "0"}


def test_count_binds_the_table_as_an_identifier(archive: Archive) -> None:
    with pytest.raises(DatabaseError, match="Unknown table"):
        archive.count("events; DROP TABLE events")
    assert archive.count("events") == 0

