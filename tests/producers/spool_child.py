"""The process the spool crash test kills: an agent's delivery path publishing seeded batches forever.

``python -m tests.producers.spool_child SPOOL_DIR BOOTSTRAP NAMESPACE SEED ACKS JOURNAL [CRASH_AT]``

Every completed sync goes to ``JOURNAL`` (:func:`tests.harness.power_cut.journal_syncs`; with
``CRASH_AT`` = N the child kills itself in its N-th data sync, before syncing); after
every :meth:`~producers.spool.SpoolingPublisher.publish` returns -- the moment an agent may
forget an observation -- the ids of that batch go to ``ACKS``, one per line. Events are
:func:`event` of 0, 1, 2, ...: the test rebuilds any of them from its number.
"""

from __future__ import annotations

import json
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from producers.capture import parse_capture_line
from producers.spool import SpoolingPublisher
from streams.events import Event
from tests.harness.power_cut import journal_syncs

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
SEGMENT_BYTES = 16 << 10  # small: a run rotates through several segments


def event(i: int) -> Event:
    line = {"ts": (T0 + timedelta(milliseconds=i)).isoformat(), "source": "node_agent", "node": f"n{i % 7}",
            "alive": True}
    [e] = parse_capture_line(json.dumps(line))
    return e


def main(spool_dir: str, bootstrap: str, namespace: str, seed: str, acks: str, journal: str,
         crash_at: str = "0") -> None:
    journal_syncs(Path(journal), int(crash_at))  # before the spool syncs anything (it looks os.fsync up per call)
    rng = random.Random(int(seed))
    pub = SpoolingPublisher({"bootstrap.servers": bootstrap}, namespace, Path(spool_dir), max_bytes=64 << 20,
                            segment_bytes=SEGMENT_BYTES, max_inflight=rng.choice([20, 100, 500]),
                            retry_backoff_s=(0.1, 0.5))
    out = open(acks, "a", buffering=1, encoding="utf-8")
    n = 0
    while True:
        batch = [event(i) for i in range(n, n + rng.randint(1, 25))]
        n += len(batch)
        pub.publish(batch)
        out.write("".join(f"{e.id}\n" for e in batch))
        if rng.random() < 0.3:
            pub.pump()
        time.sleep(rng.random() * 0.006)  # ~ a thousand events a second: deliveries in flight at any moment


if __name__ == "__main__":
    main(*sys.argv[1:])
