"""Backtests of archived histories: exact against independent replays, the same answer every time, windows
that start with what came before them, live decisions compared, and expired raw telemetry said."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from correlators.policy import load_policy
from faultline.backtest.diff import compare
from faultline.backtest.judge import in_window
from faultline.backtest.run import Backtest, backtest
from faultline.backtest.source import from_archive
from faultline.outcome import decide_offline
from faultline.simulate_history import History
from sinks.archive.history import decided
from sinks.archive.store import Archive

from .archived import (
    DAY,
    T0,
    archive_capture,
    archive_order,
    crash,
    events_of,
    heartbeats,
    inventory,
    job,
    lines,
)

EDIT = "xid:\n  94: software\n  79: gpu_firmware_fault\nlemons:\n  threshold: 1.9\nunknown_cause_auto_restarts: 0\n"


@pytest.fixture
def candidate(tmp_path: Path) -> str:
    path = tmp_path / "candidate.yaml"
    path.write_text(EDIT, encoding="utf-8")
    return str(path)


def _history() -> list[str]:
    return list(History(nodes=40, days=2, seed=5, lemons=2, faults_per_node_day=0.6).lines())


def _stable(bt: Backtest) -> dict[str, Any]:
    out = bt.to_json()
    out.pop("timing")
    out["retention"] and out["retention"].pop("raw_cutoff")  # moves with the wall clock
    return out


def test_an_archived_history_backtests_exactly_as_independent_replays(tmp_path: Path, candidate: str) -> None:
    """Every incident and command of both policies, and so the diff, equal those of `decide_offline` over the
    same events in the archive's order, under each policy."""
    capture = _history()
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive:
        archive_capture(archive, capture, decisions=False)
        bt = backtest(from_archive(archive, None, None, timedelta(days=1)), load_policy(candidate), load_policy())
    ordered = archive_order(capture)
    base, cand = decide_offline(ordered), decide_offline(ordered, candidate)
    assert bt.judged.events == len(events_of(capture))
    assert {"incidents": bt.candidate.incidents, "commands": bt.candidate.commands} == cand
    assert {"incidents": bt.baseline.incidents, "commands": bt.baseline.commands} == base
    assert bt.diff == compare(in_window(base, None, None), in_window(cand, None, None), bt.judged.xids,
                   timeline=bt.judged.timeline)
    d = bt.diff  # and the edit does change decisions of every kind it touches
    assert d["incidents"]["recategorised"] and d["commands"]["changed"]
    assert d["costs"]["candidate"]["approvals_asked"] > d["costs"]["baseline"]["approvals_asked"]
    assert len(base["incidents"]) > 20


def test_the_same_window_gives_the_same_answer(tmp_path: Path, candidate: str) -> None:
    capture = _history()
    url = f"chdb://{tmp_path / 'archive'}"
    with Archive.open(url) as archive:
        archive_capture(archive, capture, decisions=False, seed=1)
        since, until = T0 + timedelta(hours=20), T0 + timedelta(hours=40)
        first = backtest(from_archive(archive, since, until, timedelta(hours=6)), load_policy(candidate), load_policy())
        again = backtest(from_archive(archive, since, until, timedelta(hours=6)), load_policy(candidate), load_policy())
    with Archive.open(f"chdb://{tmp_path / 'other'}") as other:  # archived in another order, other batches
        archive_capture(other, capture, decisions=False, seed=2)
        elsewhere = backtest(from_archive(other, since, until, timedelta(hours=6)), load_policy(candidate),
                             load_policy())
    assert _stable(first) == _stable(again) == _stable(elsewhere)
    assert first.judged.events > 0 and first.source.context > 0


def test_a_window_starts_with_the_jobs_and_hardware_of_before_it(tmp_path: Path) -> None:
    """A job started a day before the window fails in it: the window knows the job, the GPU its rank ran
    on and the checkpoint to restart from (context), without replaying the day before."""
    obs = [inventory("n1"), inventory("n2"), *job("long", "n1", 600, DAY + 3600), *crash("long", "n1", DAY + 3600, 3)]
    capture = lines(obs)
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive:
        archive_capture(archive, capture, decisions=False)
        window = backtest(from_archive(archive, T0 + timedelta(seconds=DAY), None, timedelta(0)), load_policy(),
                          load_policy())
        full = backtest(from_archive(archive, None, None, timedelta(0)), load_policy(), load_policy())
    assert window.source.context == 4  # two inventories, the job's start and its newest checkpoint before
    assert window.judged.events < full.judged.events / 5
    inc = window.candidate.incidents
    assert [(i["job"], i["category"], i["culprit"]["gpus"]) for i in inc] == [("long", "software_crash", ["GPU-n1-3"])]
    restart = next(c for c in window.candidate.commands if c["type"] == "restart_job")
    assert restart == next(c for c in full.candidate.commands if c["type"] == "restart_job")


