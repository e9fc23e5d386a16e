"""Checkpoint advice from the archive (issue 29): `faultline report checkpoints` and its view.

A small fleet with known answers: four H100 nodes (32 GPUs) and one A100 node (8 GPUs), archived
for ten days. Job ``big`` runs on the H100s and saves every 30 minutes (60 s a save); ``small``,
``tiny`` (0.01 s saves) and ``unsaved`` (none) run on the A100 node, whose model name carries an escape. The H100s fail ``failures`` times (GPUs off the bus); a software
crash and an ECC warning must not count as hardware failures. With six failures the H100 rate is
observed (``gpu_model``), the A100 has none of its own and takes the fleet's (``fleet``); with two
there are too few anywhere and the Llama 3 prior holds (``prior``).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from common.settings import REPO_ROOT
from faultline.cli import main
from sinks.archive import Archive
from sinks.archive.advice_views import MAX_INTERVAL_S, MIN_FAILURES, MIN_INTERVAL_S, PRIOR_RATE_PER_GPU_HOUR
from sinks.checkpoint_advice import checkpoint_advice
from streams.decisions import Culprit, Incident
from streams.events import (
    CheckpointPolicy,
    CheckpointSaved,
    Event,
    GpuInfo,
    Inventory,
    JobStarted,
    RankAllocation,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = 86_400.0
A100 = "NVIDIA A100\x1b[2J"  # a GPU model name (free text from the node) that would clear a terminal


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _inventory() -> list[Event]:
    def node(name: str, model: str) -> Event:
        gpus = [GpuInfo(index=i, uuid=f"GPU-{name}-{i}", name=model) for i in range(8)]
        return Event(id=f"inv-{name}", ts=T0, source="inventory", node=name, body=Inventory(rack="r1", gpus=gpus))

    return [node(f"h{n}", "NVIDIA H100") for n in range(1, 5)] + [node("a1", A100)]


def _start(job: str, nodes: list[str], declared: float | None = None) -> Event:
    alloc = [RankAllocation(node=n, gpus=list(range(8)), ranks=list(range(8 * k, 8 * k + 8)))
             for k, n in enumerate(nodes)]
    policy = CheckpointPolicy(dir=f"/ckpt/{job}", interval_s=declared) if declared else None
    return Event(id=f"start-{job}", ts=at(60), source="scheduler", job=job,
                 body=JobStarted(allocation=alloc, checkpoint=policy))


def _saves(job: str, times: list[float], seconds: float) -> list[Event]:
    return [Event(id=f"ck-{job}-{k}", ts=at(t), source="trainer", job=job, node="h1", rank=0,
                  body=CheckpointSaved(step=k + 1, path=f"/ckpt/{job}/{k}", seconds=seconds))
            for k, t in enumerate(times)]


def _events() -> list[Event]:
    big = [DAY] + [9 * DAY + 1800 * k for k in range(6)]  # one early save, then every 30 min: median gap 1800
    return [
        *_inventory(),
        _start("big", ["h1", "h2", "h3", "h4"]),
        _start("small", ["a1"], declared=600),
        _start("tiny", ["a1"]),
        _start("unsaved", ["a1"], declared=900),
        *_saves("big", big, 60.0),
        *_saves("small", [2 * DAY, 2 * DAY + 600, 2 * DAY + 1200], 20.0),
        *_saves("tiny", [3 * DAY, 3 * DAY + 3600], 0.01),
        Event(id="last", ts=at(10 * DAY), source="trainer", job="big", node="h1", rank=0,
              body=CheckpointSaved(step=99, path="/ckpt/big/last", seconds=60.0)),  # the history ends at day 10
    ]


def _incidents(failures: int) -> list[Incident]:
    def incident(id_: str, category: Any, node: str, day: float, job: str | None = "big") -> Incident:
        return Incident(id=id_, job=job, category=category, culprit=Culprit(node=node, gpus=[f"GPU-{node}-0"]),
                        opened_at=at(day * DAY), updated_at=at(day * DAY), severity="page", state="open")

    hardware = [incident(f"hw{k}", "gpu_off_bus", f"h{k % 4 + 1}", 2 + k) for k in range(failures)]
    return [*hardware, incident("sw", "software_crash", "h1", 1.5),
            incident("ecc", "gpu_ecc_degradation", "h2", 1.7, job=None)]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], str]:
    made: dict[int, str] = {}

    def make(failures: int) -> str:
        if failures not in made:
            url = f"chdb://{tmp_path_factory.mktemp(f'fleet{failures}') / 'archive'}"
            with Archive.open(url) as archive:
                archive.write_events(_events())
                archive.write_incidents(_incidents(failures))
            made[failures] = url
        return made[failures]

    return make


def _rows(url: str) -> dict[str, dict[str, Any]]:
    with Archive.open(url) as archive:
        return {r["job"]: r for r in checkpoint_advice(archive)["jobs"]}


def _waste(interval: float, save: float, mtbf: float) -> float:
    """The docstring's model: save overhead plus expected lost work, per second of wall time."""
    return save / interval + (interval + save) / (2 * mtbf)


