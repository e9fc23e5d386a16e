"""Histories for the backtest tests: small captures written here, archived as a live pipeline would have.

:func:`archive_capture` screens a capture into events, writes them to an archive (in an order of
its own, batches re-sent, as a sink may), and optionally the decisions the live correlator made of
them (every incident version and command, as the sink archives them). :func:`archive_order` is a
capture's lines in the order a backtest reads the archive: event time, then event id.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from faultline.outcome import decide_offline
from producers.capture import parse_capture_line
from producers.capture.screen import Accepted, CaptureScreen
from sinks.archive.store import EVENT_COLUMNS, Archive, event_row
from streams.decisions import Command, Incident
from streams.events import Event

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
DAY = 86400.0
BUG = "RuntimeError: CUDA error: an illegal memory access was encountered"


def lines(obs: Iterable[tuple[float, dict[str, Any]]]) -> list[str]:
    """Observations (seconds after T0, fields) as capture lines, in time order."""
    return [json.dumps({"ts": (T0 + timedelta(seconds=t)).isoformat(timespec="milliseconds"), **d})
            for t, d in sorted(obs, key=lambda x: x[0])]


def gpu_uuid(node: str, i: int) -> str:
    return f"GPU-{node}-{i}"


def inventory(node: str, at: float = 0.0) -> tuple[float, dict[str, Any]]:
    return at, {"source": "inventory", "node": node, "rack": "r1", "gpus": [
        {"index": i, "uuid": gpu_uuid(node, i), "pci_bus_id": f"00000000:{0x18 + 16 * i:02X}:00.0",
         "name": "NVIDIA H100 80GB HBM3"} for i in range(8)]}


def job(name: str, node: str, at: float, until: float, every: float = 60.0) -> list[tuple[float, dict[str, Any]]]:
    """``job_started`` on all of ``node``, steps until ``until``, a checkpoint each 10 minutes."""
    out: list[tuple[float, dict[str, Any]]] = [(at, {
        "source": "scheduler", "event": "job_started", "job": name,
        "allocation": [{"node": node, "gpus": list(range(8)), "ranks": list(range(8))}], "world_size": 8,
        "elastic": {"min_gpus": 8, "max_gpus": 8}, "checkpoint": {"dir": f"/ckpt/{name}", "interval_s": 600},
        "gpu_class": "H100-80GB", "owner": "ml", "max_restarts": 5})]
    step, t = 0, at + every
    while t < until:
        step += 10
        out.append((t, {"source": "trainer", "job": name, "rank": 0, "node": node, "event": "step", "step": step,
                        "loss": round(3.0 / (1 + step / 500), 5), "samples_per_s": 400.0}))
        if step % 100 == 0:
            out.append((t + 2, {"source": "trainer", "job": name, "rank": 0, "node": node,
                                "event": "checkpoint_saved", "step": step, "path": f"/ckpt/{name}/{step}",
                                "bytes": 10**9, "seconds": 2.0}))
        t += every
    return out


def crash(name: str, node: str, at: float, rank: int, error: str = BUG) -> list[tuple[float, dict[str, Any]]]:
    return [(at, {"source": "torchelastic", "job": name, "node": node, "rank": rank, "exitcode": 1,
                  "error_file": {"message": {"message": error, "extraInfo": {"py_callstack": "tb", "timestamp": "0"}}}}),
            (at + 3, {"source": "scheduler", "event": "job_failed", "job": name})]


def heartbeats(node: str, since: float, until: float, every: float = 15.0) -> list[tuple[float, dict[str, Any]]]:
    n = int((until - since) // every)
    return [(since + k * every, {"source": "node_agent", "node": node, "alive": True}) for k in range(n)]


def archive_order(capture: list[str]) -> list[str]:
    """The lines in the archive's order: by the (ts, id) of their first event (lines of none dropped)."""
    keyed = [(evs[0].ts, evs[0].id, line) for line in capture if (evs := parse_capture_line(line))]
    return [line for _, _, line in sorted(keyed, key=lambda k: (k[0], k[1]))]


def events_of(capture: list[str]) -> list[Event]:
    return [e for v in CaptureScreen().screen(x.encode() for x in capture) if isinstance(v, Accepted)
            for e in v.events]


def archive_capture(archive: Archive, capture: list[str], *, decisions: bool = True, policy: str | None = None,
                    ingested_at: datetime | None = None, seed: int = 1) -> dict[str, list[dict[str, Any]]]:
    """Archive the capture's events (shuffled, in batches, one batch sent twice) and, with ``decisions``,
    what the correlator decided of them (every version); the contract JSON of those decisions."""
    events = events_of(capture)
    shuffled = list(events)
    random.Random(seed).shuffle(shuffled)
    batches = [shuffled[k:k + 997] for k in range(0, len(shuffled), 997)]
    for batch in batches + batches[:1]:
        if ingested_at is None:
            archive.write_events(batch)
        else:
            archive.client.insert("events", [(*event_row(e), ingested_at) for e in batch],
                                  column_names=[*EVENT_COLUMNS, "ingested_at"])
    incidents: list[Incident] = []
    commands: list[Command] = []

    def keep(ds: list[Incident | Command]) -> None:
        for d in ds:
            (incidents if isinstance(d, Incident) else commands).append(d)  # type: ignore[arg-type]

    out = decide_offline(capture, policy, on_decisions=keep)
    if decisions:
        archive.write_incidents(incidents)
        archive.write_commands(commands)
    return out
