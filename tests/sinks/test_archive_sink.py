"""Kafka → archive on a real broker and a chDB archive: counts, redelivery, dead letters, retries."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import REGISTRY
from pydantic import BaseModel

from sinks.archive import Archive
from sinks.archive_sink import SUFFIXES, ArchiveSink
from streams.topics import TOPICS, topic_name

from .records import Sample

pytestmark = pytest.mark.broker

Produce = Callable[[str, Sequence[BaseModel | bytes]], None]


@pytest.fixture
def namespace(kafka_bootstrap: str, unique_name: str) -> str:
    """A fresh namespace whose five archived topics exist (few partitions: records spread anyway)."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    topics = [NewTopic(topic_name(unique_name, s), num_partitions=min(TOPICS[s].partitions, 3)) for s in SUFFIXES]
    for future in admin.create_topics(topics).values():
        future.result(timeout=30)
    return unique_name


@pytest.fixture
def produce(kafka_bootstrap: str, namespace: str) -> Produce:
    """Send models (as their JSON) or raw bytes to one of the namespace's topics, flushed."""
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})

    def send(suffix: str, records: Sequence[BaseModel | bytes]) -> None:
        for i, record in enumerate(records):
            value = record if isinstance(record, bytes) else record.model_dump_json().encode()
            producer.produce(topic_name(namespace, suffix), value=value, key=str(i).encode())
        assert producer.flush(30) == 0

    return send


@pytest.fixture
def sink_for(kafka_bootstrap: str, namespace: str, archive: Archive) -> Iterator[Callable[[str], ArchiveSink]]:
    """Open sinks on the test's archive, by consumer group; all closed after the test."""
    opened: list[ArchiveSink] = []

    def open_sink(group: str) -> ArchiveSink:
        sink = ArchiveSink(archive, kafka_bootstrap, namespace, group_id=f"{namespace}.{group}")
        opened.append(sink)
        return sink

    yield open_sink
    for sink in opened:
        sink.close()


def _produce_sample(produce: Produce, sample: Sample) -> int:
    produce("events", sample.events)
    produce("incidents", sample.incidents)
    produce("commands", sample.commands)
    produce("command-results", sample.results)
    produce("deadletters", sample.deadletters)
    return sum(len(part) for part in (sample.events, sample.incidents, sample.commands, sample.results,
                                      sample.deadletters))


def _counts(archive: Archive) -> dict[str, int]:
    tables = ("events", "incident_versions", "commands", "command_results", "deadletters", "checkpoints",
              "gpu_ledger")
    return {table: archive.count(table) for table in tables}


def _retries() -> float:
    return REGISTRY.get_sample_value("faultline_archive_write_retries_total") or 0.0


EXPECTED = {"events": 10, "incident_versions": 3, "commands": 4, "command_results": 3, "deadletters": 2,
            "checkpoints": 3, "gpu_ledger": 3}


def test_drain_archives_every_topic(produce: Produce, sink_for: Callable[[str], ArchiveSink],
                                    archive: Archive, sample: Sample) -> None:
    sent = _produce_sample(produce, sample)
    assert sink_for("a").drain(timeout_s=60) == sent
    assert _counts(archive) == EXPECTED
    [latest] = archive.latest_incidents(job="j1")
    assert latest["version"] == 3


def test_redelivery_does_not_duplicate(produce: Produce, sink_for: Callable[[str], ArchiveSink],
                                       archive: Archive, sample: Sample) -> None:
    sent = _produce_sample(produce, sample)
    first = sink_for("a")
    assert first.drain(timeout_s=60) == sent

    # A new consumer group reads every topic from the start again...
    assert sink_for("b").drain(timeout_s=60) == sent
    assert _counts(archive) == EXPECTED

    # ...and a producer that re-sends everything does no harm either.
    _produce_sample(produce, sample)
    assert first.drain(timeout_s=60) == sent
    assert _counts(archive) == EXPECTED

    # Caught up: nothing left to write.
    assert first.drain(timeout_s=30) == 0


