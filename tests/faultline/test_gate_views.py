"""The on-call views say why a restart waited and what it left out (in-process engine, a real chDB archive)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from correlators.engine import Correlator
from correlators.policy import load_policy
from faultline.operator_views import incident_data, print_incident
from faultline.timeline_html import render_timeline
from producers.capture.screen import Accepted, CaptureScreen
from sinks.archive.store import Archive
from streams.decisions import Command, Incident
from tests.correlators.builder import Capture


def _archived(cap: Capture, url: str) -> str:
    """Run the capture through the engine and archive what it saw and decided; the job's incident id."""
    engine = Correlator(load_policy())
    events = [e for v in CaptureScreen().screen(x.encode() for x in cap.lines()) if isinstance(v, Accepted)
              for e in v.events]
    decided = [d for e in events for d in engine.process(e)] + engine.finish()
    with Archive.open(url) as archive:
        archive.write_events(events)
        archive.write_incidents([d for d in decided if isinstance(d, Incident)])
        archive.write_commands([d for d in decided if isinstance(d, Command)])
    return next(d.id for d in decided if isinstance(d, Incident) and d.job == "pt")


def _views(cap: Capture, tmp_path: Path) -> tuple[dict, str, str]:  # type: ignore[type-arg]
    url = f"chdb://{tmp_path / 'archive'}"
    inc_id = _archived(cap, url)
    with Archive.open(url) as archive:
        data = incident_data(archive, inc_id)
    assert data is not None
    out = io.StringIO()
    print_incident(data, Console(file=out, width=400, color_system=None))
    return data, out.getvalue(), render_timeline(data["incident"], data["timeline"])


def test_the_story_shows_the_wait_and_the_verdict(tmp_path: Path) -> None:
    """n2's agent goes quiet and the ranks waiting for it time out: only its silence can judge it, so a
    version says what the gate waits for, the restart follows the cordon; the CLI and the page both say it."""
    cap = Capture(duration=1500).node("n1").node("n2").node("n3").heartbeats(40).nvml(30).job("pt", ["n1", "n2"])
    cap.silence(900, "n2").bmc_power(930, "n2")
    cap.nccl_timeout(905, "pt", missing=range(8, 16), timeout_ms=5000)
    cap.scheduler(910, "job_failed", job="pt")
    data, text, page = _views(cap, tmp_path)
    waits = [e for e in data["timeline"] if e["entry_type"] == "incident" and "waiting for a verdict on n2" in e["text"]]
    assert waits and "due by" in waits[0]["text"]
    assert "waiting for a verdict on n2" in text and "waiting for a verdict on n2" in page
    assert "restart gate: passed, every piece judged" in text
    commands = [e["what"] for e in data["timeline"] if e["entry_type"] == "command"]
    assert commands.index("cordon_node") < commands.index("restart_job")


def test_the_views_say_what_the_restart_left_out_and_why(tmp_path: Path) -> None:
    cap = Capture(duration=1500).node("n1").node("n2").node("n3").heartbeats(15).nvml(30).job("pt", ["n1", "n2"])
    cap.scheduler(895, "node_not_ready", node="n2")
    cap.crash(900, "pt", rank=3, error="ValueError: expected a batch of 16")
    data, text, page = _views(cap, tmp_path)
    assert data["incident"]["gate"]["excluded"][0]["node"] == "n2"
    assert "restart gate: passed, leaving out n2 (suspect: the scheduler says it is not ready" in text
    restart = next(e for e in data["timeline"] if e["entry_type"] == "command" and e["what"] == "restart_job")
    assert "excluding node n2" in restart["text"] and "leaving out n2 (the scheduler says it is not ready" in restart["text"]
    assert "leaving out n2 (suspect: the scheduler says it is not ready" in page
