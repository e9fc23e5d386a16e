"""`faultline report lemons`: the archive's implications scored as the correlator scores them, with evidence."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from correlators.engine import Correlator
from correlators.lemons import score
from correlators.policy import load_policy
from faultline.cli import main
from faultline.lemon_report import lemon_report
from producers.capture.screen import Accepted, CaptureScreen
from sinks.archive.store import Archive
from streams.decisions import Command, Target

from .backtest.archived import DAY, T0, archive_capture, crash, inventory, job, lines

POLICY = load_policy().lemons


def _week(gpus: tuple[int, int, int] = (5, 5, 5)) -> list[str]:
    """Three jobs crash on n1 (at the GPUs given) over six days; one crash on n2."""
    obs = []
    for name, start, gpu in (("a", 0.5 * DAY, gpus[0]), ("b", 3.5 * DAY, gpus[1]), ("c", 6.5 * DAY, gpus[2])):
        obs += [inventory("n1", start - 1), inventory("n2", start - 1), *job(name, "n1", start, start + 3600),
                *crash(name, "n1", start + 3600, gpu)]
    obs += [*job("d", "n2", 2 * DAY, 2 * DAY + 3600), *crash("d", "n2", 2 * DAY + 3600, 1)]
    return lines(obs)


def _engine(capture: list[str]) -> Correlator:
    eng = Correlator(load_policy())
    for v in CaptureScreen().screen(x.encode() for x in capture):
        if isinstance(v, Accepted):
            for e in v.events:
                eng.process(e)
    eng.finish()
    return eng


def test_the_worst_gpu_is_the_lemon_with_the_correlators_score_and_its_incidents(tmp_path: Path) -> None:
    capture = _week()
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive:
        out = archive_capture(archive, capture)
        report = lemon_report(archive, POLICY)
    top = report["gpus"][0]
    assert (top["node"], top["gpu_index"], top["gpu"]) == ("n1", 5, "GPU-n1-5")
    assert (top["incidents"], top["jobs"], top["state"]) == (3, 3, "fenced")
    fence = next(c for c in out["commands"] if c["type"] == "quarantine_gpu")
    assert [e["incident"] for e in top["evidence"]] == fence["params"]["incidents"]
    rec = _engine(capture).state.lemons.gpus["n1"][5]  # the correlator's own record, read at the same time
    assert top["score"] == pytest.approx(score(rec.implications.values(), report["at"], POLICY.weights,
                                               POLICY.half_life_s), abs=1e-3)
    assert top["score"] > top["fenced_score"] - 0.1 and top["fenced_score"] >= POLICY.threshold
    assert [(r["node"], r["gpu_index"], r["state"]) for r in report["gpus"][1:]] == [("n2", 1, "")]
    assert report["nodes"][0]["node"] == "n1" and report["nodes"][0]["incidents"] == 3
    assert [f["node"] for f in report["fenced"]] == ["n1"]


def test_a_validated_release_starts_the_gpu_afresh(tmp_path: Path) -> None:
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive:
        archive_capture(archive, _week())
        later = T0 + timedelta(days=7)
        archive.write_commands([Command(id="cmd-release", incident="manual-1", type="release_gpu",
                                        target=Target(node="n1", gpu="GPU-n1-5"), issued_at=later,
                                        params={"validated_by": "dcgmi diag -r 3 passed"})])
        report = lemon_report(archive, POLICY, at=later + timedelta(hours=1))
    n1 = next(r for r in report["gpus"] if r["node"] == "n1")
    assert (n1["state"], n1["score"], n1["incidents"]) == ("validated", 0.0, 0)
    assert report["fenced"] == []


def test_crashes_on_different_gpus_make_no_gpu_a_lemon(tmp_path: Path) -> None:
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive:
        archive_capture(archive, _week((5, 2, 7)))
        report = lemon_report(archive, POLICY, since=T0 + timedelta(days=1))
    assert all(r["incidents"] == 1 and r["state"] == "" for r in report["gpus"])
    assert {r["gpu_index"] for r in report["gpus"] if r["node"] == "n1"} == {2, 7}  # since day 1: not GPU 5's
    assert report["fenced"] == []


def test_cli_report_lemons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"chdb://{tmp_path / 'archive'}"
    with Archive.open(url) as archive:
        archive_capture(archive, _week())
    monkeypatch.setenv("FAULTLINE_ARCHIVE", url)
    assert main(["report", "lemons", "--json", "--top", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(g["node"], g["gpu_index"]) for g in data["gpus"]] == [("n1", 5)] and data["at"].endswith("Z")
    assert main(["report", "lemons"]) == 0
    text = capsys.readouterr().out
    assert "GPUs by lemon score" in text and "fenced" in text and "GPU-n1-5" in text
    assert main(["report", "lemons", "--top", "0"]) == 2


@pytest.mark.broker
def test_a_lemon_fenced_by_the_live_pipeline_is_reported_from_what_the_sink_archived(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """Through the broker, the Faust worker and the sink: the fence, its evidence and the score."""
    from common.settings import Settings
    from faultline.pipeline import replay

    capture = tmp_path / "week.jsonl"
    capture.write_text("\n".join(_week()) + "\n", encoding="utf-8")
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=f"lemons-{tmp_path.name}"[:60],
                        archive=f"chdb://{tmp_path / 'archive'}")
    run = replay(capture, settings)
    fences = [c for c in run.contract()["commands"] if c["params"].get("reason") == "lemon"]
    assert [c["type"] for c in fences] == ["quarantine_gpu", "validate_gpu"]
    with Archive.open(settings.archive_url, run.archive_namespace) as archive:
        report = lemon_report(archive, POLICY)
    top = report["gpus"][0]
    assert (top["node"], top["gpu_index"], top["state"], top["incidents"]) == ("n1", 5, "fenced", 3)
    assert [e["incident"] for e in top["evidence"]] == fences[0]["params"]["incidents"]
