"""How long a backtest of a week of a large fleet takes, and whether it is exact.

``python -m faultline.bench.backtest [--nodes 500 --days 7] [--exact]`` simulates a fleet's history
(:mod:`faultline.simulate_history`: jobs of 1 to 32 nodes coming and going, failures of every common
kind, lemon GPUs), screens it into canonical events and archives them in an embedded chDB archive
(in shuffled batches, as a sink may write them), then times ``faultline backtest``'s work -- read the
window back, judge it under a candidate and the current policy in one pass (``--workers 2``: each
policy in a worker process of its own, :mod:`faultline.backtest.parallel`), diff -- the way the
command does it. ``--exact`` also replays the same events in the archive's order through
:func:`~faultline.outcome.decide_offline` under each policy, independently, and checks that both
sides' decisions and the diff are identical. One JSON object on the last line; the figures are for
README.md. (The simulation, screening and archiving are set-up and not timed as the backtest.)
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from correlators.policy import load_policy
from faultline.backtest.diff import compare
from faultline.backtest.judge import in_window
from faultline.backtest.run import backtest
from faultline.backtest.source import from_archive
from faultline.outcome import decide_offline
from faultline.simulate_history import History
from producers.capture import parse_capture_line
from producers.capture.screen import Accepted, CaptureScreen
from sinks.archive.store import Archive

__all__ = ["CANDIDATE", "main", "measure"]

#: The candidate policy: a contained ECC error is the application's, XID 79 a firmware hang, lemons fenced
#: sooner, and an unknown cause is never restarted without a person.
CANDIDATE = "xid:\n  94: software\n  79: gpu_firmware_fault\nlemons:\n  threshold: 1.9\nunknown_cause_auto_restarts: 0\n"


def measure(nodes: int, days: float, exact: bool, seed: int = 20, workers: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": nodes, "days": days, "seed": seed}
    t = time.perf_counter()
    lines = list(History(nodes=nodes, days=days, seed=seed).lines())
    events = [e for v in CaptureScreen().screen(x.encode() for x in lines) if isinstance(v, Accepted) for e in v.events]
    out.update(lines=len(lines), events=len(events), setup_simulate_screen_s=round(time.perf_counter() - t, 1))
    with tempfile.TemporaryDirectory() as d:
        policy = Path(d) / "candidate.yaml"
        policy.write_text(CANDIDATE, encoding="utf-8")
        with Archive.open(f"chdb://{d}/archive") as archive:
            t = time.perf_counter()
            shuffled = list(events)
            random.Random(seed).shuffle(shuffled)
            for k in range(0, len(shuffled), 20_000):
                archive.write_events(shuffled[k:k + 20_000])
            out["setup_archive_s"] = round(time.perf_counter() - t, 1)
            t = time.perf_counter()
            bt = backtest(from_archive(archive, None, None, timedelta(days=1)), load_policy(policy), load_policy(),
                          workers=workers)
            wall = time.perf_counter() - t
        j = bt.to_json()
        out.update(backtest_s=round(wall, 2), read_s=j["timing"]["read_s"], engines_s=j["timing"]["engine_s"],
                   events_judged=bt.judged.events, events_per_s=round(bt.judged.events / wall),
                   workers=bt.workers, events_per_s_per_worker=round(bt.judged.events / wall / bt.workers),
                   incidents={"baseline": j["incidents"]["baseline"], "candidate": j["incidents"]["candidate"]},
                   recategorised=len(j["incidents"]["recategorised"]), commands_by_type=j["commands"]["by_type"],
                   approvals_asked=[j["costs"]["baseline"]["approvals_asked"],
                                    j["costs"]["candidate"]["approvals_asked"]])
        if exact:
            t = time.perf_counter()
            keyed = [(evs[0].ts, evs[0].id, x) for x in lines if (evs := parse_capture_line(x))]
            ordered = [x for _, _, x in sorted(keyed, key=lambda k: (k[0], k[1]))]
            base, cand = decide_offline(ordered), decide_offline(ordered, str(policy))
            out["exact"] = (base == {"incidents": bt.baseline.incidents, "commands": bt.baseline.commands}
                            and cand == {"incidents": bt.candidate.incidents, "commands": bt.candidate.commands}
                            and compare(in_window(base, None, None), in_window(cand, None, None), bt.judged.xids,
                                       timeline=bt.judged.timeline)
                            == bt.diff)
            out["independent_replays_s"] = round(time.perf_counter() - t, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--days", type=float, default=7)
    p.add_argument("--seed", type=int, default=20)
    p.add_argument("--exact", action="store_true", help="also check against independent replays (slower)")
    p.add_argument("--workers", type=int, default=1, help="processes that judge (2: one per policy)")
    args = p.parse_args(argv)
    result = measure(args.nodes, args.days, args.exact, args.seed, args.workers)
    print(json.dumps(result))
    return 0 if result.get("exact", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())
