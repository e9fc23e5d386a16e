"""`faultline backtest`: a capture or an archive namespace, JSON, HTML, exit statuses, and the errors."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from faultline.cli import main
from sinks.archive.store import Archive

from .archived import DAY, archive_capture, archive_order, crash, inventory, job, lines

FIRMWARE = "xid:\n  79: gpu_firmware_fault\n"


def _capture(tmp_path: Path) -> Path:
    """A job on n1, whose GPU 3 falls off the bus (XID 79) and whose rank 3 dies of it."""
    obs = [inventory("n1"), inventory("n2"), *job("pt", "n1", 60, 1800), *crash("pt", "n1", 1801, 3),
           (1800.0, {"source": "kernel", "node": "n1",
                     "line": "NVRM: Xid (PCI:0000:48:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."}),
           *job("ft", "n2", 60, 3000)]
    path = tmp_path / "capture.jsonl"
    path.write_text("\n".join(archive_order(lines(obs))) + "\n", encoding="utf-8")
    return path


def _policy(tmp_path: Path, text: str = FIRMWARE) -> Path:
    path = tmp_path / "candidate.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_capture_backtest_prints_the_difference_and_writes_the_page(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "bt.html"
    assert main(["backtest", str(_policy(tmp_path)), "--capture", str(_capture(tmp_path)), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "incidents 1: 0 added, 0 removed, 1 re-categorised" in out
    assert "re-categorised  pt" in out and "gpu_off_bus n1 GPU-n1-3" in out and "gpu_firmware_fault n1 GPU-n1-3" in out
    assert "reset_gpu" in out and "approvals asked 0 -> 1" in out
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text and "re-categorised" in text and html.escape("against the current policy") in text
    assert text.count("class='pair'") == 1 and "reset_gpu" in text


def test_json_and_fail_on_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = _capture(tmp_path)
    assert main(["backtest", str(_policy(tmp_path)), "--capture", str(capture), "--json", "--fail-on-diff"]) == 1
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["differs"] and data["against"] == "current" and data["events"] > 50
    assert data["commands"]["by_type"]["reset_gpu"] == {"added": 1, "removed": 0, "changed": 0}
    assert "decides differently" in err
    same = _policy(tmp_path, "timing:\n  settle_s: 30\n")  # the default value: nothing changes
    assert main(["backtest", str(same), "--capture", str(capture), "--fail-on-diff"]) == 0
    assert "no difference" in capsys.readouterr().out


def test_an_archive_namespace_against_live_and_current(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    url = f"chdb://{tmp_path / 'archive'}"
    capture = _capture(tmp_path).read_text(encoding="utf-8").splitlines()
    with Archive.open(url, "faultline.replay-abc", live="faultline") as archive:
        archive_capture(archive, capture)
    monkeypatch.setenv("FAULTLINE_ARCHIVE", url)
    policy = str(_policy(tmp_path))
    for against in ("live", "current"):
        assert main(["backtest", policy, "--namespace", "faultline.replay-abc", "--against", against, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["against"] == against and data["source"] == "archive namespace faultline.replay-abc"
        assert [p["candidate"]["category"] for p in data["incidents"]["recategorised"]] == ["gpu_firmware_fault"]
        assert not data["retention"]["reaches_past"]
    assert main(["backtest", policy, "--namespace", "faultline.replay-abc", "--since", "2026-04-22T03:20:00Z",
                 "--warmup", "0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["window"]["since"].startswith("2026-04-22T03:20") and data["window"]["context_events"] > 0
    assert main(["backtest", policy, "--namespace", "faultline.replay-abc", "--since", "2099-01-01"]) == 1
    assert "no events to judge" in capsys.readouterr().err
    assert main(["backtest", policy, "--namespace", "faultline.nothing-here"]) == 1


@pytest.mark.parametrize("argv, says", [
    (["--capture", "CAPTURE", "--against", "live"], "no live decisions"),
    (["--capture", "/nonexistent.jsonl"], "no such capture"),
    (["--capture", "CAPTURE", "--warmup", "a while"], "--warmup wants a duration"),
    (["--capture", "CAPTURE", "--since", "yesterday-ish"], "--since/--from wants"),
    (["--capture", "CAPTURE", "--since", "1d", "--from", "2026-04-22"], "once"),
    (["--capture", "CAPTURE", "--baseline-policy", "/nonexistent.yaml"], "does not exist"),
])
def test_usage_errors_exit_2_and_say_what_to_do(argv: list[str], says: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    capture = str(_capture(tmp_path))
    argv = [capture if a == "CAPTURE" else a for a in argv]
    assert main(["backtest", str(_policy(tmp_path)), *argv]) == 2
    assert says in capsys.readouterr().err
    assert main(["backtest", str(tmp_path / "missing.yaml"), "--capture", capture]) == 2


def test_days_of_history_in_a_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A lemon policy edit over a week: the fence goes, and so does its validation."""
    obs = []
    for name, start in (("a", 0.5 * DAY), ("b", 3.5 * DAY), ("c", 6.5 * DAY)):
        obs += [inventory("n1", start - 1), *job(name, "n1", start, start + 3600), *crash(name, "n1", start + 3600, 5)]
    path = tmp_path / "week.jsonl"
    path.write_text("\n".join(lines(obs)) + "\n", encoding="utf-8")
    assert main(["backtest", str(_policy(tmp_path, "lemons:\n  enabled: false\n")), "--capture", str(path),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["commands"]["by_type"]["quarantine_gpu"]["removed"] == 1
    assert data["costs"]["baseline"]["lemon_fences"] == 1 and data["costs"]["candidate"]["lemon_fences"] == 0


SCENARIOS = Path("/work/shared/scenarios")


@pytest.mark.skipif(not (SCENARIOS / "xid79_multi_node.jsonl").exists(), reason="needs the public scenarios")
def test_a_job_left_down_is_not_cheaper_than_restarting_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 29's case: a candidate that only files a ticket for a GPU off the bus leaves the 32-GPU job
    down until the capture ends; it loses more GPU-hours than the policy that fences and restarts."""
    ticket_only = _policy(tmp_path, "categories:\n  gpu_off_bus: {severity: page, actions: [open_ticket]}\n")
    capture = str(SCENARIOS / "xid79_multi_node.jsonl")
    assert main(["backtest", str(ticket_only), "--capture", capture, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    base, cand = data["costs"]["baseline"], data["costs"]["candidate"]
    # baseline: 159.9 s since the 03:20:40 checkpoint + down from 03:23:20 until its 03:23:50 restart runs
    # again 390 s later (assumed: a backtest runs no executor), all on 32 GPUs
    assert base["lost_gpu_hours"] == pytest.approx(1.421 + 3.733, abs=0.002) and base["jobs_down_at_end"] == 0
    # candidate: the same lost work, and down from 03:23:20 to the capture's end at 03:34:20
    assert cand["lost_gpu_hours"] == pytest.approx(1.421 + 5.867, abs=0.002) and cand["jobs_down_at_end"] == 1
    assert cand["lost_gpu_hours"] > base["lost_gpu_hours"]
    assert main(["backtest", str(ticket_only), "--capture", capture]) == 0
    out = capsys.readouterr().out
    assert "lost GPU-hours 5.155 -> 7.288" in out and "still down at the end of the events" in out
