"""Replay's fast write of NVML lines (producers/capture/fast_nvml.py) against parse and the schema, the contract.

For any line, the fast path either declines it (parse then decides, refusals and their reasons included)
or gives exactly the record bytes and time of the one event parse makes of it. And it does take the
lines captures hold, or it would be no faster.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from producers.batching import EncodedEvent
from producers.capture import BadInput, parse_capture_line
from producers.capture.fast_nvml import FLOAT_METRICS, INT_METRICS, encode_nvml, parse_for_publishing
from producers.capture.screen import CaptureScreen
from streams import events as ev
from tests.harness.json_mutations import mutated

T = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)

# Values that are sometimes right for a field and sometimes not: parse and the fast path must agree on which.
_ODD = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                 st.integers(2**53 - 3, 2**53 + 3), st.integers(-2**53 - 3, -2**53 + 3), st.integers(2**31 - 2, 2**31),
                 st.text(max_size=6), st.sampled_from(["57.5", "8", "", "ALL", "gpu-[1-9]", "n 1", "GPU-1", "nvml"]),
                 st.lists(st.integers(0, 3), max_size=2), st.lists(st.text(max_size=3), max_size=2), st.builds(dict),
                 st.builds(lambda: {"x": 2**60}), st.builds(lambda: [2**60]))
_TS = st.one_of(
    st.datetimes(min_value=datetime(1960, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)).map(
        lambda t: t.isoformat().replace("+00:00", "Z")),
    st.datetimes(timezones=st.just(UTC)).map(lambda t: t.isoformat()),
    st.sampled_from(["2026-04-31T00:00:00Z", "2026-04-22T03:00:00.1234567Z", "2026-04-22 03:00:00Z",
                     "2026-04-22T03:00:00+02:00", "2026-04-22T03:00:60Z", "2026-04-22T03:00:00", "2026-04-22t03:00:00z",
                     "2026-04-22T03:00:00.5-05:30", 1776826800, "x"]))


def _metrics(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in FLOAT_METRICS:
        if draw(st.booleans()):
            out[name] = draw(st.one_of(st.none(), st.floats(-1e6, 1e6), st.integers(-1000, 1000),
                                       st.floats(allow_nan=False, allow_infinity=False)))
    for name in INT_METRICS:
        if draw(st.booleans()):
            flag = st.booleans() if name.startswith("remapped_rows_") else st.none()  # NVML's flags, as booleans
            out[name] = draw(st.one_of(st.none(), st.integers(0, 2**40), flag))
    if draw(st.booleans()):
        reason = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=5)  # as NVML names them
        out["clocks_event_reasons"] = draw(st.one_of(st.none(), st.lists(reason, max_size=3)))
    return draw(st.permutations(list(out.items())).map(dict))


@st.composite
def plain_lines(draw: st.DrawFn) -> dict[str, Any]:
    """An NVML line as captures hold it."""
    gpu = {"index": draw(st.one_of(st.none(), st.integers(0, 7))),
           "uuid": draw(st.one_of(st.none(), st.sampled_from(["GPU-2cb9c0ce-585d", "MIG-GPU-1/1/0"]))),
           "pci_bus_id": draw(st.one_of(st.none(), st.sampled_from(["00000000:18:00.0", "PCI:0000:c1:00", ""])))}
    if gpu["index"] is None and gpu["uuid"] is None and not gpu["pci_bus_id"]:
        gpu["index"] = 0  # the line names its GPU somehow
    ts = T + timedelta(microseconds=draw(st.integers(0, 10**12)))
    line: dict[str, Any] = {"ts": draw(st.sampled_from([ts.isoformat(), ts.isoformat().replace("+00:00", "Z")])),
                            "source": "nvml", "node": draw(st.sampled_from(["n1", "gpu-node-01"])), "gpu": gpu,
                            "metrics": _metrics(draw)}
    for key, value in (("job", st.sampled_from(["job-7", "llama/70b"])), ("rank", st.integers(0, 63)),
                       ("local_rank", st.integers(0, 7))):
        if draw(st.booleans()):
            line[key] = draw(st.one_of(st.none(), value))
    return line


@st.composite
def odd_lines(draw: st.DrawFn) -> Any:
    """A plain line with a few values changed (to odd, often invalid ones), keys dropped or added."""
    return mutated(draw, draw(plain_lines()), _ODD, _TS, _ODD,
                   ["extra", "power_w", "retired_pages_dbe", "index", "uuid"])


def _agree(raw: bytes) -> bool:
    """The fast path declines ``raw`` or gives parse's one event, written as the schema writes it; whether it took it."""
    fast = encode_nvml(raw)
    if fast is None:
        return False
    try:
        events = parse_capture_line(raw)
    except BadInput as exc:
        raise AssertionError(f"the fast path took a line parse refuses: {exc.reason}") from None
    [event] = events
    assert fast == EncodedEvent(ts=event.ts, source=event.source, value=event.model_dump_json().encode())
    return True


