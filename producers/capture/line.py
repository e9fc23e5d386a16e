"""One capture line: bytes to a JSON object, its envelope checked, its events with deterministic ids."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime

from pydantic import ValidationError

from producers.capture.fields import (
    MAX_LINE_BYTES,
    BadInput,
    Obj,
    loads,
    opt_ident,
    opt_int,
    show,
    too_long,
)
from producers.capture.sources import SOURCES, bodies_of
from streams.events import Event
from streams.identifiers import why_not_job, why_not_node
from streams.ranges import INT32_MAX

__all__ = ["capture_timestamp", "event_ids", "parse_capture_line"]

_ID_HEX_DIGITS = 24
_YEARS = range(2000, 2101)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _decode(raw: bytes | str) -> tuple[bytes, Obj]:
    """The line's bytes (for the id) and its JSON object."""
    try:
        if isinstance(raw, bytes | bytearray):
            data = bytes(raw).rstrip(b"\r\n")
            if len(data) > MAX_LINE_BYTES:  # before decoding: a huge line costs no parsing
                raise too_long(len(data))
            text = data.decode("utf-8")
        else:
            text = raw.rstrip("\r\n")
            data = text.encode("utf-8")
            if len(data) > MAX_LINE_BYTES:
                raise too_long(len(data))
    except UnicodeError:
        raise BadInput("invalid UTF-8", "invalid_utf8") from None
    if not text.strip():
        raise BadInput("empty line", "not_json")
    try:
        obj = loads(text)
    except BadInput:
        raise
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"not JSON: {exc}", "not_json") from None
    if not isinstance(obj, dict):
        raise BadInput(f"not a JSON object: {type(obj).__name__}", "not_json")
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        _check_no_lone_surrogates(obj)
    return data, obj


def _check_no_lone_surrogates(obj: Obj) -> None:
    """JSON may escape half a UTF-16 pair (``"\\ud800"``); such a string cannot be
    sent on as UTF-8, so the line is bad input rather than a poisoned event."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except (UnicodeError, RecursionError):
        raise BadInput("invalid UTF-8: lone surrogate escape in a string", "invalid_utf8") from None


def capture_timestamp(obj: Obj) -> datetime:
    value = obj.get("ts")
    if value is None:
        raise BadInput("missing 'ts'", "missing_field")
    if not isinstance(value, str):
        raise BadInput(f"field 'ts' must be an RFC 3339 string, got {show(value)}", "bad_timestamp")
    try:
        ts = datetime.fromisoformat(value.upper())
    except ValueError:
        raise BadInput(f"ts is not RFC 3339: {show(value)}", "bad_timestamp") from None
    if ts.tzinfo is None or ts.utcoffset() is None:
        raise BadInput(f"ts has no UTC offset: {show(value)}", "bad_timestamp")
    if ts.year not in _YEARS:
        raise BadInput(f"ts outside the years 2000..2100: {show(value)}", "bad_timestamp")
    return ts.astimezone(UTC)


def _source(obj: Obj) -> str:
    value = obj.get("source")
    if value is None:
        raise BadInput("missing 'source'", "missing_field")
    if not isinstance(value, str) or value not in SOURCES:
        raise BadInput(f"unknown source {show(value)}", "unknown_source")
    return value


def event_ids(data: bytes, count: int) -> list[str]:
    """Deterministic ids for the ``count`` events of the line ``data``."""
    digest = hashlib.sha256(data).hexdigest()[:_ID_HEX_DIGITS]
    return [digest if i == 0 else f"{digest}-{i}" for i in range(count)]


def parse_capture_line(raw: bytes | str) -> list[Event]:
    """Turn one capture line into its canonical events (possibly none).

    Raises :class:`BadInput` for anything that is not a usable observation;
    never any other exception.
    """
    data, obj = _decode(raw)
    source = _source(obj)
    ts = capture_timestamp(obj)
    node, job = opt_ident(obj, "node", why_not_node), opt_ident(obj, "job", why_not_job)
    # The archive's rank column is Int32; a rank is never negative.
    rank, local_rank = opt_int(obj, "rank", 0, INT32_MAX), opt_int(obj, "local_rank", 0, INT32_MAX)
    bodies = bodies_of(source, obj)
    ids = event_ids(data, len(bodies))
    try:
        return [
            Event(id=id_, ts=ts, source=source, node=node, job=job, rank=rank, local_rank=local_rank, body=body)
            for id_, body in zip(ids, bodies, strict=True)
        ]
    except ValidationError as exc:  # a rule of the event schema the checks above did not name
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"]) or "event"
        raise BadInput(f"{source}: field {where!r}: {err['msg']}", "invalid_value") from None