def test_observed_rate_of_the_jobs_gpu_model_scaled_to_its_size(fleet: Callable[[int], str]) -> None:
    big = _rows(fleet(6))["big"]
    exposure = 32 * 10 * 24  # GPU-hours of the H100s over the ten archived days
    mtbf = exposure / 6 / 32 * 3600  # six failures; the job holds all 32 GPUs
    assert (big["gpu_name"], big["gpus"], big["mtbf_basis"], big["failures"]) == ("NVIDIA H100", 32, "gpu_model", 6)
    assert big["exposure_gpu_hours"] == pytest.approx(exposure, rel=1e-3)
    assert big["mtbf_h"] == pytest.approx(mtbf / 3600, abs=0.01)
    assert (big["interval_s"], big["interval_source"], big["save_s"]) == (1800.0, "observed", 60.0)
    young = math.sqrt(2 * mtbf * 60)
    assert big["advised_interval_s"] == pytest.approx(young, abs=1)
    cost = (_waste(1800, 60, mtbf) - _waste(young, 60, mtbf)) * 32 * 24
    assert big["cost_gpu_hours_per_day"] == pytest.approx(cost, abs=2e-3) and cost > 8
    assert big["lost_gpu_hours_per_day_now"] == pytest.approx(_waste(1800, 60, mtbf) * 32 * 24, abs=2e-3)


def test_a_model_without_failures_of_its_own_takes_the_fleets_rate(fleet: Callable[[int], str]) -> None:
    small = _rows(fleet(6))["small"]
    mtbf = (40 * 10 * 24) / 6 / 8 * 3600  # six failures over all 40 GPUs' hours, for 8 GPUs
    assert (small["gpu_name"], small["mtbf_basis"], small["failures"]) == (A100, "fleet", 6)
    assert small["mtbf_h"] == pytest.approx(mtbf / 3600, abs=0.01)
    assert small["advised_interval_s"] == pytest.approx(math.sqrt(2 * mtbf * 20), abs=1)


def test_too_few_failures_fall_back_to_the_llama3_prior(fleet: Callable[[int], str]) -> None:
    assert MIN_FAILURES > 2
    big = _rows(fleet(2))["big"]
    mtbf = 1 / (PRIOR_RATE_PER_GPU_HOUR * 32) * 3600
    assert PRIOR_RATE_PER_GPU_HOUR == pytest.approx(419 / (16_384 * 54 * 24))
    assert (big["mtbf_basis"], big["failures"]) == ("prior", 2)  # what the archive had, said so
    assert big["mtbf_h"] == pytest.approx(mtbf / 3600, abs=0.01)
    assert big["advised_interval_s"] == pytest.approx(math.sqrt(2 * mtbf * 60), abs=1)


def test_the_advice_is_clamped_and_needs_save_times(fleet: Callable[[int], str]) -> None:
    rows = _rows(fleet(6))
    assert rows["tiny"]["advised_interval_s"] == MIN_INTERVAL_S  # 0.01 s saves: Young says under a minute
    assert rows["big"]["advised_interval_s"] <= MAX_INTERVAL_S
    unsaved = rows["unsaved"]  # no saves: the declared interval, and no advice without a save time
    assert (unsaved["interval_s"], unsaved["interval_source"], unsaved["saves"]) == (900.0, "declared", 0)
    assert unsaved["advised_interval_s"] is None and unsaved["cost_gpu_hours_per_day"] is None
    assert list(rows)[0] == "big"  # the costliest difference first


def test_cli_json_and_terminal_safe_text(fleet: Callable[[int], str], monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAULTLINE_ARCHIVE", fleet(6))
    assert main(["report", "checkpoints", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    big = next(r for r in doc["jobs"] if r["job"] == "big")
    assert big["last_save_at"] == "2026-03-11T00:00:00.000000Z"  # the one RFC 3339 form
    assert doc["prior"]["interruptions"] == 419 and doc["min_failures"] == MIN_FAILURES
    assert "sqrt(2" in doc["rule"]
    assert main(["report", "checkpoints"]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text and "NVIDIA A100\\x1b[2J" in text
    assert "Checkpoint advice" in text and "6 hardware failures" in text
    assert main(["report", "checkpoints", "--since", "7d"]) == 2  # the advice reads the whole history


def test_an_empty_archive_advises_nothing(tmp_path: Any) -> None:
    with Archive.open(f"chdb://{tmp_path / 'empty'}") as archive:
        doc = checkpoint_advice(archive)
    assert doc["jobs"] == []
    out = io.StringIO()
    from rich.console import Console

    from faultline.checkpoint_view import render_advice

    render_advice(doc, Console(file=out, width=200))
    assert "no job" in out.getvalue()


def test_the_fleet_dashboard_panel_shows_the_same_advice(fleet: Callable[[int], str]) -> None:
    """The Grafana fleet dashboard's panel reads the same view: same jobs, same figures, same order."""
    board = json.loads((REPO_ROOT / "deploy" / "grafana" / "dashboards" / "faultline-fleet.json").read_text())
    [panel] = [p for p in board["panels"] if p["title"] == "Checkpoint advice"]
    sql = panel["targets"][0]["rawSql"]
    assert "$" not in sql.replace("`${namespace}`.", "")  # over the whole history, not the dashboard's time range
    with Archive.open(fleet(6)) as archive:
        shown = archive.query(sql.replace("${namespace}", archive.database))  # the namespace chosen: this one
        advice = checkpoint_advice(archive)["jobs"]
    assert [(r["job"], r["advised_interval_s"], r["cost_gpu_hours_per_day"], r["failures"]) for r in shown] == [
        (r["job"], r["advised_interval_s"], r["cost_gpu_hours_per_day"], r["failures"]) for r in advice]
