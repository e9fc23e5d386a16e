"""The on-call views after replaying the public xid79_multi_node scenario through the real pipeline."""

from __future__ import annotations

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
    with Archive.open(settings.archive_url) as archive:
        data = status_data(archive)
    assert [(i["job"], i["category"]) for i in data["open_incidents"]] == [("pt-70b", "gpu_off_bus")]
    assert [(g["node"], g["state"]) for g in data["quarantined_gpus"]] == [("n03", "quarantined")]
    assert {s["source"] for s in data["sources"]} >= {"kernel", "nvml", "scheduler", "trainer"}
    assert data["dead_letters"] == 0


def test_incident_story_has_signals_decisions_and_commands(replayed: tuple[Settings, Run]) -> None:
    settings, run = replayed
    inc_id = run.contract()["incidents"][0]["id"]
    with Archive.open(settings.archive_url) as archive:
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
    assert cli(["timeline", "pt-70b", "--json", "--html", str(tmp_path / "t.html")]) == 0
    story = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert story["incident"]["job"] == "pt-70b"
    assert (tmp_path / "t.html").read_text().count('class="mark"') == len(story["timeline"])
    assert cli(["incident", "inc-does-not-exist"]) == 1
    assert "faultline status" in capsys.readouterr().err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (deploy/local/setup.sh installs it)")
def test_html_timeline_renders_every_entry_in_headless_chromium(replayed: tuple[Settings, Run],
                                                                 tmp_path: Path) -> None:
    settings, run = replayed
    with Archive.open(settings.archive_url) as archive:
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
