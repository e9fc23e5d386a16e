"""The agent's spool killed with SIGKILL -- and then hit by a simulated power cut -- at seeded random points.

A child process (:mod:`tests.producers.spool_child`) publishes seeded batches of events through
the spooling publisher to the real broker, and writes down the ids of each batch once
``publish`` has returned: what the agent was told is stored. At a point drawn from the seed it
is SIGKILLed -- with records on disk, in the producer, acknowledged by the broker but not yet
recorded in the cursor. In the ``power-cut`` variant the spool directory then loses what a
power cut may take (:mod:`tests.harness.power_cut`: everything past each file's last completed
sync, torn, zeroed or garbled; files and renames never synced into their directory). A new
publisher then starts on the spool, publishes a few more events and flushes. On the topic,
counted per id:

- every event the child was told was stored is there **exactly once** (none lost to the crash
  or the cut, none sent twice by the restart);
- nothing is there that was never published, and every record is byte-identical to the event
  published (a torn or garbled record is never delivered);
- the events published after the restart are there once too (a torn tail left in place would
  swallow the first of them).

Figures are printed (run with ``-s``); seeds are in the test ids (``FAULTLINE_FAULT_SEEDS=N``
re-runs one, ``-m slow`` runs the soak's many).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.kafka_reader import read_topic
from producers.spool import SpoolingPublisher
from streams.events import Event
from streams.topics import topic_name
from tests.harness.copies import Copies
from tests.harness.power_cut import cut_power
from tests.harness.seeds import seed_params
from tests.producers.spool_child import SEGMENT_BYTES, event

pytestmark = [pytest.mark.broker, pytest.mark.reliability]

REPO = Path(__file__).resolve().parents[2]
MAX_BATCH = 25  # spool_child's largest batch: at most this many records were spooled but not acknowledged
AFTER = 50  # events published by the restarted publisher


def _delivered(conf: dict[str, str], namespace: str) -> int:
    """Records on the events topic now (0 while the new topic has no leader yet)."""
    c = Consumer({**conf, "group.id": "probe", "enable.auto.commit": False})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic_name(namespace, "events"), 0), timeout=10)[1])
    except KafkaException:
        return 0
    finally:
        c.close()


def _acked(path: Path) -> list[str]:
    """Ids the child wrote down as stored (a line cut short by the kill does not count)."""
    text = path.read_text() if path.exists() else ""
    return text.splitlines()[: text.count("\n")]


@pytest.mark.parametrize("mode", ["kill", "power-cut"])
@pytest.mark.parametrize("seed", seed_params())
def test_spool_killed_at_a_random_point_delivers_every_stored_record_exactly_once(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path, seed: int, mode: str) -> None:
    rng = random.Random(f"{seed}-{mode}")
    ctx = f"[seed={seed} {mode}] "
    conf = {"bootstrap.servers": kafka_bootstrap}
    create_namespace_topics(conf, unique_name, partitions=1)
    spool, acks, journal = tmp_path / "spool", tmp_path / "acks", tmp_path / "syncs.jsonl"
    # kill: SIGKILL from outside once the broker holds a seeded number of the events (so some are
    # delivered and unrecorded); power-cut: the child kills itself inside a seeded data sync, its
    # last batch written but not yet synced, and then the cut takes the unsynced bytes.
    deliver_first = rng.randint(100, 2000)
    crash_at = rng.randint(40, 250) if mode == "power-cut" else 0
    log = (tmp_path / "child.log").open("wb")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.producers.spool_child", str(spool), kafka_bootstrap, unique_name, str(seed),
         str(acks), str(journal), str(crash_at)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while child.poll() is None and (_delivered(conf, unique_name) < deliver_first if mode == "kill"
                                        else len(_acked(acks)) < 5000):  # a spool that never syncs: kill it here
            assert time.monotonic() < deadline, f"{ctx}the child delivered {_delivered(conf, unique_name)} in 120 s"
            time.sleep(0.01)
        if mode == "kill":
            time.sleep(rng.random() * 0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        assert child.returncode == -signal.SIGKILL, ctx + (tmp_path / "child.log").read_text()[-3000:]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
        log.close()
    delivered_at_kill = _delivered(conf, unique_name)

    stored = _acked(acks)
    assert stored == [event(i).id for i in range(len(stored))], ctx + "the child stores events in order"
    left = sorted(p.name for p in spool.iterdir())
    cut = cut_power(spool, journal, rng) if mode == "power-cut" else None

    try:
        pub = SpoolingPublisher(conf, unique_name, spool, max_bytes=64 << 20, segment_bytes=SEGMENT_BYTES,
                                max_inflight=100, retry_backoff_s=(0.1, 0.5))
        torn = pub.spool.torn
        after = [event(10_000_000 + i) for i in range(AFTER)]
        pub.publish(after)
        assert pub.flush(90), f"{ctx}{pub.backlog()} records not delivered after the restart"
        readback = pub.readback.outcome if pub.readback else "not needed"
        already, resent, dropped = pub.already_delivered, pub.sent - AFTER, pub.dropped
        pub.close()

        raw = list(read_topic(conf, topic_name(unique_name, "events"), timeout=60))
    finally:
        delete_namespace_topics(conf, unique_name)
    copies = Copies.of("events", raw, lambda v: Event.model_validate_json(v).id)
    possible = {event(i).id: event(i) for i in range(len(stored) + MAX_BATCH)}
    possible |= {e.id: e for e in after}
    unstored = copies.ids - set(stored) - {e.id for e in after}
    # Stored before the crash, or published after it: exactly once each.
    copies.assert_each_once([*stored, *(e.id for e in after)] + sorted(map(str, unstored)), ctx)
    # The only others: the one batch being spooled when the kill came (it may have made it), once, whole.
    assert unstored <= set(possible), f"{ctx}records that were never published: {sorted(map(str, unstored))[:5]}"
    for value in raw:
        e = Event.model_validate_json(value)
        assert value == possible[e.id].model_dump_json().encode(), f"{ctx}{e.id} arrived altered"
    assert dropped == 0, f"{ctx}{dropped} records dropped"
    print(f"\nspool {mode} [seed={seed}]: stored={len(stored)} on_topic_at_kill={delivered_at_kill} "
          f"crash_in_sync={crash_at or '-'} files={len(left)} "
          f"{cut or ''} torn_bytes_cut_at_start={torn} read_back=({readback}) already_delivered={already} "
          f"resent={resent} unstored_delivered={len(unstored)} after_restart={AFTER} on_topic={len(raw)} lost=0 "
          f"twice=0")
