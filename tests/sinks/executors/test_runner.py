"""The runner end to end on the session's Kafka broker: commands in, the webhook backend against a
local HTTP server, an approval from a person, and exactly the expected results out."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from common.kafka_admin import create_namespace_topics
from sinks.executors.approvals import send_decision
from sinks.executors.launch import ExecutorOptions, make_executor
from sinks.executors.runner import ExecutorRunner
from streams.decisions import CommandResult
from streams.topics import topic_name

from .commands import approval, command
from .http_recorder import RecordingServer, Reply

pytestmark = pytest.mark.broker

DEADLINE_S = 60.0


@pytest.fixture
def conf(kafka_bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": kafka_bootstrap}


@pytest.fixture
def namespace(conf: dict[str, Any], unique_name: str) -> str:
    create_namespace_topics(conf, unique_name, partitions=2)
    return unique_name


@pytest.fixture
def hook() -> Iterator[RecordingServer]:
    """The ticketing system: fails the first request with a 500, then accepts everything."""
    with RecordingServer(lambda _req: Reply(500) if len(server.requests) == 1 else Reply(201)) as server:
        yield server


class Results:
    """Follows the namespace's command-results topic from its beginning."""

    def __init__(self, conf: dict[str, Any], namespace: str) -> None:
        topic = topic_name(namespace, "command-results")
        self.records: list[CommandResult] = []
        self._consumer = Consumer({**conf, "group.id": f"{namespace}.test-reader", "enable.auto.commit": False})
        parts = self._consumer.list_topics(topic, timeout=30).topics[topic].partitions
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])

    def wait_for(self, count: int) -> list[CommandResult]:
        deadline = time.monotonic() + DEADLINE_S
        while len(self.records) < count:
            assert time.monotonic() < deadline, f"only {len(self.records)} of {count} results: {self.records}"
            for msg in self._consumer.consume(num_messages=100, timeout=0.5):
                if msg.error() is None:
                    self.records.append(CommandResult.model_validate_json(msg.value() or b""))
        return self.records

    def by_command(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for r in self.records:
            out[r.command].append(r.status)
        return dict(out)

    def close(self) -> None:
        self._consumer.close()


def running(runner: ExecutorRunner) -> Callable[[], None]:
    """Run ``runner`` in a thread; the returned function stops it and waits."""
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), kwargs={"poll_s": 0.2}, daemon=True)
    thread.start()

    def halt() -> None:
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()
        runner.close()

    return halt


def test_commands_are_carried_out_once_and_approvals_release_held_ones(
        conf: dict[str, Any], namespace: str, hook: RecordingServer, tmp_path: Path) -> None:
    notify = command("cmd-notify-1", "notify", node=None, job="llm", params={"to": "alice", "message": "restarted"})
    ticket = command("cmd-ticket-1", "open_ticket", requires_approval=True, params={"kind": "rma"})
    producer = Producer({**conf, "enable.idempotence": True})
    for cmd in (notify, notify, ticket):  # the second notify is a duplicate delivery
        producer.produce(topic_name(namespace, "commands"), key=cmd.id.encode(), value=cmd.model_dump_json().encode())
    assert producer.flush(30) == 0
    results = Results(conf, namespace)
    options = ExecutorOptions(backend="webhook", url=f"{hook.url}/tickets", state_dir=tmp_path / "first")

    halt = running(ExecutorRunner(make_executor(options), conf, namespace))
    try:
        results.wait_for(3)
        assert results.by_command() == {"cmd-notify-1": ["done", "skipped_duplicate"],
                                        "cmd-ticket-1": ["waiting_approval"]}
        send_decision(conf, namespace, approval(ticket, by="alice"))
        results.wait_for(4)
    finally:
        halt()
    assert results.by_command() == {"cmd-notify-1": ["done", "skipped_duplicate"],
                                    "cmd-ticket-1": ["waiting_approval", "done"]}
    assert {r.executor for r in results.records} == {"webhook"}
    [ticket_done] = [r for r in results.records if (r.command, r.status) == ("cmd-ticket-1", "done")]
    assert ticket_done.detail.endswith("(approved by alice)")
    posted = [r.headers["idempotency-key"] for r in hook.requests]
    assert sorted(set(posted)) == ["cmd-notify-1", "cmd-ticket-1"] and len(posted) == 3  # one 500, retried

    # A second executor of the same name, elsewhere (no local state, its own group, so it reads every
    # command again): rebuilt from the results topic, it repeats nothing.
    second = ExecutorOptions(backend="webhook", url=f"{hook.url}/tickets", state_dir=tmp_path / "second")
    halt = running(ExecutorRunner(make_executor(second), conf, namespace, group_id=f"{namespace}.second"))
    try:
        results.wait_for(7)
    finally:
        halt()
        results.close()
    assert [r.status for r in results.records[4:]] == ["skipped_duplicate"] * 3
    assert len(hook.requests) == 3


def test_an_undecodable_command_goes_to_dead_letters_and_the_rest_go_on(
        conf: dict[str, Any], namespace: str, hook: RecordingServer, tmp_path: Path) -> None:
    producer = Producer(conf)
    producer.produce(topic_name(namespace, "commands"), key=b"x", value=b'{"id": "half a command"')
    good = command("cmd-notify-2", "notify", node=None, job="llm")
    producer.produce(topic_name(namespace, "commands"), key=b"x", value=good.model_dump_json().encode())
    assert producer.flush(30) == 0
    results = Results(conf, namespace)
    options = ExecutorOptions(backend="webhook", url=f"{hook.url}/tickets", state_dir=tmp_path)
    halt = running(ExecutorRunner(make_executor(options), conf, namespace))
    try:
        assert [(r.command, r.status) for r in results.wait_for(1)] == [("cmd-notify-2", "done")]
    finally:
        halt()
        results.close()
    letters = Consumer({**conf, "group.id": f"{namespace}.letters", "auto.offset.reset": "earliest"})
    letters.subscribe([topic_name(namespace, "deadletters")])
    try:
        msg = None
        deadline = time.monotonic() + DEADLINE_S
        while msg is None and time.monotonic() < deadline:
            msg = letters.poll(0.5)
        assert msg is not None and b"half a command" in (msg.value() or b"")
        assert b"executor:webhook" in (msg.value() or b"")
    finally:
        letters.close()


