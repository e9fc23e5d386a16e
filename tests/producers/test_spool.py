"""The disk spool and the spooling publisher: order, bounds, restarts, and a real broker restart."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from common.kafka_admin import create_namespace_topics
from common.kafka_reader import read_topic
from deploy.local.kafka import LocalKafka
from producers.capture import parse_capture_line
from producers.spool import ReconnectLogThrottle, Spool, SpoolingPublisher
from producers.spool.cursor import CursorFile
from producers.spool.disk import unframe
from streams.events import Event
from streams.topics import topic_name

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _event(i: int, node: str = "n17") -> Event:
    line = {"ts": (T0 + timedelta(milliseconds=i)).isoformat(), "source": "node_agent", "node": node, "alive": True}
    [event] = parse_capture_line(json.dumps(line))
    return event


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spooled_ids(directory: Path) -> list[str]:
    """Event ids still in the spool's segment files, cursor applied, in order."""
    cursor = CursorFile(directory).load()
    ids = []
    for segment in sorted(directory.glob("*.jsonl")):
        data = segment.read_bytes()
        if cursor and int(segment.stem) == cursor["segment"]:
            data = data[cursor["offset"]:]
        ids += [json.loads(json.loads(unframe(line + b"\n") or b"")["value"])["id"] for line in data.splitlines()]
    return ids


# --- the spool on its own -------------------------------------------------------------------


def test_spool_reads_in_order_commits_and_resumes_after_a_restart(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4096, segment_bytes=64)
    spool.append([f"record {i}\n".encode() for i in range(20)])
    assert len(list(tmp_path.glob("*.jsonl"))) == 1, "a batch goes into the tail segment"
    spool.append([b"record 20\n"])
    first = spool.read(5)
    assert [e.line for e in first] == [f"record {i}\n".encode() for i in range(5)]
    spool.commit(first[2].segment, first[2].end)
    spool.close()

    again = Spool(tmp_path, max_bytes=4096, segment_bytes=64)
    assert again.unread == 18
    rest = again.read(100)
    assert [e.line for e in rest] == [f"record {i}\n".encode() for i in range(3, 21)]
    again.commit(rest[-1].segment, rest[-1].end)
    assert again.size_bytes() == 0 and len(list(tmp_path.glob("*.jsonl"))) == 1, "finished segments deleted"
    again.close()


def test_spool_cuts_a_partial_record_left_by_a_crash(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4096, segment_bytes=1024)
    spool.append([b"whole\n"])
    spool.close()
    with next(tmp_path.glob("*.jsonl")).open("ab") as fh:
        fh.write(b'{"half')
    again = Spool(tmp_path, max_bytes=4096, segment_bytes=1024)
    assert [e.line for e in again.read(10)] == [b"whole\n"]
    again.close()


def test_spool_evicts_oldest_segments_only_past_its_bound(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1900, segment_bytes=380)
    for i in range(100):
        # 10 bytes each, 19 on disk with the checksum (producers/spool/disk.py); 1900 in all: at the bound, not past it
        spool.append([f"{i:09d}\n".encode()])
    assert spool.evict_oldest() is None and spool.unread == 100
    spool.append([b"000000100\n"])
    evicted = spool.evict_oldest()
    assert evicted is not None and len(evicted[1]) == 20 and evicted[1][0] == b"000000000\n"
    assert spool.evict_oldest() is None
    assert spool.read(1)[0].line == b"000000020\n", "reading goes on at the oldest record left"
    spool.close()


# --- the publisher without a broker ---------------------------------------------------------


def test_broker_absent_spool_stays_bounded_and_drops_only_the_oldest(tmp_path: Path) -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "socket.connection.setup.timeout.ms": 1000}
    pub = SpoolingPublisher(conf, "absent", tmp_path / "spool", max_bytes=64 << 10, segment_bytes=8 << 10,
                            max_inflight=10, message_timeout_s=1.0, retry_backoff_s=(0.1, 0.2))
    n = 1000
    for i in range(n):
        pub.publish([_event(i)])
    assert pub.spool.size_bytes() <= 64 << 10
    deadline = time.monotonic() + 15  # the 10 records in flight time out after 1 s
    while pub.dropped + pub.backlog() != n and time.monotonic() < deadline:
        pub.pump()
        time.sleep(0.1)
    assert pub.sent == 0 and pub.dropped > 0
    assert pub.dropped + pub.backlog() == n, "every record is either still spooled or counted as dropped"
    pub.close(timeout_s=0.5)

    left = _spooled_ids(tmp_path / "spool")
    expected = [_event(i).id for i in range(n)]
    assert left == expected[n - len(left):], "what is left is the newest records, in order"
    assert len(left) == pub.backlog()


