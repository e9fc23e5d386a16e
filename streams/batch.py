"""Several events in one record of the ``events`` topic: the batch envelope, and how every reader decodes it.

A record of the ``events`` topic is either one :class:`~streams.events.Event` (as it always was) or
an :class:`EventBatch`: ``{"schema_version": 1, "events": [Event, ...]}``, the events of one
producer in the order it observed them. Why: a stream processor pays a fixed price per record
(fetching, its own bookkeeping, acknowledging, committing) that is many times the price of judging
one routine sample, and a node agent naturally has several events at once (every GPU's sample of
one tick, every rank's line of one NCCL timeout). Batching them makes that price per batch.

What a batch does not change. A record's offset stays the unit of "judged", "published" and
"snapshotted" (:mod:`correlators.partitions`): a batch is judged whole, its events in order, and its
decisions are published before the offset counts as published. Events keep their own ids, so
duplicates are recognised event by event whatever batches they came in. Both shapes may share a
topic: readers take either.

Decoding (:func:`decode_record`) is what every reader of the topic calls -- the correlator, its
takeover rebuild, the archive sink, backtests -- so they agree on what a record holds:

1. The fast path: the record is validated as a batch in one call (one JSON parse, every event
   checked by pydantic in Rust).
2. Not a batch (no ``events`` member, not JSON, not an object): it is read as one event, exactly as
   before batches existed; if that fails, the record is one bad event with the event's own error.
3. A batch with bad events: each event is checked alone; the good ones are kept in order and every
   bad one comes back with its own bytes and reason, so a reader dead-letters it alone.
4. A batch whose envelope itself is wrong (``events`` not a list, empty, a bad ``schema_version``):
   the whole record is one bad item.

**The cap** (issue 27): no event larger than :data:`streams.bounds.MAX_EVENT_BYTES` (1 MiB: a
2,048-node job's ``job_started`` is about 190 KB) reaches a reader. The broker's
limit counts compressed bytes, so a compressible 10 MB record passed it and was judged, archived and
printed whole. A record within the cap holds no event over it, and takes the fast path above
untouched. A larger one that is not a batch is one bad record, refused before it is parsed as an
event; in a larger batch (a node agent packs up to 256 KiB of small events), each event over the cap
is set aside alone, measured as the schema writes it. Every reader dead-letters them with the reason
and counts them, as any bad event.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from streams.bounds import MAX_EVENT_BYTES, MAX_RECORD_BYTES
from streams.events import Event
from streams.ranges import Int

__all__ = ["BATCH_SCHEMA_VERSION", "ENVELOPE_BYTES", "BadEvent", "Decoded", "EventBatch", "decode_record", "encode_batch",
           "over_cap", "record_schema"]

#: The envelope's version (the events inside carry their own, :data:`streams.events.SCHEMA_VERSION`).
BATCH_SCHEMA_VERSION = 1


class EventBatch(BaseModel):
    """Events of one producer in one record, in the order observed (see the module docstring)."""

    model_config = ConfigDict(extra="ignore", frozen=True, ser_json_inf_nan="constants")

    schema_version: Int = BATCH_SCHEMA_VERSION
    events: list[Event] = Field(min_length=1)


_BATCH: TypeAdapter[EventBatch] = TypeAdapter(EventBatch)
_HEAD = b'{"schema_version":%d,"events":[' % BATCH_SCHEMA_VERSION
#: Bytes a batch record adds to its events' own (and one comma between two of them).
ENVELOPE_BYTES = len(_HEAD) + 2


def encode_batch(encoded: Sequence[bytes]) -> bytes:
    """The batch record of events already serialised (``Event.model_dump_json()``), in their order.

    Joined, not re-serialised: a producer sizes its batches by the bytes it has encoded already.
    """
    if not encoded:
        raise ValueError("a batch holds at least one event")
    return _HEAD + b",".join(encoded) + b"]}"


@dataclass(frozen=True)
class BadEvent:
    """An event (or a whole record) a reader cannot use: its bytes and why, for a dead letter."""

    raw: bytes
    reason: str


@dataclass(frozen=True)
class Decoded:
    """What one record holds: its good events in order, and the bad ones (each to dead-letter alone)."""

    events: list[Event]
    bad: list[BadEvent] = field(default_factory=list)
    batch: bool = False  # the record was a batch envelope (even when every event in it was bad)


def _first_error(exc: ValidationError) -> str:
    return str(exc.errors()[0]["msg"])


def decode_record(value: bytes | None) -> Decoded:
    """Every event of one ``events`` record, and every bad one with its reason (module docstring)."""
    if value is None:
        return Decoded([], [BadEvent(b"", "undecodable event: the record has no value")])
    over = len(value) > MAX_EVENT_BYTES  # the cap (module docstring)
    try:
        events = _BATCH.validate_json(value).events  # 1.
        return _within_cap(events) if over else Decoded(events, batch=True)
    except ValidationError as exc:
        errors = exc.errors()
    if any(e["loc"] == () or (e["loc"] == ("events",) and e["type"] == "missing") for e in errors):  # 2.
        if (why := over_cap(value, MAX_EVENT_BYTES)) is not None:
            return Decoded([], [BadEvent(bytes(value), why)])
        try:
            return Decoded([Event.model_validate_json(value)])
        except ValidationError as single:
            return Decoded([], [BadEvent(bytes(value), f"undecodable event: {_first_error(single)}")])
    if all(len(e["loc"]) >= 2 and e["loc"][0] == "events" and isinstance(e["loc"][1], int) for e in errors):
        return _event_by_event(value, over)  # 3.
    envelope = next(e for e in errors if not (len(e["loc"]) >= 2 and e["loc"][0] == "events"))  # 4.
    where = ".".join(str(p) for p in envelope["loc"])
    return Decoded([], [BadEvent(bytes(value), f"undecodable event batch: {where}: {envelope['msg']}")], batch=True)


def over_cap(value: bytes, limit: int = MAX_RECORD_BYTES) -> str | None:
    """Why one record is too large for a reader, or None: ``limit`` is :data:`streams.bounds.MAX_EVENT_BYTES`
    for an event, :data:`streams.bounds.MAX_RECORD_BYTES` (the default) for what faultline publishes."""
    if len(value) <= limit:
        return None
    return f"over the cap: a record of {len(value):,} bytes, more than the {limit:,} a reader takes"


def _over_cap(raw: bytes, i: int, n: int) -> BadEvent:
    return BadEvent(raw, f"over the cap: event {i + 1} of a batch of {n} takes {len(raw):,} bytes, more than the "
                         f"{MAX_EVENT_BYTES:,} a reader takes")


def _within_cap(events: list[Event]) -> Decoded:
    """A batch larger than the cap: its events within it, in order, and each one over it set aside alone."""
    good: list[Event] = []
    bad: list[BadEvent] = []
    for i, event in enumerate(events):
        raw = event.model_dump_json().encode()
        if len(raw) > MAX_EVENT_BYTES:
            bad.append(_over_cap(raw, i, len(events)))
        else:
            good.append(event)
    return Decoded(good, bad, batch=True)


def _event_by_event(value: bytes, over: bool = False) -> Decoded:
    """Slow path of a batch with bad events: each event validated alone, from its own JSON (and, in a
    batch over the cap, each one over it set aside)."""
    items: list[Any] = json.loads(value)["events"]
    good: list[Event] = []
    bad: list[BadEvent] = []
    for i, item in enumerate(items):
        raw = json.dumps(item, separators=(",", ":")).encode()
        try:
            event = Event.model_validate_json(raw)
        except ValidationError as exc:
            bad.append(BadEvent(raw, f"undecodable event {i + 1} of a batch of {len(items)}: {_first_error(exc)}"))
            continue
        if over and len(written := event.model_dump_json().encode()) > MAX_EVENT_BYTES:
            bad.append(_over_cap(written, i, len(items)))
        else:
            good.append(event)
    return Decoded(good, bad, batch=True)


def record_schema(one: type[BaseModel] = Event, batch: type[BaseModel] = EventBatch) -> dict[str, Any]:
    """JSON Schema of one record of a topic that carries ``one`` or ``batch`` of them (exactly one of the two).

    Both shapes carry ``schema_version``, the one property every record of the topic has.
    """
    either: TypeAdapter[Any] = TypeAdapter(one | batch)  # type: ignore[operator,arg-type]  # two model classes
    schema = either.json_schema()
    return {
        "title": f"{one.__name__}Record",
        "description": f"One record: one {one.__name__}, or a {batch.__name__} of them from one producer, in the "
                       "order observed (streams/batch.py).",
        "type": "object",
        "properties": {"schema_version": {"type": "integer"}},
        "oneOf": schema.pop("anyOf"),
        **schema,
    }
