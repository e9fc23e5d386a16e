"""A timestamp far from the lines around it is an outlier; clock skew, disorder, gaps and sparse captures are not."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producers.capture.clock import HALF_WINDOW, ClockWindow
from producers.capture.screen import CaptureScreen, Refused
from tests.harness.shared import needs_shared, scenario_files

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
SCENARIOS = scenario_files()


def outliers(times: list[datetime], **kw: float | int | timedelta) -> list[int]:
    """Indexes judged outliers; also checks every item gets exactly one verdict, in order."""
    window: ClockWindow[int] = ClockWindow(**kw)  # type: ignore[arg-type]
    verdicts = [v for i, ts in enumerate(times) for v in window.push(i, ts)] + window.finish()
    assert [i for i, _ in verdicts] == list(range(len(times)))
    return [i for i, reason in verdicts if reason is not None]


def dense(n: int, every_s: float = 1.0, start: datetime = T0) -> list[datetime]:
    return [start + timedelta(seconds=i * every_s) for i in range(n)]


def test_verdicts_come_half_a_window_late_then_all_at_the_end() -> None:
    window: ClockWindow[int] = ClockWindow()
    assert [window.push(i, ts) for i, ts in enumerate(dense(HALF_WINDOW))] == [[]] * HALF_WINDOW
    assert window.push(HALF_WINDOW, T0) == [(0, None)]
    assert [i for i, _ in window.finish()] == list(range(1, HALF_WINDOW + 1))
    assert window.finish() == []


@pytest.mark.parametrize("away", [timedelta(days=365 * 73), timedelta(days=3), timedelta(hours=2),
                                  -timedelta(days=2), -timedelta(days=365 * 26)])
@pytest.mark.parametrize("at", [0, 1, 50, 98, 99])
def test_one_line_far_from_its_neighbours_is_an_outlier(away: timedelta, at: int) -> None:
    times = dense(100)
    times[at] = times[at] + away
    assert outliers(times) == [at]


def test_the_reason_says_how_far_which_way_and_what_to_do() -> None:
    window: ClockWindow[str] = ClockWindow()
    for ts in dense(10):
        window.push("good", ts)
    window.push("bad", T0 + timedelta(days=3))
    reasons = {item: reason for item, reason in window.finish()}
    assert reasons["bad"] is not None and reasons["good"] is None
    assert "2026-04-25T03:00:00Z is 3.0 days ahead of the capture's clock (2026-04-22T03:00:0" in reasons["bad"]
    assert "time sync" in reasons["bad"]


def test_a_bmc_whose_clock_reset_sends_a_run_of_lines_all_outliers() -> None:
    times = dense(200)
    for i in range(60, 60 + HALF_WINDOW):
        times[i] = datetime(2000, 1, 1, tzinfo=UTC) + timedelta(seconds=i)
    assert outliers(times) == list(range(60, 60 + HALF_WINDOW))


def test_a_broken_source_interleaved_with_good_ones_is_caught() -> None:
    times = dense(300)
    bad = list(range(0, 300, 3))  # a third of the lines
    for i in bad:
        times[i] = T0 + timedelta(days=30, seconds=i)
    assert outliers(times) == bad


def test_clock_skew_and_disorder_are_not_outliers() -> None:
    times = dense(400, every_s=0.5)
    for i in range(0, 400, 4):
        times[i] += timedelta(seconds=30 if i % 8 else -30)  # one source 30 s ahead, another behind
    times[200] -= timedelta(minutes=50)  # a line recorded late
    assert outliers(times) == []


@pytest.mark.parametrize("gap", [timedelta(hours=2), timedelta(days=3), timedelta(days=365)])
def test_a_real_gap_in_the_recording_is_not_an_outlier(gap: timedelta) -> None:
    times = dense(100) + dense(100, start=T0 + gap)
    assert outliers(times) == []


@pytest.mark.parametrize("every", [timedelta(hours=2), timedelta(days=1)])
def test_a_sparse_capture_is_judged_on_its_own_scale(every: timedelta) -> None:
    assert outliers(dense(10, every_s=every.total_seconds())) == []
    assert outliers(dense(200, every_s=every.total_seconds())) == []


def test_short_captures() -> None:
    assert outliers([T0]) == []
    assert outliers([T0, T0 + timedelta(days=9)]) == [1]  # two that disagree: the earlier time wins
    assert outliers([T0 + timedelta(days=9), T0, T0 + timedelta(seconds=5)]) == [0]


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.floats(min_value=0, max_value=120), min_size=3, max_size=150),
    at=st.integers(min_value=0),
    away_h=st.floats(min_value=48, max_value=24 * 365 * 70) | st.floats(min_value=-24 * 365 * 20, max_value=-48),
)
def test_one_outlier_anywhere_in_any_dense_capture_is_the_only_one_caught(steps: list[float], at: int,
                                                                          away_h: float) -> None:
    times, t = [], T0
    for s in steps:
        t += timedelta(seconds=s)
        times.append(t)
    at %= len(times)
    times[at] += timedelta(hours=away_h)
    assert outliers(times) == [at]


@needs_shared(*SCENARIOS)
def test_no_line_of_any_public_capture_or_scenario_of_our_own_is_an_outlier() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "correlators"))
    from scenario_book import SCENARIOS as BOOK

    captures = {p.name: p.read_bytes().splitlines() for p in SCENARIOS}
    captures |= {name: [line.encode() for line in fn()[0].lines()] for name, fn in BOOK.items()}
    assert len(captures) > 60
    for name, lines in captures.items():
        refused = [v for v in CaptureScreen().screen(lines) if isinstance(v, Refused)]
        assert not [v for v in refused if v.error.kind == "clock_outlier"], name
