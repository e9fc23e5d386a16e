"""The backtest on a process pool: the same output as the one-process pass, byte for byte, from a capture
and from an archive window; how many workers it takes; and what it counts on the way."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from correlators.policy import load_policy
from faultline.backtest.parallel import cpus, units_of, workers_for
from faultline.backtest.run import Backtest, backtest
from faultline.backtest.source import from_archive
from faultline.cli import main
from faultline.simulate_history import History
from sinks.archive.history import raw_retention
from sinks.archive.store import Archive

from .archived import T0, archive_capture

EDIT = "xid:\n  94: software\n  79: gpu_firmware_fault\nlemons:\n  threshold: 1.9\nunknown_cause_auto_restarts: 0\n"


def _history() -> list[str]:
    return list(History(nodes=40, days=2, seed=5, lemons=2, faults_per_node_day=0.6).lines())


def _policy(tmp_path: Path) -> Path:
    path = tmp_path / "candidate.yaml"
    path.write_text(EDIT, encoding="utf-8")
    return path


def _timing(out: str) -> tuple[dict[str, Any], str]:
    """The run's timing, and the rest of the output as printed (timing is the one part that moves)."""
    data = json.loads(out)
    timing = data.pop("timing")
    return timing, json.dumps(data, sort_keys=False)


def test_two_workers_print_what_one_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A capture with differences of every kind (and a line the screen refuses): `--workers 2` prints the
    same JSON as `--workers 1`, byte for byte but for the timing, which says who judged."""
    capture = tmp_path / "history.jsonl"
    capture.write_text("\n".join(_history()) + "\nnot a capture line\n", encoding="utf-8")
    outs = {}
    for workers in ("1", "2"):
        assert main(["backtest", str(_policy(tmp_path)), "--capture", str(capture), "--json",
                     "--workers", workers]) == 0
        outs[workers] = _timing(capsys.readouterr().out)
    (one, printed), (two, printed_by_two) = outs["1"], outs["2"]
    assert printed_by_two == printed
    data = json.loads(printed)
    assert data["differs"] and data["incidents"]["recategorised"] and data["commands"]["changed"]
    assert data["bad_lines"] == 1 and data["events"] > 10_000
    assert one["workers"] == 1 and two["workers"] == 2
    assert two["events_per_s_per_worker"] == pytest.approx(two["events_per_s"] / 2, abs=1)


def _stable(bt: Backtest) -> dict[str, Any]:
    out = bt.to_json()
    out.pop("timing")
    out["retention"] and out["retention"].pop("raw_cutoff")  # moves with the wall clock
    return out


def test_an_archive_window_read_by_the_workers_gives_the_same_backtest(tmp_path: Path) -> None:
    """Each worker reads the window itself, through the archive's owner (this process): the context,
    the warm-up and the window are those of the one-process pass, and so is every decision; and opening
    the archive there leaves its raw-telemetry TTL as it was."""
    candidate = str(_policy(tmp_path))
    with Archive.open(f"chdb://{tmp_path / 'archive'}", raw_ttl_days=45) as archive:
        archive_capture(archive, _history(), decisions=False)
        since = T0 + timedelta(hours=20)

        def run(workers: int) -> Backtest:
            src = from_archive(archive, since, None, timedelta(hours=6))
            return backtest(src, load_policy(candidate), load_policy(), workers=workers)

        one, two = run(1), run(2)
        assert raw_retention(archive).ttl_days == 45
    assert two.workers == 2 and one.workers == 1
    assert two.source.context == one.source.context > 0 and two.judged.events == one.judged.events
    assert json.dumps(_stable(two), default=str) == json.dumps(_stable(one), default=str)
    assert two.differs and two.judged.timeline.starts == one.judged.timeline.starts


def test_against_live_one_side_is_judged_here() -> None:
    """Against live only the candidate is judged: one unit of work, so no pool."""
    assert [u.side for u in units_of(1)] == [0] and workers_for(8, len(units_of(1))) == 1


@pytest.mark.parametrize(("requested", "units", "used"), [(None, 2, min(2, cpus())), (1, 2, 1), (2, 2, 2),
                                                          (16, 2, 2), (3, 1, 1)])
def test_workers_are_the_cpus_capped_by_the_units(requested: int | None, units: int, used: int) -> None:
    assert workers_for(requested, units) == used


def test_the_units_are_the_sides_and_the_first_carries_the_facts() -> None:
    units = units_of(2)
    assert [(u.side, u.facts) for u in units] == [(0, True), (1, False)]
    assert len({u.cell for u in units}) == 1  # a source is one cell: never split inside it


@pytest.mark.parametrize("workers", ["0", "-1", "two"])
def test_workers_must_be_a_count(workers: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "c.jsonl"
    capture.write_text("", encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["backtest", str(_policy(tmp_path)), "--capture", str(capture), "--workers", workers])
    assert exc.value.code == 2 and "--workers" in capsys.readouterr().err
