"""Archive rows of an ``events`` record read straight from its JSON, without a model per event.

Why: the sink's profile (README "Benchmarks") found more than half of its time in building the
pydantic models of a batch record's events, which it only takes apart again into columns. The
common record -- a batch of GPU samples and agent heartbeats -- is read here with one JSON parse
and a few type checks per event.

**The rule.** The schema (:class:`streams.events.Event`, read by :func:`streams.batch.decode_record`)
stays the one contract. :func:`fast_event_rows` returns rows only for a record that the schema
decodes as a whole batch with no bad event, and then exactly the rows
:func:`sinks.archive.event_rows.event_row` makes of the schema's events, in order. An event is read
here only in the plain forms producers write (a GPU sample or a heartbeat, floats as numbers, times
in RFC 3339 UTC...); any other event (another kind, a float given as a string, a time with an
offset) is validated alone by the schema, and the record is refused -- None: the caller decodes it
through the schema -- as soon as the schema refuses one, or when it is not a batch or is over the
cap. So it accepts a subset of what the schema accepts, never more, and whatever is dead-lettered
is decided by the schema path alone. ``tests/sinks/test_fast_events.py`` checks this on generated
records.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from itertools import product
from typing import Any

import msgspec
from pydantic_core import to_json

from sinks.archive.event_rows import event_row
from streams.bounds import MAX_EVENT_BYTES
from streams.events import Event, GpuMetrics
from streams.identifiers import check_gpu, check_job, check_node
from streams.ranges import INT32_MAX, INT32_MIN

__all__ = ["FLOAT_METRICS", "INT_METRICS", "fast_event_rows"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The parse: the same JSON values as the schema's (pydantic-core's) at ~3x its speed; what it does not read
#: (NaN, a number past a float's range) raises a ValueError: refused, so the schema reads it.
_JSON = msgspec.json.Decoder()
_MILLISECOND = timedelta(milliseconds=1)
#: The one time form read here: what the schema writes (UTC, ``Z``), at most microseconds; ASCII digits only
#: (``\d`` would take any script's, which ``int()`` reads and the schema refuses).
_TS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?Z")
_MINUTES: dict[str, int] = {}  # "YYYY-MM-DDTHH:MM" -> its milliseconds from the epoch (_millis)
_EXACT_FLOAT = 2**53  # an integer given for a float field: converted only where the conversion is exact
#: :class:`streams.events.GpuMetrics`' fields by type (the test holds them to the model's).
FLOAT_METRICS = ("temperature_c", "power_w", "power_limit_w", "utilization_pct", "memory_used_mib", "memory_total_mib")
INT_METRICS = ("ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate", "retired_pages_sbe",
               "retired_pages_dbe", "remapped_rows_pending", "remapped_rows_failure", "pcie_replay_counter")
_METRICS = tuple(GpuMetrics.model_fields)
_REASONS = _METRICS.index("clocks_event_reasons")
#: Every combination of value types of metrics already written as the schema writes them (a set, so checking
#: sixteen types is one lookup): floats first, then the integers and the reasons, in the model's order.
_WRITTEN = frozenset(product(*([(float, type(None))] * len(FLOAT_METRICS)),
                             *[(list, type(None)) if name == "clocks_event_reasons" else (int, type(None))
                               for name in _METRICS[len(FLOAT_METRICS):]]))


class _Refused(Exception):
    """Not on the fast path: the record goes through the schema."""


def fast_event_rows(value: bytes) -> list[tuple[Any, ...]] | None:
    """The archive rows of a batch record's events, or None: decode it through the schema (module docstring)."""
    if len(value) > MAX_EVENT_BYTES or not value.startswith(b'{"schema_version":'):
        return None
    try:
        record = _JSON.decode(value)
        if type(record) is not dict or type(record.get("schema_version", 1)) is not int:
            return None
        events = record.get("events")
        if type(events) is not list or not events:
            return None
        return [_row_or_schemas(e) for e in events]
    except ValueError:  # not JSON, or an event the schema refuses: the schema path says so, and why
        return None


def _row_or_schemas(e: Any) -> tuple[Any, ...]:
    """The event's row, read here where it can be, else by the schema from the event alone (an event of another
    kind, a value in a form the checks here do not read): the same event the schema reads in the batch, for the
    same JSON value. When the schema refuses it, ``ValidationError`` (a ValueError) refuses the whole record."""
    try:
        return _row(e)
    except (_Refused, ValueError):
        return event_row(Event.model_validate_json(to_json(e)))


