"""What reading the embedded archive through its owner costs, against owning it.

``python -m faultline.bench.archive_reads [--nodes 8 --hours 1 --runs 20]`` fills a chDB archive
with a simulated fleet (:mod:`faultline.simulate`) and a few hundred incidents, starts an owner
process that keeps writing 500-event batches every half second (as ``faultline sink run`` does),
and times the operator views (``status``, ``incident``, ``report``) from this process, which
reads through the owner's endpoint. Then it stops the owner, so that this process owns the
directory itself, and times the same reads directly. It also times whole ``faultline status
--json`` commands (a fresh process each: Python start-up and the archive's open included), once
through the writing owner and once on the bare directory. One JSON object on the last line;
the figures are for README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from faultline.operator_views import incident_data, status_data
from faultline.simulate import Fleet
from producers.capture.screen import Accepted, CaptureScreen
from sinks.archive.store import Archive
from sinks.report import build_report
from streams.decisions import Command, Culprit, Incident, Target
from streams.events import AgentHeartbeat, Event

__all__ = ["main", "measure"]

_T0 = datetime(2026, 4, 22, tzinfo=UTC)


def _fill(archive: Archive, nodes: int, hours: float, incidents: int) -> int:
    fleet = Fleet(nodes=nodes, duration_s=hours * 3600, sample_every_s=10)
    events = [e for v in CaptureScreen().screen(line.encode() for line in fleet.lines())
              if isinstance(v, Accepted) for e in v.events]
    for start in range(0, len(events), 5000):
        archive.write_events(events[start:start + 5000])
    versions, commands = [], []
    for i in range(incidents):
        opened = _T0 + timedelta(minutes=7 * i)
        for v, state in enumerate(("open", "restarting", "resolved"), start=1):
            versions.append(Incident(id=f"inc-{i:04d}", version=v, job=fleet.job, category="gpu_off_bus",
                                     culprit=Culprit(node=fleet.node_name(i % nodes), gpus=[str(i % 8)]),
                                     opened_at=opened, updated_at=opened + timedelta(minutes=v), severity="page",
                                     state=state, summary="bench"))
        commands.append(Command(id=f"cmd-{i:04d}-q", incident=f"inc-{i:04d}", type="quarantine_gpu",
                                target=Target(job=fleet.job, node=fleet.node_name(i % nodes), gpu=str(i % 8)),
                                issued_at=opened))
        commands.append(Command(id=f"cmd-{i:04d}-r", incident=f"inc-{i:04d}", type="restart_job",
                                target=Target(job=fleet.job), issued_at=opened + timedelta(seconds=30)))
    archive.write_incidents(versions)
    archive.write_commands(commands)
    return len(events)


def _own(url: str, nodes: int, hours: float, incidents: int) -> int:
    """The owner: fill, say so, then write a batch every half second until standard input closes."""
    stop = threading.Event()
    with Archive.open(url) as archive:
        n = _fill(archive, nodes, hours, incidents)
        print(f"ready {n}", flush=True)
        def wait_for_eof() -> None:
            sys.stdin.read()
            stop.set()

        threading.Thread(target=wait_for_eof, daemon=True).start()
        batch = 0
        while not stop.wait(0.5):
            now = datetime.now(UTC)
            archive.write_events([Event(id=f"bench-hb-{batch}-{i}", ts=now, source="node_agent", node=f"n{i % 64}",
                                        body=AgentHeartbeat()) for i in range(500)])
            batch += 1
    return 0


def _timed(fn: Callable[[], object], runs: int) -> dict[str, float]:
    fn()  # warm
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"median_ms": round(statistics.median(times), 2), "p90_ms": round(times[int(len(times) * 0.9) - 1], 2)}


def _views(archive: Archive, runs: int) -> dict[str, dict[str, float]]:
    return {"status": _timed(lambda: status_data(archive), runs),
            "incident": _timed(lambda: incident_data(archive, "inc-0007"), runs),
            "report": _timed(lambda: build_report(archive), max(3, runs // 4))}


def _cli_status(url: str, data_dir: str, runs: int) -> dict[str, float]:
    env = {**os.environ, "FAULTLINE_ARCHIVE": url, "FAULTLINE_DATA_DIR": data_dir}

    def once() -> None:
        done = subprocess.run([sys.executable, "-m", "faultline.cli", "status", "--json"], env=env,
                              capture_output=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.decode()[-2000:])

    return _timed(once, runs)


def measure(nodes: int = 8, hours: float = 1, incidents: int = 300, runs: int = 20) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        url = f"chdb://{d}/archive"
        owner = subprocess.Popen([sys.executable, "-m", "faultline.bench.archive_reads", "--own", url, "--nodes",
                                  str(nodes), "--hours", str(hours), "--incidents", str(incidents)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert owner.stdin is not None and owner.stdout is not None
        try:
            events = int(owner.stdout.readline().split()[-1])
            with Archive.open(url) as archive:
                assert archive.role == "reader", archive.role
                through = _views(archive, runs)
                cli_through = _cli_status(url, d, max(3, runs // 4))
                owner.stdin.close()
                owner.wait(60)
                archive.count("events")  # finds the owner gone: this process opens the directory
                assert archive.role == "owner", archive.role
                direct = _views(archive, runs)
            cli_direct = _cli_status(url, d, max(3, runs // 4))
        finally:
            if owner.poll() is None:
                owner.kill()
    return {"events": events, "incidents": incidents, "through_the_writing_owner": through,
            "owning_the_directory": direct, "faultline_status_command": {"through_the_writing_owner": cli_through,
                                                                         "owning_the_directory": cli_direct}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--incidents", type=int, default=300)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--own", metavar="URL", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.own:
        return _own(args.own, args.nodes, args.hours, args.incidents)
    print(json.dumps(measure(args.nodes, args.hours, args.incidents, args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
