"""Where the lost hours went (issue 29): the report's phases of lost GPU-hours, from the archive.

Four jobs of 8 GPUs each fail once, each a different way back, with known answers:

* ``a``: a GPU off the bus at 20 min (saved at 10), published 30 s later, restarted at 22 min without
  approval, running again at 25 min: work, detection, fencing and gate, requeue;
* ``b``: a software crash at 30 min (never saved), a restart waiting for approval from 31 min, approved
  and done at 41, running again at 45: approval wait;
* ``c``: a node down at 50 min, published at 51, no restart (escalated), running again at 80: a person;
* ``d``: an OOM at 100 min, restarted at 101, never running again until the history ends at 120.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console

from faultline.report_view import render_report
from sinks.archive import Archive
from sinks.report import SECTIONS, Report, build_report
from streams.decisions import Command, CommandResult, Culprit, Incident, Target
from streams.events import CheckpointSaved, Event, GpuInfo, Inventory, JobStarted, RankAllocation

T0 = datetime(2026, 3, 1, tzinfo=UTC)
PHASES = ("detection_gpu_hours", "fencing_gate_gpu_hours", "approval_wait_gpu_hours", "requeue_gpu_hours",
          "human_repair_gpu_hours")


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def gpu_h(minutes: float) -> float:
    return round(minutes * 8 / 60, 3)


def _events() -> list[Event]:
    out: list[Event] = []
    for k, job in enumerate("abcd"):
        node = f"n{k + 1}"
        gpus = [GpuInfo(index=i, uuid=f"GPU-{node}-{i}", name="NVIDIA H100") for i in range(8)]
        out.append(Event(id=f"inv-{node}", ts=at(-1), source="inventory", node=node, body=Inventory(gpus=gpus)))
        out.append(Event(id=f"start-{job}", ts=at(0), source="scheduler", job=job,
                         body=JobStarted(allocation=[RankAllocation(node=node, gpus=list(range(8)),
                                                                    ranks=list(range(8)))])))
    body = JobStarted(allocation=[RankAllocation(node="n9", gpus=list(range(8)), ranks=list(range(8)))])
    out += [Event(id=f"again-{job}", ts=at(m), source="scheduler", job=job, body=body) for job, m in
            (("a", 25), ("b", 45), ("c", 80))]
    out.append(Event(id="ck-a", ts=at(10), source="trainer", job="a", node="n1", rank=0,
                     body=CheckpointSaved(step=1, seconds=5.0)))
    out.append(Event(id="ck-end", ts=at(120), source="trainer", job="a", node="n9", rank=0,
                     body=CheckpointSaved(step=2, seconds=5.0)))  # the history ends at 120 min
    return out


def _incident(id_: str, job: str, category: Any, node: str, states: list[tuple[float, str]],
              published: float | None = None) -> list[Incident]:
    """``states``: (minute, state) per version, the first at the failure; ``published``: when the engine
    published the first version, if later than the failure."""
    opened = states[0][0]
    return [Incident(id=id_, job=job, category=category, culprit=Culprit(node=node), opened_at=at(opened),
                     updated_at=at(published if v == 1 and published is not None else m), severity="page",
                     state=s, version=v)
            for v, (m, s) in enumerate(states, start=1)]


def _incidents() -> list[Incident]:
    a = _incident("ia", "a", "gpu_off_bus", "n1", [(20, "open"), (22, "restarting"), (26, "resolved")], published=20.5)
    b = _incident("ib", "b", "software_crash", "n2", [(30, "open"), (31, "awaiting_approval"), (46, "resolved")])
    c = _incident("ic", "c", "node_down", "n3", [(50, "open"), (52, "escalated")], published=51)
    d = _incident("id", "d", "cuda_oom", "n4", [(100, "open"), (101, "restarting")])
    return [*a, *b, *c, *d]


def _commands() -> tuple[list[Command], list[CommandResult]]:
    def restart(id_: str, incident: str, job: str, minute: float, approval: bool = False) -> Command:
        return Command(id=id_, incident=incident, type="restart_job", target=Target(job=job), issued_at=at(minute),
                       requires_approval=approval)

    commands = [restart("ra", "ia", "a", 22), restart("rb", "ib", "b", 31, approval=True), restart("rd", "id", "d", 101)]
    results = [CommandResult(command="rb", status="waiting_approval", at=at(31), executor="slurm"),
               CommandResult(command="rb", status="done", at=at(41), executor="slurm"),
               CommandResult(command="ra", status="done", at=at(22.1), executor="slurm")]
    return commands, results


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    url = f"chdb://{tmp_path_factory.mktemp('phases') / 'archive'}"
    commands, results = _commands()
    with Archive.open(url) as archive:
        archive.write_events(_events())
        archive.write_incidents(_incidents())
        archive.write_commands(commands)
        archive.write_results(results)
        return build_report(archive)


def _by_category(report: Report) -> dict[str, dict[str, Any]]:
    return {r["category"]: r for r in report.sections["lost_phases"]}


def test_each_way_back_lands_in_its_phases(report: Report) -> None:
    rows = _by_category(report)
    a, b, c, d = rows["gpu_off_bus"], rows["software_crash"], rows["node_down"], rows["cuda_oom"]
    assert a["lost_work_gpu_hours"] == gpu_h(10)  # since the checkpoint at 10 min
    assert [a[p] for p in PHASES] == [gpu_h(0.5), gpu_h(1.5), 0, gpu_h(3), 0]
    assert b["lost_work_gpu_hours"] == gpu_h(30)  # never saved: since the run started
    assert [b[p] for p in PHASES] == [0, gpu_h(1), gpu_h(10), gpu_h(4), 0]
    assert [c[p] for p in PHASES] == [gpu_h(1), 0, 0, 0, gpu_h(29)]
    assert [d[p] for p in PHASES] == [0, gpu_h(1), 0, gpu_h(19), 0] and d["still_down"] == 1


def test_the_phases_add_up_to_the_lost_gpu_hours(report: Report) -> None:
    rows = _by_category(report)
    for row in rows.values():
        parts = row["lost_work_gpu_hours"] + sum(row[p] for p in PHASES)
        assert parts == pytest.approx(row["lost_gpu_hours"], abs=2e-3), row["category"]
    everything = rows["(all)"]
    assert everything["incidents"] == 4 and everything["still_down"] == 1
    assert everything["human_repair_gpu_hours"] == gpu_h(29)
    assert report.sections["lost_phases"][-1]["category"] == "(all)"


def test_the_section_says_what_the_archive_cannot_measure(report: Report) -> None:
    [section] = [s for s in SECTIONS if s.key == "lost_phases"]
    assert section.title == "Where the lost hours went"
    assert "reload" in section.note and "cannot" in section.note
    out = io.StringIO()
    render_report(report, Console(file=out, width=250))
    text = out.getvalue()
    assert "Where the lost hours went" in text and "reload" in text
    assert report.to_json()["sections"]["lost_phases"]["note"] == section.note
