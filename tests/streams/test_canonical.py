"""Canonical JSON (RFC 8785): the RFC's own test vectors, and the two rules we add for records."""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime

import pytest

from streams.canonical import canonical_json, content_hash, record_bytes
from streams.decisions import Command, Target

# RFC 8785, Appendix B: IEEE-754 doubles (as hex) and what JCS writes for them.
NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "text"), NUMBERS)
def test_numbers_are_written_as_ecmascript_writes_doubles(bits: str, text: str) -> None:
    (value,) = struct.unpack(">d", bytes.fromhex(bits))
    assert canonical_json(value) == text.encode()


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000"])
def test_nan_and_infinity_have_no_canonical_form(bits: str) -> None:
    (value,) = struct.unpack(">d", bytes.fromhex(bits))
    with pytest.raises(ValueError):
        canonical_json(value)


def test_the_rfcs_example_object() -> None:
    """RFC 8785 section 3.2.2 (input) and 3.2.3 (output)."""
    text = r'''{
      "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
      "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
      "literals": [null, true, false]
    }'''
    want = '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],' \
           '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    assert canonical_json(json.loads(text)) == want.encode()


def test_members_are_sorted_by_utf16_code_units() -> None:
    """RFC 8785 section 3.2.3's sorting example: U+1F600 (a surrogate pair) sorts before U+FB33."""
    keys = ["\u20ac", "\r", "\ufb33", "1", "\U0001f600", "\u0080", "\u00f6"]
    out = json.loads(canonical_json({k: 0 for k in keys}))
    assert list(out) == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_integers_beyond_the_double_range_are_read_as_doubles_as_any_verifier_reads_them() -> None:
    assert canonical_json(2**53 + 1) == canonical_json(float(2**53 + 1)) == b"9007199254740992"
    assert canonical_json([2**53 - 1]) == b"[9007199254740991]"


def test_a_records_bytes_leave_out_its_signature_and_null_members() -> None:
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    cmd = Command(id="c1", incident="i1", type="cordon_node", target=Target(node="n03"), issued_at=t,
                  params={"reason": "gpu_off_bus", "gone": None, "list": [None, 1.0]})
    signed = cmd.model_copy(update={"signature": "hmac-sha256:k1:" + "0" * 64})
    assert record_bytes(cmd) == record_bytes(signed)
    assert record_bytes(cmd) == (
        b'{"id":"c1","incident":"i1","issued_at":"2026-11-29T12:00:00Z","params":{"list":[null,1],'
        b'"reason":"gpu_off_bus"},"reason":"","requires_approval":false,"schema_version":1,'
        b'"target":{"node":"n03"},"type":"cordon_node"}')
    assert content_hash(cmd).startswith("sha256:") and content_hash(cmd) == content_hash(signed)
    assert content_hash(cmd) != content_hash(cmd.model_copy(update={"target": Target(node="n04")}))


def test_a_record_holding_a_float_where_its_schema_means_an_integer_has_no_canonical_form() -> None:
    """Issue 27, item 6: RFC 8785 writes ``8`` and ``8.0`` alike, so the canonical form cannot tell them apart
    by itself; a record is canonicalised (signed, verified, hashed) only as its schema reads it, and one that
    holds ``8.0`` where the schema means a whole number -- built without validation, or changed after it --
    has no canonical form at all."""
    from streams.events import Event, TrainStep

    assert canonical_json({"n": 8}) == canonical_json({"n": 8.0})  # why the record's schema must decide
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    cmd = Command(id="c1", incident="i1", type="restart_job", target=Target(job="llm"), issued_at=t,
                  params={"gpus": 8, "gpu_class": "h100", "score": 1.0})
    assert b'"gpus":8,' in record_bytes(cmd) and b'"score":1}' in record_bytes(cmd)  # a float param stays a number
    forged = cmd.model_copy(deep=True)
    forged.params["gpus"] = 8.0
    for canonicalise in (record_bytes, content_hash):
        with pytest.raises(ValueError, match=r"params\.gpus must be an integer"):
            canonicalise(forged)
    event = Event(id="e1", ts=t, source="trainer", node="n1", rank=8, body=TrainStep(step=8))
    record_bytes(event)
    for changed in (event.model_copy(update={"rank": 8.0}),
                    event.model_copy(update={"body": TrainStep.model_construct(step=8.0)})):
        with pytest.raises(ValueError, match="integer"):
            record_bytes(changed)