def _line(obj: Any) -> bytes:
    """As captures are written; text outside ASCII as UTF-8 (a lone surrogate: bytes that are not UTF-8)."""
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plain_lines())
def test_plain_lines_take_the_fast_path_and_give_parses_event(line: dict[str, Any]) -> None:
    assert _agree(_line(line))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(odd_lines())
@example({"ts": "2026-04-22T03:00:00Z", "source": "nvml", "node": "n1", "gpu": {"index": True}, "metrics": {}})
@example({"ts": "2026-04-22T03:00:00Z", "source": "nvml", "node": "n1", "gpu": {"index": 0},
          "metrics": {"power_w": 2**53}})
def test_any_line_is_declined_or_read_exactly_as_parse_reads_it(line: Any) -> None:
    _agree(_line(line))


_PLAIN = '{"ts":"2026-04-22T03:00:00Z","source":"nvml","node":"n1","gpu":{"index":1},"metrics":{"power_w":%s}}'


@pytest.mark.parametrize("raw", [
    _PLAIN.replace('"node":"n1"', '"node":"n1","node":"n2"'),  # a duplicate key: the last one, in both parses
    _PLAIN.replace('"node":"n1"', '"node":5,"node":"n1"'),
    _PLAIN.replace('"node":"n1"', '"node":"n1","node":5'),
    _PLAIN.replace('"source":"nvml"', '"source":"nvml","source":"kernel"'),
    _PLAIN.replace('"node":"n1"', '"node" : "\\u006e1" '),  # an escape, and whitespace
    _PLAIN.replace('"node":"n1"', '"node":"\\ud800"'),  # a lone surrogate
    _PLAIN.replace('"node":"n1"', '"node":"n1","x":[{"y":9007199254740992}]'),  # past 2**53 - 1, unused
    _PLAIN.replace('"node":"n1"', '"node":"n1","x":-9007199254740991'),
    _PLAIN.replace('"index":1', '"index":1,"x":123456789012345678901234567890'),
    _PLAIN.replace('"node":"n1"', '"node":"n1","rank":1E1'),
    _PLAIN.replace('"metrics":{', '"metrics":{"x":{"y":[1180591620717411303424]},'),
    "  " + _PLAIN + " \r\n", _PLAIN + "\r\n", "\ufeff" + _PLAIN, _PLAIN.replace("{", "[", 1), "",
    *(_PLAIN % number for number in ("1e400", "-1e400", "NaN", "Infinity", "-0", "-0.0", "1E2", "5e-324",
                                     "1.7976931348623157e308", "123456789012345678901234567890", "9007199254740991",
                                     "9007199254740993", "0.30000000000000004", "1.0000000000000002", "01", "1.",
                                     "true", '"5"', "[]")),
])
def test_the_parse_reads_the_json_values_the_standard_library_reads(raw: str) -> None:
    """The fast path's JSON parse (msgspec) and parse's (the standard library) differ in what they refuse:
    whatever the fast one takes must be the same value."""
    _agree(raw.encode())
    _agree(raw.encode("utf-8", "surrogatepass") + b"\xff")


def test_what_captures_hold_takes_the_fast_path() -> None:
    line = ('{"ts": "2026-04-22T03:00:00.266+00:00", "source": "nvml", "node": "gpu-node-11", "gpu": {"index": 3, '
            '"uuid": "GPU-7e5f7b12-75a0-82e9-6040-24f1a4f032c0", "pci_bus_id": "00000000:48:00.0"}, "metrics": '
            '{"temperature_c": 62.8, "power_w": 503, "power_limit_w": 700, "utilization_pct": 98, "ecc_sbe_volatile": '
            '0, "ecc_dbe_volatile": 0, "remapped_rows_pending": false, "clocks_event_reasons": []}}\n')
    assert _agree(line.encode())


def test_the_metric_fields_are_the_models() -> None:
    fields = ev.GpuMetrics.model_fields
    assert {*FLOAT_METRICS, *INT_METRICS, "clocks_event_reasons"} == set(fields)
    assert all(fields[n].annotation == float | None for n in FLOAT_METRICS)
    for name in INT_METRICS:
        ev.GpuMetrics.model_validate({name: 2**53 - 1}, strict=True)
        with pytest.raises(ValueError):
            ev.GpuMetrics.model_validate({name: 1.0}, strict=True)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(plain_lines(), odd_lines()), max_size=12))
def test_the_screen_gives_the_same_verdicts_with_either_parse(lines: list[Any]) -> None:
    raw = [_line(line) for line in lines]
    usual = list(CaptureScreen().screen(raw))
    fast = list(CaptureScreen(parse=parse_for_publishing).screen(raw))
    assert [type(v) for v in fast] == [type(v) for v in usual]
    for a, b in zip(usual, fast, strict=True):
        assert a.line == b.line
        if hasattr(a, "error"):
            assert (a.error.reason, a.error.kind, a.raw) == (b.error.reason, b.error.kind, b.raw)  # type: ignore[union-attr]
        else:
            written = [e.value if isinstance(e, EncodedEvent) else e.model_dump_json().encode()
                       for e in b.events]  # type: ignore[union-attr]
            assert written == [e.model_dump_json().encode() for e in a.events]  # type: ignore[union-attr]