def test_bad_records_become_dead_letters(produce: Produce, sink_for: Callable[[str], ArchiveSink],
                                         archive: Archive, namespace: str, sample: Sample) -> None:
    produce("events", [b"{not json", *sample.events[:2]])
    produce("commands", [b'{"id": "c", "type": "format_disk"}'])
    assert sink_for("a").drain(timeout_s=60) == 4
    assert archive.count("events") == 2

    letters = {r["stage"]: r for r in archive.query("SELECT * FROM deadletters FINAL")}
    assert set(letters) == {f"archive-sink:{topic_name(namespace, 'events')}",
                            f"archive-sink:{topic_name(namespace, 'commands')}"}
    bad_json = letters[f"archive-sink:{topic_name(namespace, 'events')}"]
    assert bad_json["raw"] == "{not json" and "ValidationError" in bad_json["reason"]
    assert "format_disk" in letters[f"archive-sink:{topic_name(namespace, 'commands')}"]["reason"]

    # Re-delivered bad records keep their dead-letter id (record timestamp, not arrival time).
    assert sink_for("b").drain(timeout_s=60) == 4
    assert archive.count("deadletters") == 2


def test_archive_errors_are_retried_before_commit(produce: Produce, sink_for: Callable[[str], ArchiveSink],
                                                  archive: Archive, sample: Sample,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    failures = iter([RuntimeError("archive down"), RuntimeError("still down")])
    real_write = archive.write_events

    def flaky_write(events: list[Any]) -> int:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return real_write(events)

    monkeypatch.setattr(archive, "write_events", flaky_write)
    retries_before = _retries()
    produce("events", sample.events)
    assert sink_for("a").drain(timeout_s=60) == len(sample.events)
    assert _retries() - retries_before == 2
    assert archive.count("events") == len(sample.events)


def _sink_lag(namespace: str) -> float | None:
    return REGISTRY.get_sample_value("faultline_consumer_lag_records",
                                     {"stage": "sink", "topic": f"{namespace}.events", "partition": "0"})


def test_run_until_stopped(produce: Produce, sink_for: Callable[[str], ArchiveSink],
                           archive: Archive, sample: Sample, namespace: str) -> None:
    sink = sink_for("a")
    stop = threading.Event()
    worker = threading.Thread(target=sink.run, args=(stop,), kwargs={"max_wait_s": 0.1})
    worker.start()
    try:
        produce("events", sample.events)
        produce("commands", sample.commands)
        for _ in range(300):
            if archive.count("events") == len(sample.events) and archive.count("commands") == len(sample.commands) \
                    and _sink_lag(namespace) is not None:  # measured every few seconds while it runs
                break
            stop.wait(0.1)
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not worker.is_alive()
    sink.close()
    assert archive.count("events") == len(sample.events)
    assert archive.count("gpu_ledger") == 3
    # The lag gauge was measured while it ran (Prometheus alerts on it).
    lag = _sink_lag(namespace)
    assert lag is not None and lag >= 0
    # Everything it archived was committed: the same group has nothing left to drain.
    assert sink_for("a").drain(timeout_s=30) == 0


def test_drain_passes_transaction_markers(kafka_bootstrap: str, namespace: str,
                                          sink_for: Callable[[str], ArchiveSink], archive: Archive,
                                          sample: Sample) -> None:
    """A transactional producer leaves a commit marker after its records: drain must not wait on it."""
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{namespace}.tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for event in sample.events:
        producer.produce(topic_name(namespace, "events"), value=event.model_dump_json().encode(), key=event.id)
    producer.commit_transaction(30)

    sink = sink_for("a")
    # The commit markers reach the partitions just after commit_transaction returns: wait (bounded) until
    # the last stable offset shows the records, as any read-committed reader must.
    deadline = time.monotonic() + 20
    while not any(sink.end_offsets().get(topic_name(namespace, "events"), {}).values()) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sink.drain(timeout_s=30) == len(sample.events)
    assert archive.count("events") == len(sample.events)

    # Committed past the markers too, so the group's lag is zero.
    events = topic_name(namespace, "events")
    ends = sink.end_offsets()[events]
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{namespace}.a"})
    committed = probe.committed([TopicPartition(events, p) for p in ends], timeout=10)
    probe.close()
    assert {tp.partition: tp.offset for tp in committed} == ends


def test_a_value_the_archive_cannot_store_does_not_stall_the_sink(
        produce: Produce, sink_for: Callable[[str], ArchiveSink], archive: Archive, sample: Sample) -> None:
    """Issue 15, finding 6: a rank of 2**70 parsed, then made every insert fail; the sink retried forever."""
    poison = sample.events[0].model_dump(mode="json") | {"id": "poison", "rank": 2**70}
    import json

    produce("events", [*sample.events[:2], json.dumps(poison).encode(), *sample.events[2:4]])
    assert sink_for("a").drain(timeout_s=60) == 5
    assert archive.count("events") == 4
    [letter] = archive.query("SELECT * FROM deadletters FINAL")
    assert '"poison"' in letter["raw"] and "rank" in letter["reason"]
