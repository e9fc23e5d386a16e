"""The ``events`` table's rows: made from the schema's events, or read from a record without them.

:func:`event_row` is the one definition of an event's row; :func:`event_columns` makes the same
values column by column. :class:`EventRows` carries rows that
:func:`sinks.archive.fast_events.fast_event_rows` read straight from a record, with the record,
so the schema's events can be had again when the archive refuses some of them
(:func:`sinks.archive_batch.write_events_isolating`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_core import to_json

from streams.batch import decode_record
from streams.events import Event

__all__ = ["EVENT_COLUMNS", "EventRows", "event_columns", "event_row", "events_columns"]

EVENT_COLUMNS = ["id", "ts", "source", "kind", "node", "job", "rank", "gpu", "body"]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


@dataclass(frozen=True)
class EventRows:
    """One batch record's events as archive rows (:func:`sinks.archive.fast_events.fast_event_rows`), and the
    record they came from: when the archive refuses some rows for good, :meth:`events` gives the schema's events
    to set them apart."""

    raw: bytes
    rows: list[tuple[Any, ...]]

    def events(self) -> list[Event]:
        return decode_record(self.raw).events


def _event_gpu(event: Event) -> str | None:
    ref = getattr(event.body, "gpu", None)
    if ref is None:
        return None
    if ref.uuid:
        return str(ref.uuid)
    if ref.pci:
        return str(ref.pci)
    return None if ref.index is None else str(ref.index)


def _millis(ts: datetime) -> int:
    """DateTime64(3) ticks, computed here: much cheaper than the driver's conversion (naive = UTC)."""
    aware = ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
    return (aware - _EPOCH) // _MILLISECOND


def event_row(e: Event) -> tuple[Any, ...]:
    return (e.id, _millis(e.ts), e.source, e.kind, e.node, e.job, e.rank, _event_gpu(e), to_json(e.body).decode())


def event_columns(events: Sequence[Event]) -> list[list[Any]]:
    """The rows of ``events`` as columns (:data:`EVENT_COLUMNS`' order): the driver's native shape,
    built without a tuple per row in between."""
    return [[e.id for e in events], [_millis(e.ts) for e in events], [e.source for e in events],
            [e.body.kind for e in events], [e.node for e in events], [e.job for e in events],
            [e.rank for e in events], [_event_gpu(e) for e in events], [to_json(e.body).decode() for e in events]]


def events_columns(events: Sequence[Event | EventRows]) -> list[list[Any]]:
    """Columns of events given as models, as rows already made (:class:`EventRows`), or both."""
    if all(isinstance(e, Event) for e in events):
        return event_columns(events)  # type: ignore[arg-type]  # all models, checked just above
    rows = [row for e in events for row in (e.rows if isinstance(e, EventRows) else (event_row(e),))]
    return [list(column) for column in zip(*rows, strict=True)] if rows else []
