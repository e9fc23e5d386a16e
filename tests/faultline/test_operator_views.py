"""The on-call views after replaying the public xid79_multi_node scenario through the real pipeline."""

from __future__ import annotations

import html
import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from common.settings import Settings
from faultline.cli import main as cli
from faultline.operator_views import incident_data, status_data
from faultline.pipeline import Run, replay
from faultline.timeline_html import render_timeline
from sinks.archive.store import Archive
from tests.harness.shared import needs_shared, scenario

SCENARIO = scenario("xid79_multi_node")
pytestmark = [pytest.mark.broker,
              needs_shared(SCENARIO)]


@pytest.fixture(scope="module")
def replayed(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Run]:
    d = tmp_path_factory.mktemp("operator")
    settings = Settings(kafka=kafka_bootstrap, data_dir=d, namespace=f"ops-{d.name}", archive=f"chdb://{d}/archive")
    return settings, replay(SCENARIO, settings)


def test_status_shows_the_open_incident_and_the_quarantined_gpu(replayed: tuple[Settings, Run]) -> None:
    settings, run = replayed
    with Archive.open(settings.archive_url, run.archive_namespace) as archive:
        data = status_data(archive)
    assert [(i["job"], i["category"]) for i in data["open_incidents"]] == [("pt-70b", "gpu_off_bus")]
    assert [(g["node"], g["state"]) for g in data["quarantined_gpus"]] == [("n03", "quarantined")]
    assert {s["source"] for s in data["sources"]} >= {"kernel", "nvml", "scheduler", "trainer"}
    assert data["dead_letters"] == 0


def test_incident_story_has_signals_decisions_and_commands(replayed: tuple[Settings, Run]) -> None:
    settings, run = replayed
    inc_id = run.contract()["incidents"][0]["id"]
    with Archive.open(settings.archive_url, run.archive_namespace) as archive:
        story = incident_data(archive, inc_id)
    assert story is not None
    lanes = {e["entry_type"] for e in story["timeline"]}
    assert {"signal", "incident", "command"} <= lanes
    assert any(e["what"] == "xid" for e in story["timeline"])
    commands = [e["what"] for e in story["timeline"] if e["entry_type"] == "command"]
    assert commands.index("quarantine_gpu") < commands.index("restart_job")


