"""Canonical JSON of a record (RFC 8785, JCS): the exact bytes that are signed and hashed.

A signature is only as portable as the bytes under it. Python's
``json.dumps(sort_keys=True)`` is not a standard: its number formatting, its
escapes and its key order (by code point, not UTF-16 unit) are Python's, so a
Go or Java executor could not reproduce them. RFC 8785 defines one form any
language can produce: members sorted by their UTF-16 code units, no
whitespace, strings in shortest JSON escapes, numbers as ECMAScript writes an
IEEE-754 double. The serialisation is the maintained ``rfc8785`` package
(pure Python, by Trail of Bits); ``tests/streams/test_canonical.py`` holds it
to the RFC's test vectors.

What is signed is the record's JSON object as the schema writes it
(``model_dump(mode="json")``), with two rules of our own, so records stay
verifiable across schema versions and languages:

* the ``signature`` member is left out (it cannot sign itself);
* members whose value is ``null`` are left out, at any depth (so an optional
  field added to the schema later does not change the bytes of a record that
  does not use it). ``null`` inside an array stays.

And one condition: a record has a canonical form only as its schema reads it
(:func:`check_schema`). RFC 8785 writes ``8`` and ``8.0`` alike, so the bytes
cannot tell an integer from a float; the schema does (every integer field is
strict, and so are a command's counts, ``streams.decisions.COUNT_PARAMS``). A
record that holds ``8.0`` where its schema means a whole number -- built
without validation, or changed after it -- is refused here, so it can neither
be signed nor verify under a signature made over ``8`` (issue 27).

Numbers are doubles to JCS: an integer beyond ±(2**53 - 1) is taken as the
double nearest to it, exactly as a verifier in JavaScript or Go reads it.
NaN and infinities never reach here (the schema writes them as ``null``).
Timestamps are the strings the schema writes: RFC 3339 in UTC with ``Z``
(``2026-11-29T12:00:00Z``, fractions only when not zero).
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785
from pydantic import BaseModel, ValidationError

__all__ = ["canonical_json", "check_schema", "record_bytes", "content_hash", "HASH_PREFIX"]

HASH_PREFIX = "sha256:"
_SAFE_INTEGER = 2**53 - 1


def _jcs_ready(value: Any) -> Any:
    """``value`` with null members dropped and integers outside the double-safe range as doubles."""
    if isinstance(value, dict):
        return {key: _jcs_ready(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_jcs_ready(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _SAFE_INTEGER:
        try:
            return float(value)
        except OverflowError:
            raise ValueError(f"integer {value} is beyond any IEEE-754 double: it cannot be signed") from None
    return value


def canonical_json(data: Any) -> bytes:
    """RFC 8785 bytes of a JSON-compatible value (after the two rules of the module docstring)."""
    try:
        return rfc8785.dumps(_jcs_ready(data))
    except rfc8785.CanonicalizationError as exc:
        raise ValueError(f"not canonicalisable JSON: {exc}") from None


def check_schema(record: BaseModel) -> None:
    """Refuse (``ValueError``) a record its own schema would not read as it is: ``8.0`` in an integer field."""
    try:
        type(record).model_validate(record.model_dump(warnings=False))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"])
        raise ValueError(f"{where}: {err['msg']} (the record does not hold to its schema: it has no canonical "
                         "form)") from None


def record_bytes(record: BaseModel) -> bytes:
    """The canonical bytes of ``record``: its JSON object without ``signature`` (what is signed)."""
    check_schema(record)
    return canonical_json(record.model_dump(mode="json", exclude={"signature"}))


def content_hash(record: BaseModel) -> str:
    """``sha256:<hex>`` of :func:`record_bytes`: names one exact content (an approval names the command's)."""
    return HASH_PREFIX + hashlib.sha256(record_bytes(record)).hexdigest()
