"""What a correlator state snapshot costs: size, capturing the state on the event loop, sealing, restoring.

``python -m faultline.bench.snapshot_cost [--nodes 64 --hours 1]`` measures the biggest public scenarios and
a simulated fleet (:mod:`faultline.simulate`) large enough to fill the engine's id window, and the
rate a takeover replays events at (decode and judge, as ``correlators.rebuild.rebuild`` does, without
the broker). Figures for RELIABILITY.md and the takeover line of ``faultline topics plan``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from correlators.engine import Correlator
from correlators.partitions import PartitionState
from correlators.policy import load_policy
from correlators.snapshots import capture_engines, open_snapshot, policy_fingerprint, restore, seal
from faultline.simulate import Fleet
from producers.capture.screen import Accepted, CaptureScreen
from streams.events import Event

__all__ = ["measure", "main"]

SCENARIOS = Path(__file__).resolve().parents[3] / "shared" / "scenarios"
POLICY = load_policy(None)
KEY = b"bench-key-0123456789abcdef012345"


def _best(fn: Callable[[], object], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _records(lines: list[bytes]) -> list[bytes]:
    """The events of ``lines`` as JSON, the way they sit in the events topic."""
    out: list[bytes] = []
    for verdict in CaptureScreen().screen(lines):
        if isinstance(verdict, Accepted):
            out += [e.model_dump_json().encode() for e in verdict.events]
    return out


def measure(name: str, records: list[bytes]) -> str:
    def fresh() -> PartitionState:
        return PartitionState(0, lambda: Correlator(POLICY), "default")

    state = fresh()
    t0 = time.perf_counter()
    for i, raw in enumerate(records):
        state.judge(i, None, Event.model_validate_json(raw))
    replay_s = time.perf_counter() - t0
    fingerprint = policy_fingerprint(POLICY)
    position, cells, body = capture_engines(state)
    capture_s = _best(lambda: capture_engines(state))
    blob = seal(0, position, cells, body, fingerprint, KEY)
    seal_s = _best(lambda: seal(0, position, cells, body, fingerprint, KEY))
    restore_s = _best(lambda: restore(fresh(), open_snapshot(blob, 0, fingerprint, KEY)))
    return (f"{name}: {len(records):,} events replayed (decode + judge) at {len(records) / replay_s:,.0f}/s; "
            f"snapshot {len(body):,} B as JSON, {len(blob):,} B sealed; capturing on the loop "
            f"{capture_s * 1000:.1f} ms, sealing {seal_s * 1000:.1f} ms, restoring {restore_s * 1000:.1f} ms "
            f"(a replay of those events: {replay_s * 1000:,.0f} ms)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64, help="simulated fleet size (8 GPUs each)")
    ap.add_argument("--hours", type=float, default=1.0, help="simulated fleet time")
    args = ap.parse_args(argv)
    for stem in ("nccl_network_timeout", "xid79_multi_node"):
        path = SCENARIOS / f"{stem}.jsonl"
        if path.is_file():
            print(measure(stem, _records(path.read_bytes().splitlines())))
    fleet = Fleet(nodes=args.nodes, duration_s=args.hours * 3600)
    print(measure(f"simulated fleet of {args.nodes} nodes, {args.hours:g} h",
                  _records([line.encode() for line in fleet.lines()])))


if __name__ == "__main__":
    main()