def test_cli_json_and_html(replayed: tuple[Settings, Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    settings, run = replayed
    monkeypatch.setenv("FAULTLINE_ARCHIVE", settings.archive_url)
    assert cli(["timeline", "pt-70b", "--json", "--html", str(tmp_path / "t.html"),
                "--namespace", run.archive_namespace]) == 0
    story = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert story["incident"]["job"] == "pt-70b"
    assert (tmp_path / "t.html").read_text().count('class="mark"') == len(story["timeline"])
    assert cli(["incident", "inc-does-not-exist", "--namespace", run.archive_namespace]) == 1
    assert "faultline status" in capsys.readouterr().err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (deploy/local/setup.sh installs it)")
def test_html_timeline_renders_every_entry_in_headless_chromium(replayed: tuple[Settings, Run],
                                                                 tmp_path: Path) -> None:
    settings, run = replayed
    with Archive.open(settings.archive_url, run.archive_namespace) as archive:
        story = incident_data(archive, run.contract()["incidents"][0]["id"])
    assert story is not None
    page = tmp_path / "incident.html"
    page.write_text(render_timeline(story["incident"], story["timeline"]), encoding="utf-8")
    flags = [CHROMIUM or "", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    marks = set(re.findall(r'id="mark-(\d+)"', dom.stdout))
    assert len(marks) == len(story["timeline"]) > 0  # every entry is on the rendered page
    assert dom.stdout.count("<tr class=") == len(story["timeline"])
    shot = Path(__file__).resolve().parents[1] / "artifacts" / "incident-timeline.png"
    shot.parent.mkdir(exist_ok=True)
    out = subprocess.run([*flags, "--window-size=1280,900", f"--screenshot={shot}", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and shot.stat().st_size > 10_000, out.stderr[-2000:]


# --------------------------------------------------------------------------- the story, as a person reads it

_LAYOUT = """<script>
(function () {
  const svg = document.querySelector("svg");
  const box = svg.getBoundingClientRect();
  const marks = [...document.querySelectorAll("g.mark")].map(g => {
    const t = g.querySelector("text.label").getBoundingClientRect();
    const c = g.querySelector("circle").getBoundingClientRect();
    return {lane: g.dataset.lane, what: g.dataset.what, count: +g.dataset.count,
            label: g.querySelector("text.label").textContent,
            cx: c.x + c.width / 2, t: [t.left, t.top, t.right, t.bottom]};
  });
  const out = document.createElement("pre");
  out.id = "layout";
  out.textContent = JSON.stringify({svg: [box.left, box.top, box.right, box.bottom], marks: marks});
  document.body.appendChild(out);
})();
</script></body>"""


def _capture_story() -> dict[str, object]:
    """What the capture itself says happened, read independently of the pipeline."""
    lines = [json.loads(line) for line in SCENARIO.read_text().splitlines() if line.strip()]
    timeouts = [x for x in lines if x["source"] == "framework" and "Watchdog caught collective operation timeout"
                in x["line"]]
    failed = [x for x in lines if x["source"] == "scheduler" and x.get("event") == "job_failed"]
    xids = [x for x in lines if x["source"] == "kernel" and "Xid" in x["line"]]
    return {"nccl_timeouts": len(timeouts), "job_failed": len(failed), "xids": len(xids)}


def _rendered_layout(html_text: str, tmp_path: Path, width: int = 1500) -> dict[str, object]:
    """The page laid out by headless Chromium in a window ``width`` px wide: each mark's lane, label and
    label box on screen."""
    page = tmp_path / f"layout-{width}.html"
    page.write_text(html_text.replace("</body>", _LAYOUT), encoding="utf-8")
    dom = subprocess.run([CHROMIUM or "", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--user-data-dir={tmp_path / 'profile-layout'}", f"--window-size={width},1000",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom.stdout, re.S)
    assert found, "the layout probe did not run"
    return json.loads(html.unescape(found.group(1)))  # type: ignore[no-any-return]


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (deploy/local/setup.sh installs it)")
def test_the_html_timeline_tells_the_whole_story_readably(replayed: tuple[Settings, Run], tmp_path: Path) -> None:
    """Rendered by Chromium: every entry of the story is drawn inside the picture, with a label no other
    label covers; the NCCL timeouts of every rank are one group of the right size; the job's failure and the
    fence-before-restart order are there; a compressed gap says how long it was; the empty results lane
    says why."""
    settings, run = replayed
    expected = _capture_story()
    with Archive.open(settings.archive_url, run.archive_namespace) as archive:
        story = incident_data(archive, run.contract()["incidents"][0]["id"])
    assert story is not None
    page = render_timeline(story["incident"], story["timeline"])
    layout = _rendered_layout(page, tmp_path)
    marks = layout["marks"]
    assert isinstance(marks, list) and len(marks) == len(story["timeline"])
    box = layout["svg"]
    assert isinstance(box, list)
    left, top, right, bottom = (float(v) for v in box)
    for m in marks:
        x0, y0, x1, y1 = m["t"]
        assert left <= x0 and x1 <= right + 1 and top <= y0 and y1 <= bottom, f"label outside the picture: {m}"
    for a, b in itertools.combinations(marks, 2):
        overlap = min(a["t"][2], b["t"][2]) - max(a["t"][0], b["t"][0]) > 1 and \
            min(a["t"][3], b["t"][3]) - max(a["t"][1], b["t"][1]) > 1
        assert not overlap, f"labels overlap: {a['label']!r} and {b['label']!r}"
    by_what = {m["what"]: m for m in marks}
    nccl = by_what.get("nccl_timeout")
    assert nccl is not None, "the NCCL watchdog timeouts are missing from the picture"
    assert nccl["count"] == expected["nccl_timeouts"] and nccl["label"].startswith(f"{expected['nccl_timeouts']} × NCCL")
    assert expected["job_failed"] == 1 and by_what.get("job_ended", {}).get("label") == "job failed"
    assert by_what["xid"]["label"].startswith("XID 79")
    fence = next(m for m in marks if m["what"] == "quarantine_gpu")
    restart = next(m for m in marks if m["what"] == "restart_job")
    assert fence["cx"] < restart["cx"] < nccl["cx"]  # real time: the fence, then the restart, then the timeouts
    assert "quiet</text>" in page and "9 min 30 s quiet" in page  # 03:23:50 -> 03:33:20, compressed and marked
    assert 'id="empty-result"' in page and "no executor" in page
    assert all(t in page for t in ("signals", "commands", "results", "a quiet stretch"))  # the legend
    shot = Path(__file__).resolve().parents[1] / "artifacts" / "incident-timeline-story.png"
    shot.parent.mkdir(exist_ok=True)
    (tmp_path / "story.html").write_text(page, encoding="utf-8")
    out = subprocess.run([CHROMIUM or "", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--user-data-dir={tmp_path / 'profile-shot'}", "--window-size=1460,660",
                          f"--screenshot={shot}", (tmp_path / "story.html").as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and shot.stat().st_size > 10_000, out.stderr[-2000:]


def test_the_terminal_story_groups_repeats_and_speaks_plainly(replayed: tuple[Settings, Run],
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    settings, run = replayed
    monkeypatch.setenv("FAULTLINE_ARCHIVE", settings.archive_url)
    inc_id = run.contract()["incidents"][0]["id"]
    assert cli(["incident", inc_id, "--namespace", run.archive_namespace]) == 0
    out = capsys.readouterr().out
    assert f"{_capture_story()['nccl_timeouts']} × NCCL watchdog timeout" in out and "job failed" in out
    assert '{"kind"' not in out  # sentences, not JSON
    assert "excluding GPU GPU-" in out and "from step 1210" in out
    assert cli(["incident", inc_id, "--namespace", run.archive_namespace, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["incident"]["opened_at"].endswith("Z") and all(e["ts"].endswith("Z") for e in doc["timeline"])


def test_lost_gpu_hours_have_one_definition(replayed: tuple[Settings, Run]) -> None:
    """The incident's figure of lost work and the report's from the archived checkpoints agree; the causes
    add the time the job is down (issue 29)."""
    from sinks.report import build_report

    settings, run = replayed
    with Archive.open(settings.archive_url, run.archive_namespace) as archive:
        [inc] = archive.query("SELECT lost_gpu_hours FROM incidents_latest")
        report = build_report(archive)
        [facts] = archive.query("SELECT lost_work_gpu_hours, lost_down_gpu_hours, lost_gpu_hours, down_until_end "
                                "FROM incident_facts")
    [loss] = [r for r in report.sections["checkpoint_loss"] if r["job"] == "pt-70b"]
    assert inc["lost_gpu_hours"] == pytest.approx(loss["lost_gpu_hours"], abs=0.002)
    assert facts["lost_work_gpu_hours"] == pytest.approx(loss["lost_gpu_hours"], abs=0.002)
    # a replay runs no executor: the job never runs again, so its GPUs are lost until the history ends
    assert facts["down_until_end"] and facts["lost_down_gpu_hours"] > 0
    [cause] = report.sections["failure_causes"]
    assert cause["lost_gpu_hours"] == pytest.approx(facts["lost_gpu_hours"], abs=0.002)
    assert cause["lost_gpu_hours"] == pytest.approx(loss["lost_gpu_hours"] + facts["lost_down_gpu_hours"], abs=0.003)
