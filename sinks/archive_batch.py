"""What the archive sink consumed and decoded, waiting to be written: records in, archive rows and dead letters out.

Every record is decoded with its topic's model, and one that does not decode becomes a dead letter
saying why (:mod:`sinks.archive_sink`). An ``events`` record is first offered to
:func:`sinks.archive.fast_events.fast_event_rows`, which reads a plain batch of GPU samples and
heartbeats straight into archive rows; anything it does not take goes through the schema
(:func:`streams.batch.decode_record`), which alone decides what is a dead letter.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message
from prometheus_client import Counter
from pydantic import BaseModel

from common import metrics as stage_metrics
from common.deadletters import dead_letter
from sinks.archive.event_rows import EventRows
from sinks.archive.fast_events import fast_event_rows
from sinks.archive_errors import is_permanent, write_isolating
from streams.batch import decode_record, over_cap
from streams.bounds import MAX_EVENT_BYTES, MAX_RECORD_BYTES
from streams.decisions import DeadLetter
from streams.events import Event
from streams.topics import TOPICS

__all__ = ["DEAD_LETTERS", "Batch", "Parts", "decode", "write_events_isolating"]

DEAD_LETTERS = Counter("faultline_archive_dead_letters", "Records the archive sink could not decode")

#: What one consumed record decodes to: (topic suffix, a row model or an events record's rows) each.
Parts = list[tuple[str, BaseModel | EventRows]]


@dataclass
class Batch:
    """Decoded records waiting to be written, and the offsets to commit after."""

    records: dict[str, list[BaseModel | EventRows]] = field(default_factory=lambda: defaultdict(list))
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    size: int = 0  # rows (a record that decoded to none counts one)
    opened: float = 0.0

    def add(self, decoded: Parts, msg: Message) -> None:
        """One consumed record: what it decoded to (none: a tombstone)."""
        if self.size == 0:
            self.opened = time.monotonic()
        rows = 0
        for suffix, record in decoded:
            self.records[suffix].append(record)
            rows += len(record.rows) if isinstance(record, EventRows) else 1
        self.offsets[(str(msg.topic()), int(msg.partition() or 0))] = int(msg.offset() or 0) + 1
        self.size += max(1, rows)

    def due(self, max_batch: int, max_wait_s: float) -> bool:
        return self.size >= max_batch or (self.size > 0 and time.monotonic() - self.opened >= max_wait_s)


def decode(msg: Message, suffix: str) -> Parts:
    """The record as its topic's model(s) -- an events record may be a batch, read as rows where it can be --
    and a dead letter for each thing in it that is not one, saying why."""
    value = msg.value()
    if value is None and TOPICS[suffix].cleanup == "compact":
        return []  # a tombstone: nothing to archive
    if suffix == "events" and value is not None:
        if (rows := fast_event_rows(value)) is not None:
            return [("events", EventRows(value, rows))]
        decoded = decode_record(value)
        if decoded.batch or decoded.events:  # else one bad event: said as any bad record is, below
            out: Parts = [("events", e) for e in decoded.events]
            return out + [("deadletters", _dead_letter(msg, bad.reason, bad.raw)) for bad in decoded.bad]
    if value is not None and (why := over_cap(value, MAX_EVENT_BYTES if suffix == "events" else MAX_RECORD_BYTES)):
        return [("deadletters", _dead_letter(msg, why, value))]
    try:
        if value is None:
            raise ValueError("record has no value")
        return [(suffix, TOPICS[suffix].model.model_validate_json(value))]
    except ValueError as exc:
        return [("deadletters", _dead_letter(msg, f"{type(exc).__name__}: {exc}", value))]


def _dead_letter(msg: Message, reason: str, raw: bytes | None) -> DeadLetter:
    DEAD_LETTERS.inc()
    stage_metrics.DEAD_LETTERS.labels("sink").inc()
    kind, ms = msg.timestamp()
    at = datetime.fromtimestamp(ms / 1000, UTC) if kind != TIMESTAMP_NOT_AVAILABLE else datetime.now(UTC)
    return dead_letter(f"archive-sink:{msg.topic()}", reason, raw, at)


def write_events_isolating(write: Callable[[Sequence[Event | EventRows]], int],
                           records: Sequence[BaseModel | EventRows], stage: str) -> tuple[int, list[DeadLetter]]:
    """:func:`sinks.archive_errors.write_isolating` for events, some of them rows read without the schema.

    All rows go in one insert. Only when the archive refuses some for good are the rows' records
    decoded through the schema, so that the events that fail alone are set aside exactly as before.
    """
    try:
        return write(records), []  # type: ignore[arg-type]  # the events topic's records: events or their rows
    except Exception as exc:
        if not is_permanent(exc):
            raise
    events = [e for r in records for e in (r.events() if isinstance(r, EventRows) else (r,))]
    return write_isolating(write, events, stage)  # type: ignore[arg-type]  # models now, as write_isolating wants
