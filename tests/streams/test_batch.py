"""The batch envelope of the events topic: what every reader decodes from a record, good and bad."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from streams import events as ev
from streams.batch import EventBatch, decode_record, encode_batch
from streams.export import topic_schema

T = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _event(i: int, node: str = "n1") -> ev.Event:
    body: ev.Body = (ev.GpuSample(gpu=ev.GpuRef(index=i % 8), metrics=ev.GpuMetrics(temperature_c=50 + i % 7))
                     if i % 3 else ev.AgentHeartbeat())
    return ev.Event(id=f"e{i}", ts=T + timedelta(milliseconds=i), source="nvml", node=node, body=body)


def _raw(e: ev.Event) -> bytes:
    return e.model_dump_json().encode()


BAD = b'{"id":"bad","ts":"yesterday-ish","source":"nvml","body":{"kind":"agent_heartbeat"}}'


def test_a_batch_decodes_to_its_events_in_order() -> None:
    events = [_event(i) for i in range(50)]
    decoded = decode_record(encode_batch([_raw(e) for e in events]))
    assert decoded.events == events and decoded.bad == [] and decoded.batch


def test_a_single_event_record_is_read_as_before() -> None:
    e = _event(1)
    decoded = decode_record(_raw(e))
    assert decoded.events == [e] and decoded.bad == [] and not decoded.batch


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'"text"', BAD, b"{}"])
def test_a_bad_single_record_says_what_the_event_model_says(raw: bytes) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as exc:
        ev.Event.model_validate_json(raw)
    [bad] = decode_record(raw).bad
    assert bad.raw == raw and bad.reason == f"undecodable event: {exc.value.errors()[0]['msg']}"
    assert decode_record(raw).events == []


def test_a_bad_event_inside_a_batch_is_set_aside_alone() -> None:
    events = [_event(i) for i in range(5)]
    raw = encode_batch([_raw(events[0]), _raw(events[1]), BAD, _raw(events[2]), _raw(events[3]), _raw(events[4])])
    decoded = decode_record(raw)
    assert decoded.events == events, "the good ones, in order"
    [bad] = decoded.bad
    assert json.loads(bad.raw) == json.loads(BAD), "the bad event's own bytes, not the whole batch"
    assert bad.reason.startswith("undecodable event 3 of a batch of 6: ")


@pytest.mark.parametrize("raw,where", [
    (b'{"schema_version":1,"events":[]}', "events"),
    (b'{"schema_version":1,"events":{"id":"x"}}', "events"),
    (b'{"schema_version":"one","events":[' + _raw(_event(1)) + b"]}", "schema_version"),
])
def test_a_broken_envelope_is_one_bad_record(raw: bytes, where: str) -> None:
    decoded = decode_record(raw)
    [bad] = decoded.bad
    assert decoded.events == [] and decoded.batch and bad.raw == raw
    assert bad.reason.startswith(f"undecodable event batch: {where}: ")


def test_a_record_without_a_value_is_bad() -> None:
    assert decode_record(None).bad[0].reason == "undecodable event: the record has no value"


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), bad=st.sets(st.integers(0, 39)))
def test_any_batch_keeps_every_good_event_in_order_and_every_bad_one_alone(n: int, bad: set[int]) -> None:
    events = [_event(i) for i in range(n)]
    raws = [BAD if i in bad else _raw(e) for i, e in enumerate(events)]
    decoded = decode_record(encode_batch(raws))
    assert decoded.events == [e for i, e in enumerate(events) if i not in bad]
    assert len(decoded.bad) == len([i for i in range(n) if i in bad])


def test_nan_survives_a_batch() -> None:
    e = ev.Event(id="nan", ts=T, source="trainer", body=ev.TrainStep(step=1, loss=float("nan")))
    [again] = decode_record(encode_batch([_raw(e), _raw(_event(2))])).events[:1]
    assert again.body.loss != again.body.loss  # type: ignore[union-attr]  # NaN


def test_the_events_topic_schema_takes_both_shapes_and_nothing_else() -> None:
    schema = topic_schema("events")
    check = Draft202012Validator(schema)
    one = json.loads(_raw(_event(1)))
    batch = json.loads(EventBatch(events=[_event(1), _event(2)]).model_dump_json())
    check.validate(one)
    check.validate(batch)
    assert json.loads(encode_batch([_raw(_event(1)), _raw(_event(2))])) == batch, "what producers write"
    assert not check.is_valid({"schema_version": 1, "events": []}), "a batch holds at least one event"
    assert not check.is_valid({"schema_version": 1}), "neither an event nor a batch"
    assert schema["x-faultline-topic"]["batch"] == "EventBatch"


def test_encode_refuses_an_empty_batch() -> None:
    with pytest.raises(ValueError):
        encode_batch([])
