"""The sink's fast read of events records (sinks/archive/fast_events.py) against the schema, the one contract.

For any record, the fast path either refuses it (the schema then decides, dead letters included) or
yields exactly the rows :func:`sinks.archive.store.event_row` makes of the events the schema decodes,
for a record the schema takes whole with no bad event. And it does take the plain records the
producers write, or it would be no faster.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sinks.archive.fast_events import FLOAT_METRICS, INT_METRICS, fast_event_rows
from sinks.archive.store import event_row
from streams import events as ev
from streams.batch import decode_record, encode_batch
from tests.harness.json_mutations import mutated

T = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)

# Values that are sometimes right for a field and sometimes not: the schema and the fast path must agree on which.
_ODD = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=6), st.sampled_from(["57.5", "8", "", "ALL", "gpu-[1-9]", "n 1"]),
                 st.lists(st.integers(0, 3), max_size=2), st.just({}))
_TS = st.one_of(
    st.datetimes(min_value=datetime(1960, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)).map(
        lambda t: t.isoformat().replace("+00:00", "Z")),
    st.datetimes(timezones=st.just(UTC)).map(lambda t: t.isoformat()),
    st.sampled_from(["2026-04-31T00:00:00Z", "2026-04-22T03:00:00.1234567Z", "2026-04-22 03:00:00Z",
                     "2026-04-22T03:00:00+02:00", "2026-04-22T03:00:60Z", "2026-04-22T03:00:00", 1776826800, "x"]))


def _plain_metrics(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in FLOAT_METRICS:
        out[name] = draw(st.one_of(st.none(), st.floats(-1e6, 1e6), st.integers(-1000, 1000)))
    for name in INT_METRICS:
        out[name] = draw(st.one_of(st.none(), st.integers(0, 2**40)))
    out["clocks_event_reasons"] = draw(st.one_of(st.none(), st.lists(st.text(max_size=5), max_size=3)))
    return draw(st.permutations(list(out.items())).map(dict)) if draw(st.booleans()) else out


@st.composite
def plain_events(draw: st.DrawFn) -> dict[str, Any]:
    """An event as producers write it: a GPU sample or an agent heartbeat, every value in its plain form."""
    i = draw(st.integers(0, 10_000))
    body: dict[str, Any]
    if draw(st.booleans()):
        gpu = {"index": draw(st.one_of(st.none(), st.integers(0, 7))),
               "uuid": draw(st.one_of(st.none(), st.sampled_from(["GPU-abc", "MIG-GPU-1/1/0"]))),
               "pci": draw(st.one_of(st.none(), st.sampled_from(["18:00", ""])))}
        body = {"kind": "gpu_sample", "gpu": gpu, "metrics": _plain_metrics(draw)}
    else:
        body = {"kind": "agent_heartbeat"}
    ts = T + timedelta(microseconds=draw(st.integers(0, 10**12)))
    event = {"schema_version": 1, "id": f"e{i}", "ts": ts.isoformat().replace("+00:00", "Z"), "source": "nvml",
             "node": draw(st.one_of(st.none(), st.sampled_from(["n1", "gpu-node-01"]))),
             "job": draw(st.one_of(st.none(), st.just("job-7"))), "rank": draw(st.one_of(st.none(), st.integers(0, 63))),
             "local_rank": None, "body": body}
    return event


@st.composite
def odd_events(draw: st.DrawFn) -> Any:
    """A plain event with a few values changed (to odd, often invalid ones), keys dropped or added, or a
    different event altogether."""
    return mutated(draw, draw(plain_events()), _ODD, _TS, st.one_of(_ODD, st.just(
        {"id": "t", "ts": "2026-04-22T03:00:00Z", "source": "trainer", "body": {"kind": "train_step", "step": 3}})))


def _record(events: list[Any], version: Any = 1) -> bytes:
    return json.dumps({"schema_version": version, "events": events}, separators=(",", ":")).encode()


def _agree(raw: bytes) -> bool:
    """The fast path refuses ``raw`` or yields the schema's rows; whether it took it."""
    fast = fast_event_rows(raw)
    if fast is None:
        return False
    schema = decode_record(raw)
    assert schema.batch and schema.bad == [], "the fast path took a record the schema does not take whole"
    assert fast == [event_row(e) for e in schema.events]
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(plain_events(), min_size=1, max_size=8))
def test_plain_records_take_the_fast_path_and_yield_the_schemas_rows(events: list[dict[str, Any]]) -> None:
    assert _agree(_record(events))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(plain_events(), odd_events()), min_size=0, max_size=5), st.one_of(st.just(1), _ODD))
