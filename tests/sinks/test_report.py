"""The operators' questions: the report_* views and `faultline report`.

Hand-made records with known answers check the arithmetic of every view; an empty archive
checks nothing crashes for lack of data; the archive filled by replaying the public scenarios
(``replayed_archive``, from :mod:`tests.sinks.replayed`) checks every answer has sensible rows
on what the real pipeline archives.
"""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from rich.console import Console

from correlators.findings import FAILURE_CATEGORIES, HARDWARE_CATEGORIES
from faultline.cli import main
from faultline.report_view import render_report
from sinks.archive import Archive
from sinks.archive.migrations import _HARDWARE, _STOPS_JOB
from sinks.report import SECTIONS, Report, build_report, parse_since, section_sql
from streams.decisions import CATEGORIES, Command, Culprit, Incident, Target
from streams.events import CheckpointSaved, Event, GpuInfo, Inventory, JobStarted, RankAllocation

if TYPE_CHECKING:
    from .replayed import Replayed

pytest_plugins = ["tests.sinks.replayed"]

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


# --------------------------------------------------------------------------- hand-made records


def _inventory() -> list[Event]:
    h100 = [GpuInfo(index=i, uuid=f"GPU-a1-{i}", pci=f"{i + 1:02x}:00", name="NVIDIA H100") for i in range(2)]
    a100 = [GpuInfo(index=0, uuid="GPU-b1-0", pci="01:00", name="NVIDIA A100")]
    return [
        Event(id="inv-a1", ts=at(-60), source="inventory", node="a1", body=Inventory(rack="ra", gpus=h100)),
        Event(id="inv-b1", ts=at(-60), source="inventory", node="b1", body=Inventory(rack="rb", gpus=a100)),
    ]


def _jobs() -> list[Event]:
    j1 = JobStarted(allocation=[RankAllocation(node="a1", gpus=[0, 1], ranks=[0, 1])], world_size=16)
    j2 = JobStarted(allocation=[RankAllocation(node="b1", gpus=[0], ranks=[0])] * 8)  # size from the allocation
    saves = [
        Event(id=f"ck-{m}", ts=at(m), source="trainer", job="j1", node="a1", rank=0,
              body=CheckpointSaved(step=m * 10, path=f"/ckpt/{m}", seconds=seconds))
        for m, seconds in ((10, 10.0), (20, 12.0), (30, 14.0), (40, 16.0))
    ]
    return [
        Event(id="start-j1", ts=T0, source="scheduler", job="j1", body=j1),
        Event(id="start-j2", ts=T0, source="scheduler", job="j2", body=j2),
        *saves,
    ]


def _versions(id_: str, job: str | None, category: Any, node: str | None, gpus: list[str], opened: float,
              states: list[tuple[float, str]], lost: float | None = None) -> list[Incident]:
    return [
        Incident(id=id_, job=job, category=category, culprit=Culprit(node=node, gpus=gpus), opened_at=at(opened),
                 updated_at=at(minute), severity="page", state=state, version=v,
                 lost_gpu_hours=lost if state != "open" or v > 1 else None)
        for v, (minute, state) in enumerate(states, start=1)
    ]


def _incidents() -> list[Incident]:
    resolved = _versions("i1", "j1", "gpu_off_bus", "a1", ["GPU-a1-1"], 45,
                         [(45, "open"), (45, "mitigating"), (46, "restarting"), (50, "verifying"), (55, "resolved")],
                         lost=1.5)
    loop = _versions("i2", "j2", "network_timeout", "b1", ["0"], 30,  # an index as the culprit GPU
                     [(30, "open"), (31, "restarting"), (40, "open"), (41, "restarting"), (60, "escalated")], lost=2.0)
    condition = _versions("i3", None, "gpu_ecc_degradation", "b1", ["GPU-b1-0"], 10, [(10, "open")])
    old = _versions("i4", "j1", "cuda_oom", None, [], -30 * 24 * 60, [(-30 * 24 * 60, "open")])
    return [*resolved, *loop, *condition, *old]


