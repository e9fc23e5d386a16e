"""The local Kafka launcher (deploy.local.kafka) and client compatibility with its broker.

Lifecycle and detached-mode tests start their own brokers; the compatibility tests
(aiokafka, confluent-kafka, faust-streaming) use the shared session broker.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.local.kafka import (
    KafkaLaunchError,
    LocalKafka,
    detached_status,
    main,
    start_detached,
    stop_detached,
)
from tests.servers import free_port

MESSAGES = [f"event-{i}".encode() for i in range(5)]


# --------------------------------------------------------------------------- helpers



def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _create_topics(bootstrap: str, *names: str) -> None:
    """Create single-partition topics and wait for the broker to confirm them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the futures
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1) for name in names])
    for future in futures.values():
        future.result(timeout=30)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Produce ``values`` with an idempotent confluent-kafka producer; fail on any delivery error."""
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for value in values:
        producer.produce(topic, value=value, on_delivery=on_delivery)
    assert producer.flush(30) == 0, "messages still queued after 30 s"
    assert errors == []


def _consume(bootstrap: str, topic: str, count: int, timeout: float = 30) -> list[bytes]:
    """Read ``count`` values from the start of ``topic`` with confluent-kafka (bounded wait)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    received: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        for _ in range(int(timeout) * 10):
            if len(received) >= count or time.monotonic() > deadline:
                break
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received.append(message.value() or b"")
    finally:
        consumer.close()
    return received


# --------------------------------------------------------------------------- launcher


def test_ports_default_to_free_distinct_loopback_ports(tmp_path: Path) -> None:
    kafka = LocalKafka(tmp_path / "kafka")
    assert kafka.port != kafka.controller_port
    assert kafka.bootstrap == f"127.0.0.1:{kafka.port}"
    assert not kafka.is_running()


def test_start_refuses_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        kafka = LocalKafka(tmp_path / "kafka", port=listener.getsockname()[1])
        with pytest.raises(KafkaLaunchError, match="already in use"):
            kafka.start()
    assert not kafka.is_running()


def test_cli_status_without_broker_says_how_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--state-dir", str(tmp_path)]) == 1
    assert "python -m deploy.local.kafka start" in capsys.readouterr().out


@pytest.mark.broker
def test_restart_on_same_data_dir_keeps_messages(tmp_path: Path) -> None:
    kafka = LocalKafka(tmp_path / "kafka")
    meta = kafka.data_dir / "kraft-logs" / "meta.properties"
    try:
        kafka.start()
        cluster = meta.read_text()
        _create_topics(kafka.bootstrap, "lifecycle")
        _produce(kafka.bootstrap, "lifecycle", MESSAGES)

        kafka.stop()
        assert not kafka.is_running()
        assert not _port_open(kafka.port)

        kafka.restart()
        assert kafka.is_running()
        assert meta.read_text() == cluster, "storage must not be re-formatted on restart"
        assert _consume(kafka.bootstrap, "lifecycle", len(MESSAGES)) == MESSAGES
    finally:
        kafka.stop()
    assert not kafka.is_running()


@pytest.mark.broker
def test_detached_broker_is_reused_reported_and_stopped(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    port = free_port()
    try:
        bootstrap = start_detached(state_dir, port=port)
        pid = json.loads((state_dir / "broker.json").read_text())["pid"]
        assert bootstrap == f"127.0.0.1:{port}"
        assert detached_status(state_dir) == bootstrap
        assert start_detached(state_dir, port=port) == bootstrap
        assert json.loads((state_dir / "broker.json").read_text())["pid"] == pid, "running broker reused"
        assert main(["status", "--state-dir", str(state_dir)]) == 0
    finally:
        stopped = stop_detached(state_dir)
    assert stopped
    assert detached_status(state_dir) is None
    assert not _port_open(port)
    assert not stop_detached(state_dir)


# --------------------------------------------------------------------------- client compatibility


@pytest.mark.broker
def test_confluent_kafka_round_trip(kafka_bootstrap: str, unique_name: str) -> None:
    _create_topics(kafka_bootstrap, unique_name)
    _produce(kafka_bootstrap, unique_name, MESSAGES)
    assert _consume(kafka_bootstrap, unique_name, len(MESSAGES)) == MESSAGES


async def _aiokafka_round_trip(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    """Send ``values`` with an idempotent aiokafka producer, then read them back."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=f"{topic}-aio", auto_offset_reset="earliest"
    )
    await consumer.start()
    received: list[bytes] = []
    try:
        for _ in range(30):
            if len(received) >= len(values):
                break
            batches = await consumer.getmany(timeout_ms=1000)
            received += [record.value for records in batches.values() for record in records if record.value]
    finally:
        await consumer.stop()
    return received


@pytest.mark.broker
def test_aiokafka_round_trip(kafka_bootstrap: str, unique_name: str) -> None:
    _create_topics(kafka_bootstrap, unique_name)
    received = asyncio.run(asyncio.wait_for(_aiokafka_round_trip(kafka_bootstrap, unique_name, MESSAGES), 60))
    assert received == MESSAGES


FAUST_APP = '''
"""Forward FL_EXPECTED values from FL_SOURCE to FL_SINK upper-cased, write FL_MARKER, exit 0."""
import os
from pathlib import Path

import faust

app = faust.App(
    os.environ["FL_APP_ID"],
    broker="kafka://" + os.environ["FL_BOOTSTRAP"],
    store="memory://",
    web_enabled=False,
    topic_partitions=1,
    consumer_auto_offset_reset="earliest",
)
source = app.topic(os.environ["FL_SOURCE"], value_serializer="raw")
sink = app.topic(os.environ["FL_SINK"], value_serializer="raw")


@app.agent(source)
async def forward(stream):
    seen = 0
    async for value in stream:
        await sink.send(value=value.upper())
        seen += 1
        if seen == int(os.environ["FL_EXPECTED"]):
            await app.producer.flush()
            Path(os.environ["FL_MARKER"]).write_text(str(seen))
            os._exit(0)  # a faust worker may ignore SIGTERM; leave decisively once done


if __name__ == "__main__":
    app.main()
'''


@pytest.mark.broker
def test_faust_streaming_agent_consumes_and_produces(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    source, sink, marker = f"{unique_name}-in", f"{unique_name}-out", tmp_path / "done"
    _create_topics(kafka_bootstrap, source, sink)
    _produce(kafka_bootstrap, source, MESSAGES)
    script = tmp_path / "faust_app.py"
    script.write_text(FAUST_APP)
    env = {
        **os.environ,
        "FL_APP_ID": unique_name,
        "FL_BOOTSTRAP": kafka_bootstrap,
        "FL_SOURCE": source,
        "FL_SINK": sink,
        "FL_EXPECTED": str(len(MESSAGES)),
        "FL_MARKER": str(marker),
    }
    command = ["timeout", "-k", "5", "120", sys.executable, str(script), "worker", "-l", "warn"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=140)

    assert result.returncode == 0, f"faust worker failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert marker.read_text() == str(len(MESSAGES))
    assert _consume(kafka_bootstrap, sink, len(MESSAGES)) == [value.upper() for value in MESSAGES]
