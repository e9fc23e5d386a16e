"""``faultline approve`` / ``deny`` and ``faultline executor run`` on the session's broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from common.kafka_admin import create_namespace_topics
from common.kafka_reader import read_topic
from faultline.cli import main
from streams.decisions import Approval, CommandResult
from streams.topics import topic_name

from .commands import command

pytestmark = pytest.mark.broker


@pytest.fixture
def namespace(kafka_bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> str:
    create_namespace_topics({"bootstrap.servers": kafka_bootstrap}, unique_name, partitions=1)
    monkeypatch.setenv("FAULTLINE_KAFKA", kafka_bootstrap)
    monkeypatch.setenv("FAULTLINE_NAMESPACE", unique_name)
    return unique_name


def test_approve_and_deny_publish_a_decision_keyed_by_command(
        kafka_bootstrap: str, namespace: str, capsys: pytest.CaptureFixture[str]) -> None:
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for cid in ("cmd-1", "cmd-2"):  # a decision names the exact command: it must be on the topic
        producer.produce(topic_name(namespace, "commands"), key=cid.encode(),
                         value=command(cid, "reboot_node", requires_approval=True).model_dump_json().encode())
    assert producer.flush(30) == 0
    assert main(["approve", "cmd-1", "--by", "alice", "--reason", "checkpoint is fresh"]) == 0
    assert main(["deny", "cmd-2", "--by", "bob"]) == 0
    assert capsys.readouterr().out.splitlines() == ["approved cmd-1 as alice", "denied cmd-2 as bob"]
    conf = {"bootstrap.servers": kafka_bootstrap}
    decisions = [Approval.model_validate_json(v) for v in read_topic(conf, topic_name(namespace, "approvals"))]
    assert [(d.command, d.decision, d.by, d.reason) for d in decisions] == [
        ("cmd-1", "approve", "alice", "checkpoint is fresh"), ("cmd-2", "deny", "bob", "")]


def test_approve_refuses_what_no_one_can_decide_and_says_why(
        kafka_bootstrap: str, namespace: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28 item 3: approving then denying the same command both exited 0, and so did approving a
    quarantine that needs no approval. The first decision is final; a command that needs none, or has
    expired, is refused with a reason, and nothing is sent."""
    from datetime import UTC, datetime, timedelta

    expired = command("cmd-late", "reset_gpu", requires_approval=True).model_copy(
        update={"expires_at": datetime.now(UTC) - timedelta(minutes=5)})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for cmd in (command("cmd-held", "reset_gpu", requires_approval=True), command("cmd-fence", "quarantine_gpu"),
                expired):
        producer.produce(topic_name(namespace, "commands"), key=cmd.id.encode(), value=cmd.model_dump_json().encode())
    assert producer.flush(30) == 0

    assert main(["approve", "cmd-held", "--by", "alice"]) == 0
    capsys.readouterr()
    assert main(["deny", "cmd-held", "--by", "bob"]) == 1
    assert "cmd-held (reset_gpu) was approved by alice at " in capsys.readouterr().err
    assert main(["approve", "cmd-held", "--by", "alice"]) == 1  # not even the same decision twice
    assert main(["approve", "cmd-fence", "--by", "alice"]) == 1
    assert "cmd-fence (quarantine_gpu) needs no approval" in capsys.readouterr().err
    assert main(["approve", "cmd-late", "--by", "alice"]) == 1
    assert "cmd-late (reset_gpu) expired at " in capsys.readouterr().err
    decisions = [Approval.model_validate_json(v)
                 for v in read_topic({"bootstrap.servers": kafka_bootstrap}, topic_name(namespace, "approvals"))]
    assert [(d.command, d.decision, d.by) for d in decisions] == [("cmd-held", "approve", "alice")]


def test_executor_run_dry_run_reports_what_it_would_do_and_stops_on_sigterm(
        kafka_bootstrap: str, namespace: str, tmp_path: Path) -> None:
    conf: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap}
    cmd = command("cmd-cordon-1", "cordon_node", node="gpu-node-07", incident="inc-3")
    producer = Producer(conf)
    producer.produce(topic_name(namespace, "commands"), key=cmd.id.encode(), value=cmd.model_dump_json().encode())
    assert producer.flush(30) == 0

    proc = subprocess.Popen(
        [sys.executable, "-m", "faultline.cli", "executor", "run", "--backend", "slurm", "--dry-run",
         "--fleet-size", "64", "--state-dir", str(tmp_path)],
        env={**os.environ, "FAULTLINE_KAFKA": kafka_bootstrap, "FAULTLINE_NAMESPACE": namespace},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = Consumer({**conf, "group.id": f"{namespace}.reader", "auto.offset.reset": "earliest"})
    results.subscribe([topic_name(namespace, "command-results")])
    try:
        msg = None
        deadline = time.monotonic() + 60
        while msg is None and time.monotonic() < deadline and proc.poll() is None:
            msg = results.poll(0.5)
        assert msg is not None, proc.communicate(timeout=10) if proc.poll() is not None else "no result in 60 s"
        result = CommandResult.model_validate_json(msg.value() or b"")
    finally:
        results.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert (result.command, result.status, result.executor) == ("cmd-cordon-1", "dry_run", "slurm-dry-run")
    assert result.detail == ("would run: scontrol update NodeName=gpu-node-07 State=DRAIN "
                             "'Reason=faultline: inc-3 gpu_off_bus'")
    assert proc.returncode == 0, err
    assert list(tmp_path.iterdir()) == []  # a dry run keeps no ledger


def test_approve_signs_with_the_operators_key_and_names_the_exact_command(
        kafka_bootstrap: str, namespace: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15, finding 2: approvals were unsigned, `--by` was whatever the caller said, and an id
    not yet issued could be approved."""
    from streams.canonical import content_hash
    from streams.signing import SigningKeys, verify_approval

    monkeypatch.setenv("FAULTLINE_OPERATOR_KEYS", "alice:alice-secret-0123456789")
    held = command("cmd-reboot-9", "reboot_node", requires_approval=True)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic_name(namespace, "commands"), key=held.id.encode(), value=held.model_dump_json().encode())
    assert producer.flush(30) == 0

    assert main(["approve", "cmd-not-issued-yet"]) == 1
    assert "no command cmd-not-issued-yet" in capsys.readouterr().err
    assert main(["approve", held.id, "--by", "bob"]) == 1
    assert "not the key id of your operator key (alice)" in capsys.readouterr().err
    assert main(["approve", held.id, "--reason", "drained already"]) == 0
    assert capsys.readouterr().out.strip() == f"approved {held.id} as alice"

    [decision] = [Approval.model_validate_json(v)
                  for v in read_topic({"bootstrap.servers": kafka_bootstrap}, topic_name(namespace, "approvals"))]
    assert decision.command_hash == content_hash(held) and decision.by == "alice"
    assert verify_approval(decision, SigningKeys.parse("alice:alice-secret-0123456789,bob:bob-secret-0123456")) is None