def test_decisions_of_the_warmup_are_judged_but_not_compared(tmp_path: Path) -> None:
    obs = [inventory("n1"), *job("a", "n1", 600, 7200), *crash("a", "n1", 7200, 1),
           *job("b", "n1", 3 * 3600, 6 * 3600), *crash("b", "n1", 6 * 3600, 2)]
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive:
        archive_capture(archive, lines(obs), decisions=False)
        bt = backtest(from_archive(archive, T0 + timedelta(hours=3), None, timedelta(hours=3)), load_policy(),
                      load_policy())
    assert bt.source.read_from == T0
    assert [i["job"] for i in bt.candidate.incidents] == ["b"]
    assert [i["job"] for i in bt.candidate.earlier.values()] == ["a"]


def test_against_live_the_archived_decisions_are_the_baseline(tmp_path: Path, candidate: str) -> None:
    capture = archive_order(_history())
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive:
        archive_capture(archive, capture)

        def live() -> Any:
            span = (T0 - timedelta(days=1), T0 + timedelta(days=3))
            return decided(archive, *span)

        same = backtest(from_archive(archive, None, None, timedelta(0)), load_policy(), None, live)
        edited = backtest(from_archive(archive, None, None, timedelta(0)), load_policy(candidate), None, live)
        current = backtest(from_archive(archive, None, None, timedelta(0)), load_policy(candidate), load_policy())
    assert same.against == "live" and not same.differs  # live decided what the current policy decides here
    assert edited.diff == current.diff


def test_a_window_past_the_raw_telemetry_retention_says_so_and_marks_what_it_could_not_judge(tmp_path: Path) -> None:
    """n1 goes silent with its BMC saying the power is on: live, a node_down. Archived 40 days ago, its
    heartbeats have expired: the backtest cannot see the silence, says so, and marks the difference."""
    obs = [inventory("n1"), inventory("n2"), *heartbeats("n1", 1, 3600), *heartbeats("n2", 1, 7200),
           *job("pt", "n1", 60, 3600), (3700.0, {"source": "bmc", "node": "n1", "power": "on"})]
    capture = archive_order(lines(obs))
    old = datetime.now(UTC) - timedelta(days=40)
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive:
        live_out = archive_capture(archive, capture, ingested_at=old)
        src = from_archive(archive, None, None, timedelta(0))
        bt = backtest(src, load_policy(), None, lambda: decided(archive, T0, T0 + timedelta(days=1)))
    assert [i["category"] for i in live_out["incidents"]] == ["node_down"]
    r = bt.to_json()["retention"]
    assert r["reaches_past"] and "reaches past it" in r["note"] and r["raw_ttl_days"] == 30
    assert r["without_raw_from"] == T0 and bt.judged.events == len(events_of(capture)) - len(heartbeats("n1", 1, 3600)) \
        - len(heartbeats("n2", 1, 7200))  # the heartbeats are not read, merged away or not
    removed = bt.diff["incidents"]["removed"]
    assert [(i["category"], i["raw_telemetry_expired"]) for i in removed] == [("node_down", True)]


def test_the_end_of_the_history_judges_what_its_evidence_already_says(tmp_path: Path) -> None:
    """The history stops three seconds after a crash: the failure is still settled and restarted, as a
    replay's end settles it (and `decide_offline` agrees)."""
    capture = archive_order(lines([inventory("n1"), *job("a", "n1", 600, 7200), *crash("a", "n1", 7200, 1)]))
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive:
        archive_capture(archive, capture, decisions=False)
        bt = backtest(from_archive(archive, None, None, timedelta(0)), load_policy(), load_policy())
    assert [c["type"] for c in bt.candidate.commands] == ["notify", "restart_job"]
    assert {"incidents": bt.candidate.incidents, "commands": bt.candidate.commands} == decide_offline(capture)