def test_a_malformed_signature_is_refused_and_the_runner_goes_on(
        conf: dict[str, Any], namespace: str, hook: RecordingServer, tmp_path: Path) -> None:
    """Issue 15, finding 4: a non-ASCII signature made the comparison raise, the offset was never
    committed, and every restart crashed on it again."""
    from datetime import UTC, datetime, timedelta

    from sinks.executors.trust import Trust
    from streams.signing import SigningKeys, sign

    keys = SigningKeys.parse("k1:correlator-secret-0123456789")
    now = datetime.now(UTC)
    poison = sign(command("cmd-notify-poison", "notify", node=None, job="llm"), keys, now, timedelta(hours=1),
                  namespace=namespace).model_copy(update={"signature": "hmac-sha256:k1:" + "\u00e9" * 64})
    good = sign(command("cmd-notify-good", "notify", node=None, job="llm"), keys, now, timedelta(hours=1),
                namespace=namespace)
    producer = Producer(conf)
    for cmd in (poison, good):
        producer.produce(topic_name(namespace, "commands"), key=cmd.id.encode(), value=cmd.model_dump_json().encode())
    assert producer.flush(30) == 0
    results = Results(conf, namespace)
    options = ExecutorOptions(backend="webhook", url=f"{hook.url}/tickets", state_dir=tmp_path,
                              trust=Trust(commands=keys, namespace=namespace))
    halt = running(ExecutorRunner(make_executor(options), conf, namespace))
    try:
        got = results.wait_for(2)
    finally:
        halt()
        results.close()
    assert [(r.command, r.status) for r in got] == [("cmd-notify-poison", "refused"), ("cmd-notify-good", "done")]
    assert "malformed signature" in got[0].detail
    assert [r.headers["idempotency-key"] for r in hook.requests][-1] == "cmd-notify-good"


def test_forgeries_under_a_held_id_do_not_block_its_approval(
        conf: dict[str, Any], namespace: str, hook: RecordingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 27 item 2, on the broker with a real executor: a signed ticket is held; forged commands under its id
    (unsigned, a made-up signature) follow. `faultline approve` sets them aside, says so, decides on the content the
    executor holds, and the executor runs it once."""
    from datetime import UTC, datetime, timedelta

    from faultline.cli import main
    from sinks.executors.trust import Trust
    from streams.canonical import content_hash
    from streams.signing import SigningKeys, sign

    keys, operators = SigningKeys.parse("corr:correlator-secret-0123"), "alice:alice-secret-0123456789"
    executors = SigningKeys.parse("exec:executor-secret-01234567")
    real = sign(command("cmd-held-1", "open_ticket", requires_approval=True, params={"kind": "rma"}), keys,
                datetime.now(UTC), timedelta(hours=1), namespace=namespace, cluster="default")
    trust = Trust(commands=keys, operators=SigningKeys.parse(operators), executors=executors, namespace=namespace,
                  cluster="default")
    options = ExecutorOptions(backend="webhook", url=f"{hook.url}/tickets", state_dir=tmp_path / "x", trust=trust)
    producer = Producer({**conf, "enable.idempotence": True})
    results = Results(conf, namespace)
    halt = running(ExecutorRunner(make_executor(options), conf, namespace))
    try:
        producer.produce(topic_name(namespace, "commands"), key=real.id.encode(), value=real.model_dump_json().encode())
        assert producer.flush(30) == 0
        assert [r.status for r in results.wait_for(1)] == ["waiting_approval"]
        for cmd in (real.model_copy(update={"params": {"kind": "rma", "node": "everything"}, "signature": None}),
                    real.model_copy(update={"params": {"kind": "wipe"}, "signature": "hmac-sha256:corr:" + "0" * 64})):
            producer.produce(topic_name(namespace, "commands"), key=cmd.id.encode(), value=cmd.model_dump_json().encode())
        assert producer.flush(30) == 0
        assert [r.status for r in results.wait_for(3)] == ["waiting_approval", "refused", "refused"]
        for name, value in (("KAFKA", conf["bootstrap.servers"]), ("NAMESPACE", namespace),
                            ("OPERATOR_KEYS", operators), ("EXECUTOR_KEYS", "exec:executor-secret-01234567")):
            monkeypatch.setenv(f"FAULTLINE_{name}", value)
        monkeypatch.delenv("FAULTLINE_SIGNING_KEYS", raising=False)  # an operator's host holds no command key
        assert main(["approve", real.id, "--reason", "rma is due"]) == 0
        err = capsys.readouterr().err
        assert err.count("ignored another record under the id cmd-held-1") == 2, err
        assert "unsigned" in err and "no executor holds this content" in err
        assert [r.status for r in results.wait_for(4)][-1] == "done"
    finally:
        halt()
        results.close()
    assert [r.headers["idempotency-key"] for r in hook.requests][-1] == real.id
    assert content_hash(real) in [r.detail.rpartition("held ")[2] for r in results.records[:1]]