def test_metrics_are_created_once_per_process(tmp_path: Path) -> None:
    def spooled() -> float:
        return REGISTRY.get_sample_value("faultline_producer_spooled_total", {"source": "node_agent"}) or 0.0

    before = spooled()
    conf = {"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}
    publishers = [SpoolingPublisher(conf, "twice", tmp_path / str(i), max_inflight=1) for i in range(2)]
    for pub in publishers:
        pub.publish([_event(1), _event(2)])  # the second waits behind the first
        pub.close(timeout_s=0.1)
    assert [pub.spooled for pub in publishers] == [1, 1]
    assert spooled() == before + 2


def _rdkafka_record(fac: str, client: str, text: str) -> logging.LogRecord:
    """A log record as confluent-kafka hands librdkafka's logs to a Python logger."""
    return logging.LogRecord("faultline.producer.kafka", logging.ERROR, __file__, 0, "%s [%s] %s",
                             (fac, client, text), None)


def test_reconnect_failures_are_logged_once_a_minute_per_connection() -> None:
    now = [0.0]
    throttle = ReconnectLogThrottle(every_s=60, clock=lambda: now[0])
    refused = "[thrd:127.0.0.1:9/bootstrap]: 127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed"
    other = "[thrd:127.0.0.1:9/1]: 127.0.0.1:9/1: Connect to ipv4#127.0.0.1:9 failed"
    assert throttle.filter(_rdkafka_record("FAIL", "rdkafka#producer-1", refused))
    for _ in range(20):
        now[0] += 1
        assert not throttle.filter(_rdkafka_record("FAIL", "rdkafka#producer-1", refused))
    assert throttle.filter(_rdkafka_record("FAIL", "rdkafka#producer-1", other)), "another broker connection"
    assert throttle.filter(_rdkafka_record("FAIL", "rdkafka#producer-2", refused)), "another client"
    assert throttle.filter(_rdkafka_record("GETPID", "rdkafka#producer-1", "retrying")), "not a connection failure"
    now[0] += 60
    assert throttle.filter(_rdkafka_record("FAIL", "rdkafka#producer-1", refused)), "a minute later, once more"


def test_an_absent_broker_does_not_flood_the_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 50}
    pub = SpoolingPublisher(conf, "flood", tmp_path / "spool", message_timeout_s=30)
    with caplog.at_level(logging.DEBUG, logger="faultline.producer.kafka"):
        pub.publish([_event(1)])
        deadline = time.monotonic() + 3  # librdkafka retries every 50 ms: dozens of attempts
        while time.monotonic() < deadline:
            pub.pump()
            time.sleep(0.05)
        pub.close(timeout_s=0.1)
    failures = [r for r in caplog.records if r.name == "faultline.producer.kafka" and r.args and r.args[0] == "FAIL"]
    assert 1 <= len(failures) <= 3, [r.getMessage() for r in failures]


@pytest.mark.broker
def test_a_new_publisher_process_sends_what_the_last_one_left_spooled(
    tmp_path: Path, kafka_bootstrap: str, unique_name: str
) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap}
    create_namespace_topics(conf, unique_name, partitions=1)
    away = {"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}
    first = SpoolingPublisher(away, unique_name, tmp_path / "spool", max_inflight=20)
    events = [_event(i) for i in range(300)]
    first.publish(events[:200])
    first.close(timeout_s=0.5)
    assert first.sent == 0 and first.spooled > 0

    second = SpoolingPublisher(conf, unique_name, tmp_path / "spool", max_inflight=20)
    assert second.backlog() == 200
    second.publish(events[200:])
    assert second.flush(30)
    second.close()
    ids = [json.loads(v)["id"] for v in read_topic(conf, topic_name(unique_name, "events"))]
    assert ids == [e.id for e in events]


# --- a real broker restart ---------------------------------------------------------------


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalKafka]:
    kafka = LocalKafka(tmp_path / "kafka")
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.mark.broker
def test_broker_restart_midway_every_event_arrives_exactly_once(tmp_path: Path, own_broker: LocalKafka) -> None:
    conf = {"bootstrap.servers": own_broker.bootstrap}
    create_namespace_topics(conf, "restart", partitions=1)
    pub = SpoolingPublisher(conf, "restart", tmp_path / "spool", max_inflight=100, retry_backoff_s=(0.2, 1.0))
    n = 3000
    events = [_event(i, node=f"n{i % 5}") for i in range(n)]
    for i, event in enumerate(events):
        pub.publish([event])
        if i % 100 == 0:
            pub.pump()
            time.sleep(0.01)
        if i == n // 3:
            own_broker.stop()
        if i == 2 * n // 3:
            assert pub.sent < 2 * n // 3 and pub.spooled > 0, "while the broker was away, events waited on disk"
            own_broker.start()
    assert pub.flush(90), f"{pub.backlog()} events not delivered"
    pub.close()

    ids = [json.loads(v)["id"] for v in read_topic(conf, topic_name("restart", "events"))]
    assert len(ids) == n and set(ids) == {e.id for e in events}, "every event exactly once"
    assert pub.dropped == 0 and pub.sent == n
