"""The figures of RELIABILITY.md row 14 (issue #26): one node's clock skewed on a healthy fleet, and its real outage.

150 seeded skews (one of 4 nodes, 1 s..1 h ahead or behind, jumping for a window or drifting) must open nothing;
60 real outages of the skewed node during its skew must each open ``node_down`` within the bound of
``tests/correlators/test_clock.py``. Not a test (the test file draws a dozen of each): it prints what it measured.
Run from the repository root, about 5 minutes here::

    .venv/bin/python tests/correlators/measure_clock.py
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from datetime import datetime

sys.path[:0] = [".", "tests/correlators"]

from faultline.outcome import decide_offline  # noqa: E402
from tests.correlators.test_clock import NODES, T0, bound, fleet, healthy, judged, offset_of  # noqa: E402
from tests.harness.skew import restamp  # noqa: E402

Skew = tuple[str, str, float, float, float, float]


def draw(rng: random.Random) -> Skew:
    """(node, jump or drift, size 1 s..1 h log-uniform, ahead or behind, start, length): as the test's strategy."""
    return (rng.choice(NODES), rng.choice(["jump", "drift"]), math.exp(rng.uniform(0, math.log(3600))),
            rng.choice([1.0, -1.0]), rng.uniform(60, 900), rng.uniform(5, 600))


def main(seed: int = 26) -> None:
    rng = random.Random(seed)
    base = healthy()
    opened = 0
    for _ in range(150):
        node, mode, size, sign, start, length = skew = draw(rng)
        out = decide_offline(restamp(base, node, offset_of(mode, start, length, sign * size)))
        if out["incidents"] or out["commands"]:
            opened += 1
            print("opened", skew, [i["category"] for i in out["incidents"]][:2])
    print(f"healthy: {opened} of 150 skews opened something")
    delays = []
    for _ in range(60):
        node, mode, size, sign, start, length = skew = draw(rng)
        at_s = start + rng.random() * length
        plain = fleet(*NODES, duration=at_s + 400).job("pt", list(NODES), interval=None).silence(at_s, node).lines()
        true_ts = [(datetime.fromisoformat(json.loads(x)["ts"]) - T0).total_seconds() for x in plain]
        found = [t for t, i in judged(restamp(plain, node, offset_of(mode, start, length, sign * size)), true_ts)
                 if i.category == "node_down" and i.culprit.node == node]
        if found:
            delays.append(found[0] - at_s)
        else:
            print("missed", skew)
    print(f"outages: {len(delays)} of 60 found; node_down after the outage: median {statistics.median(delays):.0f} s, "
          f"max {max(delays):.0f} s (bound {bound():.0f} s)")


if __name__ == "__main__":
    main()