def _commands() -> list[Command]:
    def restart(id_: str, incident: str, job: str, minute: float) -> Command:
        return Command(id=id_, incident=incident, type="restart_job", target=Target(job=job), issued_at=at(minute))

    return [restart("r1", "i1", "j1", 46), restart("r2a", "i2", "j2", 31), restart("r2b", "i2", "j2", 41)]


@pytest.fixture(scope="module")
def known_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An archive holding the hand-made records (closed: tests open it while they need it)."""
    url = f"chdb://{tmp_path_factory.mktemp('known') / 'archive'}"
    with Archive.open(url) as archive:
        archive.write_events([*_inventory(), *_jobs()])
        archive.write_incidents(_incidents())
        archive.write_commands(_commands())
    return url


@pytest.fixture(scope="module")
def known(known_url: str) -> Report:
    """The report on the hand-made records, over all time."""
    with Archive.open(known_url) as archive:
        return build_report(archive)


def _by(rows: list[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    return {row[key]: row for row in rows}


def test_hardware_share_counts_job_incidents_with_a_hardware_cause(known: Report) -> None:
    [row] = known.sections["hardware_share"]
    assert row == {"job_incidents": 3, "hardware_incidents": 1, "hardware_share": 0.3333, "jobs": 2,
                   "jobs_hit_by_hardware": 1}
    causes = _by(known.sections["failure_causes"], "category")
    assert set(causes) == {"gpu_off_bus", "network_timeout", "cuda_oom"}  # the job-less condition is left out
    assert causes["gpu_off_bus"]["is_hardware"] is True and causes["network_timeout"]["is_hardware"] is False


def test_gpu_models_are_named_from_inventory_whatever_the_culprit_id(known: Report) -> None:
    models = known.sections["gpu_models"]
    assert [m["gpu_name"] for m in models] == ["NVIDIA A100", "NVIDIA H100"]  # most lost GPU-hours first
    a100, h100 = models
    # i2 (culprit "0" on b1) and i3: i2's 2.0 of work, and its 8 GPUs down from 30 min to the history's end (60)
    assert (a100["incidents"], a100["lost_gpu_hours"]) == (2, 6.0)
    assert (h100["incidents"], h100["culprit_gpus"], h100["lost_gpu_hours"]) == (1, 1, 5.5)  # 1.5 + 16 GPUs x 15 min


def test_checkpoint_loss_is_the_newest_checkpoint_or_run_start_age_times_the_gpus(known: Report) -> None:
    loss = _by(known.sections["checkpoint_loss"], "job")
    assert loss["j1"]["avg_checkpoint_age_s"] == 300.0  # failed at 45 min, saved at 40
    assert loss["j1"]["lost_gpu_hours"] == pytest.approx(300 * 16 / 3600, abs=1e-3)
    assert loss["j2"]["avg_checkpoint_age_s"] == 1800.0  # no checkpoint: since the run started
    assert loss["j2"]["lost_gpu_hours"] == 4.0  # 8 GPUs from the allocation
    assert loss["(all jobs)"]["failures"] == 2  # the old OOM had no run to measure from
    assert known.sections["checkpoint_loss"][-1]["job"] == "(all jobs)"


def test_recovery_is_opened_to_resolved(known: Report) -> None:
    recovery = _by(known.sections["recovery"], "category")
    assert recovery["gpu_off_bus"] == {"category": "gpu_off_bus", "incidents": 1, "recovered": 1, "escalated": 0,
                                       "still_open": 0, "mttr_s": 600.0, "median_ttr_s": 600.0, "max_ttr_s": 600.0}
    assert recovery["network_timeout"]["recovered"] == 0 and recovery["network_timeout"]["escalated"] == 1
    assert recovery["network_timeout"]["mttr_s"] is None
    assert (recovery["(all)"]["incidents"], recovery["(all)"]["mttr_s"]) == (3, 600.0)


def test_first_restart_outcome_follows_the_state_after_it(known: Report) -> None:
    first = _by(known.sections["first_restart"], "category")
    assert (first["gpu_off_bus"]["resolved"], first["network_timeout"]["failed_again"]) == (1, 1)
    assert (first["(all)"]["restarted"], first["(all)"]["success_rate"]) == (2, 0.5)


def test_checkpoint_trend_compares_halves_and_fits_a_slope(known: Report) -> None:
    [trend] = known.sections["checkpoint_trend"]
    assert (trend["job"], trend["saves"], trend["first_half_s"], trend["second_half_s"]) == ("j1", 4, 11.0, 15.0)
    assert trend["change_pct"] == 36.4 and trend["trend"] == "slower"
    assert trend["slope_s_per_day"] == pytest.approx(2 / 10 * 60 * 24)  # 2 s more every 10 minutes


def test_hotspots_rank_racks_then_nodes(known: Report) -> None:
    rows = known.sections["fault_hotspots"]
    assert [(r["rack"], r["node"]) for r in rows] == [
        ("rb", "(whole rack)"), ("ra", "(whole rack)"), ("rb", "b1"), ("ra", "a1")]
    assert (rows[0]["incidents"], rows[0]["hardware_incidents"], rows[0]["jobs"]) == (2, 1, 1)


def test_since_leaves_out_older_incidents(known_url: str) -> None:
    with Archive.open(known_url) as archive:
        recent = build_report(archive, since=at(-24 * 60))
    [share] = recent.sections["hardware_share"]
    assert (share["job_incidents"], share["hardware_share"]) == (2, 0.5)


def test_the_views_category_lists_match_the_correlator() -> None:
    """Migration 5 froze these lists; if the correlator's change, a new migration must follow."""
    stops_job, hardware = (set(re.findall(r"'(\w+)'", text)) for text in (_STOPS_JOB, _HARDWARE))
    assert stops_job == FAILURE_CATEGORIES
    assert HARDWARE_CATEGORIES <= hardware <= set(CATEGORIES)
    assert hardware - HARDWARE_CATEGORIES == {"gpu_ecc_degradation", "gpu_thermal"}  # hardware, but no failure


