"""The `faultline` command: help with examples everywhere, errors that say what to do, the live sink."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.settings import Settings
from faultline.cli import EXAMPLES, main
from faultline.errors import EXIT_UNAVAILABLE
from producers.delivery import EventPublisher
from sinks.archive.store import Archive
from streams.events import AgentHeartbeat, Event


@pytest.mark.parametrize("cmd", sorted(EXAMPLES))
def test_every_command_has_help_with_an_example(cmd: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([cmd, "--help"])
    assert done.value.code == 0
    assert f"example: {EXAMPLES[cmd]}" in capsys.readouterr().out


def test_replay_of_a_missing_file_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "/nonexistent/capture.jsonl"]) == 2
    assert "no such capture file" in capsys.readouterr().err


def test_unreachable_broker_names_the_address_and_the_setting(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    capture = tmp_path / "c.jsonl"
    capture.write_text('{"ts": "2026-04-22T03:00:00+00:00", "source": "node_agent", "node": "n1", "alive": true}\n')
    monkeypatch.setenv("FAULTLINE_KAFKA", "127.0.0.1:1")
    assert main(["replay", str(capture)]) == EXIT_UNAVAILABLE  # a dependency, not the work, failed
    err = capsys.readouterr().err
    assert "127.0.0.1:1" in err and "FAULTLINE_KAFKA" in err


@pytest.mark.broker
def test_sink_run_archives_until_sigterm(kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    settings = Settings(kafka=kafka_bootstrap, namespace=unique_name, archive=f"chdb://{tmp_path}/archive")
    conf = settings.kafka_config(kafka_bootstrap)
    create_namespace_topics(conf, unique_name, partitions=1)
    env = {**os.environ, "FAULTLINE_KAFKA": kafka_bootstrap, "FAULTLINE_NAMESPACE": unique_name,
           "FAULTLINE_ARCHIVE": settings.archive_url, "FAULTLINE_DATA_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "faultline.cli", "sink", "run"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        pub = EventPublisher(conf, unique_name)
        now = datetime.now(UTC)
        pub.publish([Event(id=f"hb-{i}", ts=now, source="node_agent", node=f"n{i}", body=AgentHeartbeat())
                     for i in range(20)])
        pub.flush()
        time.sleep(8)  # the sink joins its group and writes a batch
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out.decode()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        delete_namespace_topics(conf, unique_name)
    with Archive.open(settings.archive_url) as archive:
        assert archive.count("events") == 20


@pytest.mark.broker
def test_quarantine_and_release_reach_the_correlator(kafka_bootstrap: str, tmp_path: Path, unique_name: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from common.kafka_reader import read_topic
    from faultline.pipeline import CorrelatorWorker
    from streams.decisions import Command
    from streams.events import GpuInfo, Inventory
    from streams.topics import topic_name

    settings = Settings(kafka=kafka_bootstrap, namespace=unique_name, data_dir=tmp_path)
    conf = settings.kafka_config(kafka_bootstrap)
    create_namespace_topics(conf, unique_name, partitions=1)
    monkeypatch.setenv("FAULTLINE_KAFKA", kafka_bootstrap)
    monkeypatch.setenv("FAULTLINE_NAMESPACE", unique_name)
    pub = EventPublisher(conf, unique_name)
    pub.publish([Event(id="inv", ts=datetime.now(UTC), source="inventory", node="n1",
                       body=Inventory(gpus=[GpuInfo(index=0, uuid="GPU-a")]))])
    pub.flush()
    worker = CorrelatorWorker(settings, kafka_bootstrap, unique_name)
    try:
        assert main(["quarantine", "n1:0", "--reason", "burn-in errors", "--by", "alice"]) == 0
        assert main(["release", "n1:GPU-a", "--validated-by", "dcgmi diag -r 3", "--by", "bob"]) == 0
        deadline = time.monotonic() + 90
        types: list[str] = []
        while types != ["quarantine_gpu", "release_gpu"] and time.monotonic() < deadline:
            assert worker.alive(), worker.tail()
            types = [Command.model_validate_json(v).type
                     for v in read_topic(conf, topic_name(unique_name, "commands"), timeout=10)]
            time.sleep(0.5)
        assert types == ["quarantine_gpu", "release_gpu"]
    finally:
        worker.stop()
        delete_namespace_topics(conf, unique_name)


@pytest.mark.broker
def test_a_forged_release_on_the_events_topic_is_dead_lettered_and_a_signed_one_runs(
        kafka_bootstrap: str, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27 item 1 on the real broker and worker: after a GPU is fenced, an agent's credential writes an
    unsigned release `by: alice` with a validation; the worker (holding the operator keys) issues nothing and
    dead-letters it with the reason. `faultline release` signed with alice's key is what releases it."""
    from common.kafka_reader import read_topic
    from faultline.pipeline import CorrelatorWorker
    from streams.decisions import Command, DeadLetter
    from streams.events import GpuInfo, GpuRef, Inventory, OperatorAction
    from streams.topics import topic_name

    keys = "alice:alice-secret-0123456789"
    settings = Settings(kafka=kafka_bootstrap, namespace=unique_name, data_dir=tmp_path, operator_keys=keys)
    conf = settings.kafka_config(kafka_bootstrap)
    create_namespace_topics(conf, unique_name, partitions=1)
    for name, value in (("KAFKA", kafka_bootstrap), ("NAMESPACE", unique_name), ("OPERATOR_KEYS", keys)):
        monkeypatch.setenv(f"FAULTLINE_{name}", value)
    pub = EventPublisher(conf, unique_name)  # what an agent's credential may write
    pub.publish([Event(id="inv", ts=datetime.now(UTC), source="inventory", node="n1",
                       body=Inventory(gpus=[GpuInfo(index=0, uuid="GPU-a")]))])
    pub.flush()
    worker = CorrelatorWorker(settings, kafka_bootstrap, unique_name)

    def commands(want: list[str]) -> list[Command]:
        deadline, found = time.monotonic() + 90, list[Command]()
        while [c.type for c in found] != want and time.monotonic() < deadline:
            assert worker.alive(), worker.tail()
            found = [Command.model_validate_json(v)
                     for v in read_topic(conf, topic_name(unique_name, "commands"), timeout=10)]
            time.sleep(0.5)
        return found

    try:
        assert main(["quarantine", "n1:0", "--reason", "burn-in errors"]) == 0
        assert [c.params["by"] for c in commands(["quarantine_gpu"])] == ["alice"]
        forged = OperatorAction(action="release_gpu", gpu=GpuRef(index=0), by="alice", reason="fixed",
                                validated_by="dcgmi diag -r 3 passed")
        pub.publish([Event(id="operator-forged", ts=datetime.now(UTC), source="operator", node="n1", body=forged)])
        pub.flush()
        deadline, letters = time.monotonic() + 60, list[DeadLetter]()
        while not letters and time.monotonic() < deadline:
            letters = [d for v in read_topic(conf, topic_name(unique_name, "deadletters"), timeout=5)
                       if "operator-forged" in (d := DeadLetter.model_validate_json(v)).raw]
        assert [d.reason for d in letters] == ["operator action refused: unsigned"]
        assert [c.type for c in commands(["quarantine_gpu"])] == ["quarantine_gpu"]  # nothing released
        assert main(["release", "n1:GPU-a", "--validated-by", "dcgmi diag -r 3"]) == 0
        released = commands(["quarantine_gpu", "release_gpu"])
        assert [(c.type, c.params["by"]) for c in released] == [("quarantine_gpu", "alice"), ("release_gpu", "alice")]
    finally:
        worker.stop()
        delete_namespace_topics(conf, unique_name)


