"""Batch records of the events topic through the sink (streams/batch.py): a row per event, a bad event
alone a dead letter, single-event records beside them, and records consumed while joining kept."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from sinks.archive import Archive
from sinks.archive_sink import ArchiveSink
from streams import events as ev
from streams.batch import encode_batch
from streams.topics import topic_name

from .records import Sample
from .test_archive_sink import Produce, namespace, produce, sink_for  # noqa: F401  # the fixtures

pytestmark = pytest.mark.broker

BAD = b'{"id":"bad","ts":"not a time","source":"nvml","body":{"kind":"agent_heartbeat"}}'


def _raw(sample: Sample, i: int) -> bytes:
    return sample.events[i].model_dump_json().encode()


def test_a_batch_record_becomes_a_row_per_event_and_a_bad_event_a_dead_letter_alone(
        produce: Produce, sink_for: Callable[[str], ArchiveSink], archive: Archive, namespace: str,  # noqa: F811
        sample: Sample) -> None:
    n = len(sample.events)
    assert n >= 4
    batch = encode_batch([_raw(sample, 0), BAD, *(_raw(sample, i) for i in range(1, n - 1))])
    produce("events", [batch, _raw(sample, n - 1)])  # a batch, and a single-event record after it
    assert sink_for("a").drain(timeout_s=60) == n + 1  # every event a row, the bad one a dead letter
    assert archive.count("events") == n
    [letter] = archive.query("SELECT * FROM deadletters FINAL")
    assert letter["stage"] == f"archive-sink:{topic_name(namespace, 'events')}"
    assert json.loads(letter["raw"]) == json.loads(BAD), "the bad event's own bytes, not its batch"
    assert letter["reason"].startswith(f"undecodable event 2 of a batch of {n}")


class _SaysUnassignedUntilItConsumed:
    """The sink's consumer, except that it reports no assignment until a consume returned records: the
    race where records arrive before the assignment is seen, made certain."""

    def __init__(self, consumer: Any) -> None:
        self._c, self.consumed = consumer, 0

    def assignment(self) -> Any:
        return self._c.assignment() if self.consumed else []

    def consume(self, *args: Any, **kwargs: Any) -> Any:
        msgs = self._c.consume(*args, **kwargs)
        self.consumed += len(msgs)
        return msgs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)


def test_records_consumed_while_joining_the_group_are_archived(
        produce: Produce, sink_for: Callable[[str], ArchiveSink], archive: Archive, sample: Sample) -> None:  # noqa: F811
    produce("events", [encode_batch([_raw(sample, i) for i in range(len(sample.events))])])
    sink = sink_for("a")
    consumer = sink._consumer = _SaysUnassignedUntilItConsumed(sink._consumer)  # type: ignore[assignment]
    assert sink.join(timeout_s=30)
    assert consumer.consumed == 1, "the record came while joining"
    assert sink.drain(timeout_s=60) == len(sample.events)
    assert archive.count("events") == len(sample.events)


def test_a_compressed_record_over_the_cap_is_a_dead_letter_never_an_archived_row(
        kafka_bootstrap: str, namespace: str, sink_for: Callable[[str], ArchiveSink], archive: Archive,  # noqa: F811
        sample: Sample) -> None:
    """Issue 27, item 6: a 10 MB record that compresses to a few KB passes the broker's limit (it counts
    compressed bytes); the sink archived it whole and `faultline incident` printed it. Now a record over the
    cap readers take (:data:`streams.bounds.MAX_EVENT_BYTES` on the events topic,
    :data:`streams.bounds.MAX_RECORD_BYTES` on any other the sink reads) is a dead letter with the reason, and the records around it are archived as ever."""
    from confluent_kafka import Producer

    from streams.bounds import MAX_EVENT_BYTES, MAX_RECORD_BYTES
    from streams.decisions import DeadLetter

    first = sample.events[0]
    padded = first.model_copy(update={"id": "padded", "source": "kernel", "body": ev.Xid(
        code=79, gpu=ev.GpuRef(index=0), message="\x1b]0;owned\x07" + "A" * 10 * 1024 * 1024)})
    huge = padded.model_dump_json().encode()
    letter = DeadLetter(stage="agent", reason="x" * 10 * 1024 * 1024, raw="", at=first.ts).model_dump_json().encode()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "compression.type": "zstd",
                         "message.max.bytes": 32 * 1024 * 1024})
    producer.produce(topic_name(namespace, "events"), value=huge)
    producer.produce(topic_name(namespace, "events"), value=_raw(sample, 1))
    producer.produce(topic_name(namespace, "deadletters"), value=letter)
    assert producer.flush(30) == 0
    assert sink_for("a").drain(timeout_s=60) == 3  # one event row, two dead letters
    assert [r["id"] for r in archive.query("SELECT id FROM events FINAL")] == [sample.events[1].id]
    letters = archive.query("SELECT stage, reason, raw FROM deadletters FINAL ORDER BY stage")
    assert [r["stage"] for r in letters] == [f"archive-sink:{topic_name(namespace, s)}" for s in ("deadletters", "events")]
    assert [r["reason"] for r in letters] == [
        f"over the cap: a record of {len(v):,} bytes, more than the {cap:,} a reader takes"
        for v, cap in ((letter, MAX_RECORD_BYTES), (huge, MAX_EVENT_BYTES))]
    assert all(len(r["raw"]) <= MAX_RECORD_BYTES for r in letters)