# --------------------------------------------------------------------------- empty archive, JSON, terminal


def test_an_empty_archive_gives_empty_or_zero_answers(tmp_path: Path) -> None:
    with Archive.open(f"chdb://{tmp_path / 'empty'}") as archive:
        report = build_report(archive)
    assert report.sections["hardware_share"] == [{"job_incidents": 0, "hardware_incidents": 0, "hardware_share": None,
                                                  "jobs": 0, "jobs_hit_by_hardware": 0}]
    assert report.sections["gpu_models"] == [] and report.sections["fault_hotspots"] == []
    json.dumps(report.to_json())
    out = io.StringIO()
    render_report(report, Console(file=out, width=160))
    assert "no data in this window" in out.getvalue()


def test_json_is_plain_and_tables_show_every_section(known: Report) -> None:
    doc = json.loads(json.dumps(known.to_json()))
    assert list(doc["sections"]) == [s.key for s in SECTIONS]
    assert doc["sections"]["fault_hotspots"]["rows"][0]["last_at"].startswith("2026-03-01T")
    out = io.StringIO()
    render_report(known, Console(file=out, width=200))
    assert all(s.title in out.getvalue() for s in SECTIONS)


@pytest.mark.parametrize(("text", "expected"), [
    ("7d", T0 - timedelta(days=7)), ("12h", T0 - timedelta(hours=12)), ("90m", T0 - timedelta(minutes=90)),
    ("2w", T0 - timedelta(weeks=2)), ("2026-02-01", datetime(2026, 2, 1, tzinfo=UTC)),
    ("2026-02-01T06:00:00+02:00", datetime(2026, 2, 1, 4, tzinfo=UTC)),
])
def test_since_takes_durations_and_iso_times(text: str, expected: datetime) -> None:
    assert parse_since(text, now=T0) == expected


def test_since_refuses_anything_else() -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_since("last tuesday")