@pytest.mark.broker
def test_quarantine_names_the_nodes_cell(kafka_bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch,
                                         ) -> None:
    """In a namespace of several cells the action must reach the node's cell's engine: keyed by --cell."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from streams.cells import cell_key
    from streams.topics import topic_name

    conf = Settings(kafka=kafka_bootstrap).kafka_config(kafka_bootstrap)
    create_namespace_topics(conf, unique_name, partitions=1)
    monkeypatch.setenv("FAULTLINE_KAFKA", kafka_bootstrap)
    monkeypatch.setenv("FAULTLINE_NAMESPACE", unique_name)
    monkeypatch.setenv("FAULTLINE_CELL", "west")
    c = Consumer({**conf, "group.id": unique_name, "enable.auto.commit": False})
    try:
        assert main(["quarantine", "n7", "--reason", "fans", "--by", "carol", "--cell", "east"]) == 0
        assert main(["quarantine", "n8", "--reason", "fans", "--by", "carol"]) == 0
        c.assign([TopicPartition(topic_name(unique_name, "events"), 0, OFFSET_BEGINNING)])
        keys: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while len(keys) < 2 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                keys.append(m.key())
        assert keys == [cell_key("east"), cell_key("west")]
    finally:
        c.close()
        delete_namespace_topics(conf, unique_name)