@example([{"schema_version": 1, "id": "e", "ts": "2026-04-22T03:00:00Z", "source": "s", "rank": True,
           "body": {"kind": "agent_heartbeat"}}], 1)
@example([{"schema_version": 1, "id": "e", "ts": "2026-04-22T03:00:\u0663\u0660Z", "source": "s",  # Arabic-Indic 30
           "body": {"kind": "agent_heartbeat"}}], 1)
def test_any_record_is_refused_or_read_exactly_as_the_schema_reads_it(events: list[Any], version: Any) -> None:
    _agree(_record(events, version))


_BEAT = '{"id":"h","ts":"2026-04-22T03:00:00Z","source":"node_agent","node":"n1","body":{"kind":"agent_heartbeat"}}'
_SAMPLE = ('{"id":"s","ts":"2026-04-22T03:00:00Z","source":"nvml","body":{"kind":"gpu_sample","gpu":{"index":1},'
           '"metrics":{"temperature_c":%s}}}')


@pytest.mark.parametrize("events", [
    _BEAT.replace('"node":"n1"', '"node":"n1","node":"n2"'),  # a duplicate key: the last one, in both parses
    _BEAT.replace('"node":"n1"', '"node":5,"node":"n1"'),
    _BEAT.replace('"node":"n1"', '"node":"n1","node":5'),
    _BEAT.replace('"node":"n1"', '"node" : "\\u006e1" '),  # an escape, and whitespace
    _BEAT.replace('"node":"n1"', '"node":"\\ud800"'),  # a lone surrogate: not JSON either parse reads
    _BEAT.replace('"node":"n1"', '"rank":1180591620717411303424'),  # past any integer column
    _BEAT.replace('"node":"n1"', '"rank":1E1'),
    *(_SAMPLE % number for number in ("1e400", "-1e400", "NaN", "Infinity", "-0", "1E2", "5e-324", "1.7976931348623157e308",
                                      "123456789012345678901234567890", "0.30000000000000004")),
])
def test_the_parse_reads_the_json_values_the_schemas_parse_reads(events: str) -> None:
    """The fast path's JSON parse (msgspec) and the schema's (pydantic-core) differ in what they refuse: whatever
    the fast one takes must be the same value the schema's takes."""
    _agree(b'{"schema_version":1,"events":[' + f"{events},{_BEAT}".encode() + b"]}")


def test_what_producers_write_takes_the_fast_path() -> None:
    sample = ev.Event(id="s", ts=T, source="nvml", node="n1",
                      body=ev.GpuSample(gpu=ev.GpuRef(index=1, uuid="GPU-1", pci="18:00"),
                                        metrics=ev.GpuMetrics(temperature_c=61, power_w=512.5, ecc_sbe_volatile=0,
                                                              clocks_event_reasons=["idle"])))
    beat = ev.Event(id="h", ts=T, source="node_agent", node="n1", body=ev.AgentHeartbeat())
    assert _agree(encode_batch([sample.model_dump_json().encode(), beat.model_dump_json().encode()]))
    assert fast_event_rows(sample.model_dump_json().encode()) is None  # one event, not a batch: the schema reads it


def test_the_metric_fields_are_the_models() -> None:
    fields = ev.GpuMetrics.model_fields
    assert {*FLOAT_METRICS, *INT_METRICS, "clocks_event_reasons"} == set(fields)
    assert all(fields[n].annotation == float | None for n in FLOAT_METRICS)
    assert tuple(fields)[:len(FLOAT_METRICS)] == FLOAT_METRICS  # the floats come first: _as_written counts on it


def test_rows_the_archive_refuses_for_good_are_set_aside_as_the_schemas_events() -> None:
    from sinks.archive.event_rows import EventRows
    from sinks.archive_batch import write_events_isolating

    events = [ev.Event(id=f"e{i}", ts=T, source="node_agent", node="n1", body=ev.AgentHeartbeat()) for i in range(5)]
    raw = encode_batch([e.model_dump_json().encode() for e in events])
    rows = fast_event_rows(raw)
    assert rows is not None
    written: list[str] = []

    def write(records: Any) -> int:
        ids = [r for rec in records for r in ([row[0] for row in rec.rows] if isinstance(rec, EventRows) else [rec.id])]
        if "e3" in ids:
            raise ValueError("Int32 out of range")  # permanent: the same rows fail again
        written.extend(ids)
        return len(ids)

    n, letters = write_events_isolating(write, [EventRows(raw, rows)], "archive-sink:ns.events")
    assert n == 4 and sorted(written) == ["e0", "e1", "e2", "e4"]
    [letter] = letters
    assert letter.raw == events[3].model_dump_json() and letter.at == T and "Int32 out of range" in letter.reason
