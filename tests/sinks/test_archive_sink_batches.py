"""Batch records of the events topic through the sink (streams/batch.py): a row per event, a bad event
alone a dead letter, single-event records beside them, and records consumed while joining kept."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from sinks.archive import Archive
from sinks.archive_sink import ArchiveSink
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
