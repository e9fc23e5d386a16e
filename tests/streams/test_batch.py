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
from streams.bounds import MAX_EVENT_BYTES, MAX_RECORD_BYTES
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


# --- issue 27, item 6: the cap readers can show --------------------------------------------------------------


def _huge(i: int, size: int) -> ev.Event:
    """An event of about ``size`` bytes: a kernel line's message that compresses to almost nothing."""
    return ev.Event(id=f"huge{i}", ts=T, source="kernel", node="n1",
                    body=ev.Xid(code=79, gpu=ev.GpuRef(index=0), message="\x1b[2J" + "A" * size))


def test_a_record_over_the_cap_is_one_bad_record_never_an_event() -> None:
    """A compressible 10 MB record passes the broker's limit (which counts compressed bytes) and was read and
    archived whole (`faultline incident` printed 90 MB); no reader takes an event over the cap of what is
    of events (:data:`streams.bounds.MAX_EVENT_BYTES`) any more."""
    raw = _raw(_huge(1, 10 * 1024 * 1024))
    decoded = decode_record(raw)
    assert decoded.events == [] and not decoded.batch
    [bad] = decoded.bad
    assert bad.raw == raw and bad.reason == (
        f"over the cap: a record of {len(raw):,} bytes, more than the {MAX_EVENT_BYTES:,} a reader takes")
    at_cap = _huge(2, 0)
    at_cap = _huge(2, MAX_EVENT_BYTES - len(_raw(at_cap)))
    assert len(_raw(at_cap)) == MAX_EVENT_BYTES and decode_record(_raw(at_cap)).events == [at_cap]


def test_an_event_over_the_cap_in_a_batch_is_set_aside_alone() -> None:
    """A batch may be larger than the cap (an agent packs up to 256 KiB of events); each of its events may not."""
    small = [_event(i) for i in range(20_000)]
    assert len(encode_batch([_raw(e) for e in small])) > MAX_EVENT_BYTES
    assert decode_record(encode_batch([_raw(e) for e in small])).events == small  # a large batch of small events
    huge = _huge(3, MAX_EVENT_BYTES)
    for raws, good in (([_raw(small[0]), _raw(huge), _raw(small[1])], small[:2]),
                       ([_raw(small[0]), _raw(huge), BAD], small[:1])):  # with an undecodable one as well
        decoded = decode_record(encode_batch(raws))
        assert decoded.events == good and decoded.batch
        over = [b for b in decoded.bad if b.reason.startswith("over the cap")]
        assert len(over) == 1 and json.loads(over[0].raw)["id"] == "huge3"
        assert over[0].reason.startswith(f"over the cap: event 2 of a batch of 3 takes {len(_raw(huge)):,} bytes")


def test_the_scheduler_view_of_a_whole_cell_job_is_an_event_readers_take() -> None:
    """A 2,048-node job's ``job_started`` lists 16,384 ranks: about 190 KB. Under a 64 KiB reader cap it was
    dead-lettered, so the storm's XID 79 opened an incident with no job and nothing was restarted
    (``tests/faultline/test_storm_replay.py``). What is refused is what no allocation needs, not a big job."""
    alloc = [ev.RankAllocation(node=f"n{n:04d}", gpus=list(range(8)), ranks=list(range(8 * n, 8 * n + 8)))
             for n in range(2048)]
    job = ev.Event(id="start", ts=T, source="scheduler", job="llama3-405b",
                   body=ev.JobStarted(allocation=alloc, world_size=16_384))
    raw = _raw(job)
    assert MAX_RECORD_BYTES < len(raw) <= MAX_EVENT_BYTES
    for record in (raw, encode_batch([raw, _raw(_event(1))])):
        assert decode_record(record).events[0] == job and decode_record(record).bad == []
