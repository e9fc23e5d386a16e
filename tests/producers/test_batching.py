"""How a producer packs its events into records: runs of consecutive events, bounded, order kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producers.batching import Batcher, Batching, Packed
from streams import events as ev
from streams.batch import decode_record

T = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _event(i: int, ms: int = 0, source: str = "nvml") -> ev.Event:
    return ev.Event(id=f"e{i}", ts=T + timedelta(milliseconds=ms), source=source, node="n1",
                    body=ev.GpuSample(gpu=ev.GpuRef(index=i % 8), metrics=ev.GpuMetrics(power_w=float(i))))


def _pack(batching: Batching, events: list[ev.Event]) -> list[Packed]:
    b = Batcher(batching)
    return [p for e in events for p in b.add(e)] + b.flush()


def _unpacked(records: list[Packed]) -> list[ev.Event]:
    return [e for r in records for e in decode_record(r.value).events]


def test_a_batch_is_cut_at_max_events() -> None:
    events = [_event(i) for i in range(25)]
    records = _pack(Batching(max_events=10), events)
    assert [r.events for r in records] == [10, 10, 5]
    assert _unpacked(records) == events


def test_a_batch_is_cut_before_it_would_pass_max_bytes() -> None:
    events = [_event(i) for i in range(30)]
    size = len(events[0].model_dump_json())
    records = _pack(Batching(max_bytes=5 * (size + 1) + 40), events)
    assert all(len(r.value) <= 5 * (size + 1) + 40 for r in records)
    assert _unpacked(records) == events


def test_a_batch_spans_at_most_the_window_of_event_time() -> None:
    events = [_event(i, ms=i * 30) for i in range(10)]  # one every 30 ms
    records = _pack(Batching(window_s=0.1), events)
    assert [r.events for r in records] == [4, 4, 2]  # 0-90 ms, 120-210 ms, 240-270 ms
    assert _unpacked(records) == events


def test_per_source_batches_never_mix_sources() -> None:
    events = [_event(0), _event(1), _event(2, source="node_agent"), _event(3), _event(4)]
    records = _pack(Batching(per_source=True), events)
    assert [(r.source, r.events) for r in records] == [("nvml", 2), ("node_agent", 1), ("nvml", 2)]


def test_a_batch_of_one_is_the_event_itself() -> None:
    [record] = _pack(Batching(), [_event(7)])
    assert record.value == _event(7).model_dump_json().encode() and record.events == 1


def test_naive_and_aware_times_are_never_batched_together() -> None:
    naive = ev.Event(id="naive", ts=datetime(2026, 4, 22, 3, 0), source="nvml", node="n1", body=ev.AgentHeartbeat())
    records = _pack(Batching(window_s=1.0), [_event(0), naive])
    assert [r.events for r in records] == [1, 1]


def test_nonsense_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        Batching(max_events=0)


@settings(max_examples=80, deadline=None)
@given(gaps=st.lists(st.integers(0, 400), min_size=1, max_size=120), max_events=st.integers(1, 40),
       window_ms=st.one_of(st.none(), st.integers(0, 500)), flip=st.lists(st.booleans(), max_size=120))
def test_packing_never_reorders_loses_or_duplicates_an_event(gaps: list[int], max_events: int,
                                                             window_ms: int | None, flip: list[bool]) -> None:
    ms = 0
    events = []
    for i, gap in enumerate(gaps):
        ms += gap
        events.append(_event(i, ms, "nvml" if i >= len(flip) or not flip[i] else "node_agent"))
    batching = Batching(max_events=max_events, window_s=None if window_ms is None else window_ms / 1000,
                        per_source=bool(flip))
    records = _pack(batching, events)
    assert _unpacked(records) == events
    assert all(1 <= r.events <= max_events for r in records)
    for r in records:
        inside = decode_record(r.value).events
        if window_ms is not None:
            assert (inside[-1].ts - inside[0].ts).total_seconds() <= window_ms / 1000
        if batching.per_source:
            assert {e.source for e in inside} == {r.source}
