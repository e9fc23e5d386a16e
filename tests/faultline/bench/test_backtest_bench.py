"""The backtest benchmark: a small fleet by default (it must say exact), the full week behind `-m slow`.

The full measurement, with its figures (README.md, "Backtesting a policy"):
``.venv/bin/pytest -m slow tests/faultline/bench/test_backtest_bench.py -s`` or
``python -m faultline.bench.backtest --exact``.
"""

from __future__ import annotations

import pytest

from faultline.bench.backtest import measure


def test_a_small_fleet_backtests_exactly() -> None:
    result = measure(nodes=30, days=1, exact=True)
    assert result["exact"] is True
    assert result["events_judged"] == result["events"] and result["recategorised"] >= 0


@pytest.mark.slow
def test_a_week_of_a_500_node_fleet_backtests_exactly() -> None:
    """A few hundred thousand events; the time is printed, not asserted (timing belongs to benchmarks)."""
    result = measure(nodes=500, days=7, exact=True)
    print(result)
    assert result["exact"] is True and result["events"] > 300_000
    assert result["incidents"]["baseline"] > 100 and result["recategorised"] > 0


def test_a_small_fleet_backtests_exactly_on_two_workers() -> None:
    """Each policy in its own process: still exact against independent replays."""
    result = measure(nodes=30, days=1, exact=True, workers=2)
    assert result["exact"] is True and result["workers"] == 2
