"""The vocabulary of bad input, and strict access to a capture line's fields.

Every refusal is a :class:`BadInput` with a reason (for the dead letter) and a kind
(:data:`BAD_KINDS`, the label of ``faultline_capture_bad_lines_total``). The accessors below
check types strictly: an integer field takes a JSON integer, not ``3.0``, ``"3"`` or ``true``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ValidationError

__all__ = ["BAD_KINDS", "MAX_LINE_BYTES", "SAFE_INTEGER", "BadInput", "BadKind", "Obj", "build", "loads", "opt_ident",
           "opt_int", "opt_str", "req_bool", "req_ident", "req_int", "req_list", "req_object", "req_str", "require",
           "show", "too_long", "validate"]

Obj = Mapping[str, Any]
M = TypeVar("M", bound=BaseModel)

_REPR_MAX = 80


BadKind = Literal[
    "too_long", "invalid_utf8", "not_json", "missing_field", "wrong_type", "unknown_source",
    "bad_timestamp", "invalid_value", "duplicate", "clock_outlier",
]
#: Every kind of bad input, in the order a line is checked (the last two are judged by
#: :mod:`producers.capture.screen`, which sees a line among its neighbours).
BAD_KINDS: tuple[BadKind, ...] = get_args(BadKind)

#: The longest capture line, in bytes without its line ending. Half the Kafka record limit
#: (``message.max.bytes`` = 1 MiB), so the event a line becomes always fits in a record with
#: its envelope; a hundred times the longest line of a real capture (a torchelastic error
#: file with its Python traceback is ~10 KiB). Longer lines are bad input, refused before
#: they are decoded.
MAX_LINE_BYTES = 512 * 1024


class BadInput(ValueError):
    """A capture line that cannot be used; ``reason`` says why (for the dead letter), ``kind``
    which rule it broke (the label of ``faultline_capture_bad_lines_total``)."""

    def __init__(self, reason: str, kind: BadKind = "invalid_value") -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind: BadKind = kind


def too_long(size: int) -> BadInput:
    """The refusal of a line of ``size`` bytes (over :data:`MAX_LINE_BYTES`)."""
    return BadInput(f"line of {size:,} bytes is longer than the {MAX_LINE_BYTES:,} allowed; "
                    "split the observation or shorten its text", "too_long")


def show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _REPR_MAX else text[: _REPR_MAX - 3] + "..."


# --- field access ------------------------------------------------------------------


def opt_str(obj: Obj, key: str) -> str | None:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise BadInput(f"field {key!r} must be a string, got {show(value)}", "wrong_type")


def opt_int(obj: Obj, key: str, lo: int | None = None, hi: int | None = None) -> int | None:
    """An optional integer field, within ``lo..hi`` when given (the archive column's range)."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadInput(f"field {key!r} must be an integer, got {show(value)}", "wrong_type")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise BadInput(f"field {key!r} is {show(value)}, outside {lo}..{hi}", "invalid_value")
    return value


Why = Callable[[object], "str | None"]


def opt_ident(obj: Obj, key: str, why_not: Why) -> str | None:
    """An optional identifier field (node, GPU, job), checked against its grammar (streams/identifiers.py)."""
    value = opt_str(obj, key)
    if value is not None and (why := why_not(value)) is not None:
        raise BadInput(f"field {key!r}: {why}", "invalid_value")
    return value


def req_ident(obj: Obj, key: str, source: str, why_not: Why) -> str:
    """A required identifier field, checked against its grammar."""
    value = req_str(obj, key, source)
    if (why := why_not(value)) is not None:
        raise BadInput(f"{source}: field {key!r}: {why}", "invalid_value")
    return value


#: The largest integer a line may hold: I-JSON's (RFC 7493), what every JSON reader and the
#: canonical form of signed records (RFC 8785) read exactly, inside every Int64 archive column.
SAFE_INTEGER = 2**53 - 1


class _TooBig(Exception):
    """An integer past :data:`SAFE_INTEGER`, met while decoding (located afterwards, off the fast path)."""


def _checked_int(text: str) -> int:
    if len(text) > 15:  # 16+ characters: possibly past 2**53 - 1 (9,007,199,254,740,991)
        value = int(text)
        if not -SAFE_INTEGER <= value <= SAFE_INTEGER:
            raise _TooBig(value)
        return value
    return int(text)


_DECODER = json.JSONDecoder(parse_int=_checked_int)


def loads(text: str) -> Any:
    """``json.loads``, refusing (as bad input naming the field) an integer no stage or archive column can hold.

    The check rides on the decoder's own integer parsing, so a usual line costs almost nothing
    more; only a refused line is walked again to say where the integer is.
    """
    try:
        return _DECODER.decode(text)
    except _TooBig:
        where, value = _big_integer(json.loads(text))
        raise BadInput(f"field {where or 'value'!r}: integer {show(value)} is outside -(2**53-1)..2**53-1, the "
                       "range every stage reads exactly", "invalid_value") from None


def _big_integer(obj: object) -> tuple[str, int]:
    """Where the first integer past :data:`SAFE_INTEGER` is in ``obj`` (a dotted path), and it."""
    stack: list[tuple[str, object]] = [("", obj)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > SAFE_INTEGER:
            return where, value
        if isinstance(value, dict):
            stack.extend((f"{where}.{key}" if where else str(key), item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
    return "", 0


def require(obj: Obj, key: str, source: str) -> Any:
    value = obj.get(key)
    if value is None:
        raise BadInput(f"{source}: missing {key!r}", "missing_field")
    return value


def req_str(obj: Obj, key: str, source: str) -> str:
    value = require(obj, key, source)
    if not isinstance(value, str):
        raise BadInput(f"field {key!r} must be a string, got {show(value)}", "wrong_type")
    return value


def req_int(obj: Obj, key: str, source: str) -> int:
    value = require(obj, key, source)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadInput(f"field {key!r} must be an integer, got {show(value)}", "wrong_type")
    return value


def req_bool(obj: Obj, key: str, source: str) -> bool:
    value = require(obj, key, source)
    if not isinstance(value, bool):
        raise BadInput(f"field {key!r} must be true or false, got {show(value)}", "wrong_type")
    return value


def req_object(obj: Obj, key: str, source: str) -> Obj:
    value = require(obj, key, source)
    if not isinstance(value, dict):
        raise BadInput(f"field {key!r} must be an object, got {show(value)}", "wrong_type")
    return value


def req_list(obj: Obj, key: str, source: str) -> list[Any]:
    value = require(obj, key, source)
    if not isinstance(value, list):
        raise BadInput(f"field {key!r} must be a list, got {show(value)}", "wrong_type")
    return value


def build(model: type[M], obj: Obj, fields: tuple[str, ...], source: str) -> M:
    """Validate ``fields`` of ``obj`` (nulls dropped, so defaults apply) into ``model``."""
    return validate(model, {key: obj[key] for key in fields if obj.get(key) is not None}, source)


# Pydantic error types of a value of the right type that breaks a rule (a grammar, a range).
_VALUE_ERRORS = frozenset({"value_error", "greater_than", "greater_than_equal", "less_than", "less_than_equal",
                           "string_too_long", "string_too_short", "string_pattern_mismatch"})


def validate(model: type[M], data: Obj, source: str) -> M:
    """``model`` from ``data``, strictly; a validation error is bad input."""
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"]) or model.__name__
        kind: BadKind = ("missing_field" if err["type"] == "missing" else
                         "invalid_value" if err["type"] in _VALUE_ERRORS else "wrong_type")
        raise BadInput(f"{source}: field {where!r}: {err['msg']}", kind) from None
