"""The worker's per-record work without Faust or Kafka: decode a batch record, judge its events.

``python -m faultline.bench.judge_path [--nodes 32 --seconds 600 --repeat 1]`` builds the records the
throughput bench publishes (:func:`faultline.bench.runner._fleet_events`, batched as a replay batches
them) and times :func:`streams.batch.decode_record` and :meth:`PartitionState.judge` over them, with
the garbage collector set as a started worker sets it (:func:`common.heap.tune_for_streaming`). Set-up
is not timed. Beside the worker's own rate in ``faultline bench`` it says how much of an event's cost
is the engine and decoding and how much is the worker around them; run it under a sampling profiler
(``py-spy record -f raw -o judge.raw -- python -m faultline.bench.judge_path --repeat 2``) to see where
the engine's share goes.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from common.heap import streaming_gc, tune_for_streaming
from common.settings import Settings
from correlators.engine import Correlator
from correlators.partitions import PartitionState
from correlators.policy import load_policy
from faultline.pipeline import replay_batching
from producers.batching import Batcher, Batching
from streams.batch import decode_record

__all__ = ["measure", "main"]


def measure(nodes: int, seconds: float, repeat: int = 1, freeze: bool = False) -> dict[str, Any]:
    """Events per second of decoding, of judging, and of both, over a simulated fleet's batch records
    (``freeze``: freeze the set-up heap first, as a started worker does; for a process of its own)."""
    from faultline.bench.runner import _fleet_events

    events = _fleet_events(nodes, seconds)
    batcher = Batcher(replay_batching(Settings()) or Batching(max_events=1))
    values = [p.value for e in events for p in batcher.add(e)] + [p.value for p in batcher.flush()]
    policy = load_policy(None)
    if freeze:
        tune_for_streaming()
    decode_s = judge_s = 0.0
    judged = 0
    with streaming_gc():
        for _ in range(repeat):
            state = PartitionState(0, lambda: Correlator(policy), "default")
            for offset, value in enumerate(values):
                t0 = time.perf_counter()
                decoded = decode_record(value)
                t1 = time.perf_counter()
                state.judge(offset, None, decoded.events)
                t2 = time.perf_counter()
                decode_s, judge_s, judged = decode_s + t1 - t0, judge_s + t2 - t1, judged + len(decoded.events)
    return {"records": len(values) * repeat, "events": judged,
            "decode_events_per_s": round(judged / max(decode_s, 1e-9)),
            "judge_events_per_s": round(judged / max(judge_s, 1e-9)),
            "decode_and_judge_events_per_s": round(judged / max(decode_s + judge_s, 1e-9))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=32, help="simulated fleet size (8 GPUs each)")
    ap.add_argument("--seconds", type=float, default=600, help="simulated fleet time")
    ap.add_argument("--repeat", type=int, default=1, help="judge the same records this many times, afresh")
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.nodes, args.seconds, args.repeat, freeze=True)))


if __name__ == "__main__":
    main()
