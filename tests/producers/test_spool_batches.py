"""The spooling publisher with batching: what one publish() holds travels in few records, per source, in
order; counters count events; a batch spooled by one process is sent whole by the next."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from common.kafka_admin import create_namespace_topics
from common.kafka_reader import read_topic
from producers.batching import Batching
from producers.spool import SpoolingPublisher
from producers.spool.disk import unframe
from streams.batch import decode_record
from streams.events import AgentHeartbeat, Event, GpuMetrics, GpuRef, GpuSample
from streams.topics import topic_name

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
BATCHING = Batching(max_events=50, per_source=True)


def _events(n: int, start: int = 0) -> list[Event]:
    """A tick's worth: GPU samples, with a heartbeat every 10th."""
    out = []
    for i in range(start, start + n):
        ts = T0 + timedelta(milliseconds=i)
        if i % 10 == 9:
            out.append(Event(id=f"hb{i}", ts=ts, source="node_agent", node="n17", body=AgentHeartbeat()))
        else:
            out.append(Event(id=f"s{i}", ts=ts, source="nvml", node="n17",
                             body=GpuSample(gpu=GpuRef(index=i % 8), metrics=GpuMetrics(power_w=float(i)))))
    return out


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _records(conf: dict[str, str], namespace: str) -> list[bytes]:
    return list(read_topic(conf, topic_name(namespace, "events")))


def test_counters_count_events_while_the_broker_is_away(tmp_path: Path) -> None:
    def spooled(source: str) -> float:
        return REGISTRY.get_sample_value("faultline_producer_spooled_total", {"source": source}) or 0.0

    before = spooled("nvml"), spooled("node_agent")
    conf = {"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}
    pub = SpoolingPublisher(conf, "away", tmp_path / "spool", max_inflight=1, batching=BATCHING)
    pub.publish(_events(30))  # runs: 9 samples, 1 heartbeat, 9, 1, 9, 1 -> six records
    assert pub.backlog() == 6, "records, not events"
    pub.close(timeout_s=0.1)
    # the first record went to the producer; the other five (5 x 9 or 1 events) waited on disk
    assert pub.spooled == 30 - 9
    assert (spooled("nvml") - before[0], spooled("node_agent") - before[1]) == (18, 3)


@pytest.mark.broker
def test_a_publish_call_goes_in_few_records_per_source_and_in_order(
        tmp_path: Path, kafka_bootstrap: str, unique_name: str) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap}
    create_namespace_topics(conf, unique_name, partitions=1)
    pub = SpoolingPublisher(conf, unique_name, tmp_path / "spool", batching=BATCHING)
    events = _events(120)
    pub.publish(events[:100])
    pub.publish(events[100:])
    assert pub.flush(30)
    pub.close()
    records = _records(conf, unique_name)
    decoded = [decode_record(r) for r in records]
    assert [e for d in decoded for e in d.events] == events, "every event once, in order"
    assert len(records) == 24, "per publish: runs of nine samples and one heartbeat"
    assert all(len({e.source for e in d.events}) == 1 for d in decoded)
    assert pub.sent == 120


@pytest.mark.broker
def test_batches_left_spooled_by_one_process_are_sent_whole_by_the_next(
        tmp_path: Path, kafka_bootstrap: str, unique_name: str) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap}
    create_namespace_topics(conf, unique_name, partitions=1)
    away = {"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}
    first = SpoolingPublisher(away, unique_name, tmp_path / "spool", max_inflight=2,
                              batching=Batching(max_events=500))
    events = _events(400)
    first.publish(events[:300])
    first.close(timeout_s=0.5)
    lines = [json.loads(payload) for seg in sorted((tmp_path / "spool").glob("*.jsonl"))
             for raw in seg.read_bytes().splitlines(keepends=True) if (payload := unframe(raw)) is not None]
    assert lines and all(line["events"] > 1 for line in lines if "events" in line)

    second = SpoolingPublisher(conf, unique_name, tmp_path / "spool", batching=Batching(max_events=500))
    second.publish(events[300:])
    assert second.flush(30)
    second.close()
    assert [e for r in _records(conf, unique_name) for e in decode_record(r).events] == events
    assert second.sent == 400