def test_window_is_integer_literals_built_from_datetimes() -> None:
    sql = section_sql(SECTIONS[0], datetime(1970, 1, 1, 0, 0, 1, 678000, tzinfo=UTC), datetime(3000, 1, 1, tzinfo=UTC))
    assert sql == f"SELECT * FROM report_hardware_share(since_ms = 1678, until_ms = {10_413_791_999_000})"


def test_cli_report_json(known_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAULTLINE_ARCHIVE", known_url)
    assert main(["report", "--json", "--since", "2026-02-28"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["since"] == "2026-02-28T00:00:00.000000Z"
    assert doc["sections"]["hardware_share"]["rows"][0]["job_incidents"] == 2
    assert main(["report", "--since", "yesterday-ish"]) == 2


# --------------------------------------------------------------------------- the replayed public scenarios


@pytest.mark.broker
def test_every_answer_has_sensible_rows_on_the_public_scenarios(replayed_archive: Replayed) -> None:
    with Archive.open(replayed_archive.url) as archive:
        report = build_report(archive)
    s = report.sections
    assert all(s[section.key] for section in SECTIONS), [k for k, rows in s.items() if not rows]
    for section in SECTIONS:
        assert set(section.columns) <= set(s[section.key][0]), section.key  # what the tables show exists

    [share] = s["hardware_share"]
    assert share["job_incidents"] >= 5 and share["hardware_incidents"] >= 2 and 0 < share["hardware_share"] < 1
    causes = _by(s["failure_causes"], "category")
    assert {"gpu_off_bus", "power_supply_fault", "cuda_oom", "checkpoint_failure", "network_timeout"} <= set(causes)
    models = _by(s["gpu_models"], "gpu_name")
    assert {"NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 5090"} <= set(models)
    assert models["NVIDIA GeForce RTX 5090"]["culprit_gpus"] == 4  # the PSU rail took four GPUs

    loss = _by(s["checkpoint_loss"], "job")
    assert 0 < loss["pt-70b"]["avg_checkpoint_age_s"] < 600  # saved every 10 minutes
    assert loss["(all jobs)"]["failures"] >= 4 and loss["(all jobs)"]["lost_gpu_hours"] > 0
    assert _by(s["recovery"], "category")["(all)"]["incidents"] >= 4
    assert _by(s["first_restart"], "category")["(all)"]["restarted"] >= 2
    assert _by(s["checkpoint_trend"], "job")["pt-70b"]["saves"] >= 2

    hotspots = {(r["rack"], r["node"]): r for r in s["fault_hotspots"]}
    assert hotspots[("lab", "ws-04")]["hardware_incidents"] == 1
    assert hotspots[("r1", "n03")]["categories"] == ["gpu_off_bus"]
    assert hotspots[("r2", "n21")]["categories"] == ["gpu_ecc_degradation"]


def test_a_job_left_down_loses_its_gpus_until_the_end_of_the_history(known_url: str) -> None:
    """Issue 29: j1 failed at 45 min and never ran again, so from 45 min to the history's end (60 min,
    i2's last version) its 16 GPUs are lost too, beside the 5 min of work since its checkpoint."""
    with Archive.open(known_url) as archive:
        rows = _by(archive.query("SELECT id, lost_work_gpu_hours, lost_down_gpu_hours, lost_gpu_hours, "
                                 "down_until_end FROM incident_facts"), "id")
        causes = _by(build_report(archive).sections["failure_causes"], "category")
    assert rows["i1"]["lost_work_gpu_hours"] == 1.5  # the incident's own figure
    assert rows["i1"]["lost_down_gpu_hours"] == pytest.approx(15 * 60 * 16 / 3600, abs=1e-3)
    assert rows["i1"]["lost_gpu_hours"] == pytest.approx(1.5 + 4.0, abs=1e-3) and rows["i1"]["down_until_end"]
    assert rows["i3"]["lost_gpu_hours"] is None  # a condition of a running job stops nothing
    assert causes["gpu_off_bus"]["lost_gpu_hours"] == pytest.approx(5.5, abs=1e-3)