def _row(e: Any) -> tuple[Any, ...]:
    """One event's row (:data:`sinks.archive.store.EVENT_COLUMNS`), or :class:`_Refused`."""
    if type(e) is not dict or type(e.get("schema_version", 1)) is not int:
        raise _Refused
    eid, ts, source, body = e.get("id"), e.get("ts"), e.get("source"), e.get("body")
    if type(eid) is not str or type(source) is not str or type(body) is not dict:
        raise _Refused
    node, job = e.get("node"), e.get("job")
    if node is not None:
        check_node(_text(node))
    if job is not None:
        check_job(_text(job))
    _rank(e.get("local_rank"))
    kind = body.get("kind")
    if kind == "gpu_sample":
        body_json, gpu = _gpu_sample(body)
    elif kind == "agent_heartbeat":
        body_json, gpu = '{"kind":"agent_heartbeat"}', None
    else:
        raise _Refused
    return (eid, _millis(ts), source, kind, node, job, _rank(e.get("rank")), gpu, body_json)


def _text(value: Any) -> str:
    if type(value) is not str:
        raise _Refused
    return value


def _rank(value: Any) -> int | None:
    """A rank: absent, or a JSON integer in ``0..INT32_MAX`` (:data:`streams.ranges.NonNegInt32`)."""
    if value is not None and (type(value) is not int or not 0 <= value <= INT32_MAX):
        raise _Refused
    return value


def _millis(ts: Any) -> int:
    """DateTime64(3) ticks of an RFC 3339 UTC time, as the store computes them from the schema's datetime.

    The date, hour and minute are parsed once per minute (:func:`_minute`); the seconds and their fraction
    added to it as integers, floored to the millisecond as the store's division floors them.
    """
    if type(ts) is not str or _TS.fullmatch(ts) is None:
        raise _Refused
    base = _MINUTES.get(ts[:16])
    if base is None:
        base = _minute(ts[:16])
    seconds, fraction = int(ts[17:19]), ts[20:-1]
    if seconds > 59:
        raise _Refused
    return base + seconds * 1000 + (int(fraction.ljust(6, "0")) // 1000 if fraction else 0)


def _minute(prefix: str) -> int:
    """Milliseconds from the epoch to ``YYYY-MM-DDTHH:MM`` UTC (ValueError when no such minute: refused)."""
    if len(_MINUTES) >= 100_000:
        _MINUTES.clear()
    base = _MINUTES[prefix] = (datetime.fromisoformat(prefix + ":00+00:00") - _EPOCH) // _MILLISECOND
    return base


def _gpu_sample(body: dict[str, Any]) -> tuple[str, str | None]:
    """A ``gpu_sample`` body as the schema writes it, and the row's ``gpu`` (uuid, else pci, else index)."""
    gpu, metrics = body.get("gpu"), body.get("metrics")
    if type(gpu) is not dict or type(metrics) is not dict:
        raise _Refused
    index, uuid, pci = gpu.get("index"), gpu.get("uuid"), gpu.get("pci")
    if index is not None and (type(index) is not int or not INT32_MIN <= index <= INT32_MAX):
        raise _Refused
    if uuid is not None:
        check_gpu(_text(uuid))
    if pci is not None:
        _text(pci)
    ref = {"index": index, "uuid": uuid, "pci": pci}
    body_json = to_json({"kind": "gpu_sample", "gpu": ref, "metrics": _as_written(metrics)}).decode()
    return body_json, (uuid or pci or (None if index is None else str(index)))


def _as_written(metrics: dict[str, Any]) -> dict[str, Any]:
    """:func:`_metrics`, taken as it is when it is already written as the schema writes it (as producers do):
    every field, in the model's order, each float a finite float or None, each integer an int or None."""
    values = tuple(metrics.values())
    if (tuple(metrics) == _METRICS and tuple(map(type, values)) in _WRITTEN
            and math.isfinite(sum(filter(None, values[:len(FLOAT_METRICS)])))
            and (values[_REASONS] is None or set(map(type, values[_REASONS])) <= {str})):
        return metrics
    return _metrics(metrics)


def _metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """:class:`streams.events.GpuMetrics` as the schema writes it: every field, in order, floats as floats."""
    out: dict[str, Any] = dict.fromkeys(_METRICS)
    for name in FLOAT_METRICS:
        v = metrics.get(name)
        if v is None:
            continue
        if type(v) is float:
            if not math.isfinite(v):
                raise _Refused
            out[name] = v
        elif type(v) is int and -_EXACT_FLOAT <= v <= _EXACT_FLOAT:
            out[name] = float(v)
        else:
            raise _Refused
    for name in INT_METRICS:
        v = metrics.get(name)
        if v is not None and type(v) is not int:
            raise _Refused
        out[name] = v
    reasons = metrics.get("clocks_event_reasons")
    if reasons is not None and (type(reasons) is not list or any(type(r) is not str for r in reasons)):
        raise _Refused
    out["clocks_event_reasons"] = reasons
    return out

