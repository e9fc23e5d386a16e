"""A worker SIGKILLed mid-stream; the next one restores its snapshot, replays only the tail, decides the same.

The model is tests/faultline/test_worker_crash.py (a takeover with no snapshot: a rebuild from the
log start); here the first worker snapshots its state every few hundred events, so the second
must install the newest snapshot and rebuild only the events after it.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from correlators.policy import load_policy
from correlators.snapshot_topic import read_latest_snapshot, snapshot_topic_name
from correlators.snapshots import open_snapshot, policy_fingerprint
from faultline.outcome import collate, decide_offline
from faultline.pipeline import CorrelatorWorker, collect, end_marker, publish_capture, wait_for_end
from faultline.settings import Settings
from faultline.topic_io import create_namespace_topics, delete_namespace_topics
from producers.delivery import EventPublisher
from streams.topics import topic_name

SCENARIO = Path(__file__).resolve().parents[3] / "shared" / "scenarios" / "xid79_multi_node.jsonl"
KEY = "snapshot-test-key-0123456789abcdef"
EVERY = 400

pytestmark = [pytest.mark.broker,
              pytest.mark.skipif(not SCENARIO.is_file(), reason="shared scenarios not present")]


def _committed(conf: dict[str, Any], group: str, topic: str) -> int:
    c = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        c.close()


def test_takeover_restores_the_snapshot_and_replays_only_the_tail(kafka_bootstrap: str, tmp_path: Path,
                                                                  unique_name: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The workers are child processes: they read these from the environment they inherit.
    monkeypatch.setenv("FAULTLINE_SNAPSHOT_EVERY_EVENTS", str(EVERY))
    monkeypatch.setenv("FAULTLINE_SNAPSHOT_KEY", KEY)
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name)
    conf = settings.kafka_config(kafka_bootstrap)
    ns = f"{unique_name}.snap"
    app_id = f"faultline-correlator.{ns}"
    snapshots = snapshot_topic_name(app_id)
    fingerprint = policy_fingerprint(load_policy(None))
    create_namespace_topics(conf, ns, partitions=1)
    lines = SCENARIO.read_bytes().splitlines()
    try:
        pub = EventPublisher(conf, ns)
        n, events, _, last = publish_capture(pub, lines)
        pub.flush()

        first = CorrelatorWorker(settings, kafka_bootstrap, ns)
        deadline = time.monotonic() + 120
        # Kill it once it has judged and committed every event and a snapshot covers over half of them:
        # the next one takes over at the end, restores that snapshot and replays exactly the events after it.
        snapped = committed = -1
        while snapped < events // 2 or committed < events:
            assert time.monotonic() < deadline and first.alive(), first.tail()
            time.sleep(0.3)
            try:
                blob = read_latest_snapshot(conf, snapshots, 0, app_id, timeout=5)
            except Exception:  # the topic is not there yet
                continue
            if blob is not None:
                snapped = open_snapshot(blob, 0, fingerprint, KEY.encode()).position
            committed = _committed(conf, app_id, topic_name(ns, "events"))
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait(10)
        first.stop()

        pub.publish([end_marker(n, last)])
        pub.flush()
        second = CorrelatorWorker(settings, kafka_bootstrap, ns)
        try:
            wait_for_end(conf, ns, second, timeout=120)
        finally:
            second.stop()
        text = second.log_text()
        found = re.search(r"restored snapshot of partition 0 at offset (\d+) \(1 cells\); rebuilt (\d+) later "
                          r"events in [\d.]+s", text)
        assert found, text[-3000:]
        restored_at, rebuilt = int(found.group(1)), int(found.group(2))
        assert restored_at >= snapped >= events // 2
        assert rebuilt == events - 1 - restored_at  # exactly the events between the snapshot and the takeover
        assert rebuilt < restored_at  # the snapshot spared more than what was replayed after it
        assert "rebuilt state from" not in text  # no full rebuild

        incidents, commands = collect(conf, ns)
        got = collate(incidents, commands)
        want = decide_offline(lines)
        assert [(i["id"], i["category"], i["state"]) for i in got["incidents"]] == \
               [(i["id"], i["category"], i["state"]) for i in want["incidents"]]
        assert [c["id"] for c in got["commands"]] == [c["id"] for c in want["commands"]]
        assert {c.id for c in commands} == {c["id"] for c in want["commands"]}  # nothing under another id
    finally:
        delete_namespace_topics(conf, ns)
        for fut in AdminClient(conf).delete_topics([snapshots], operation_timeout=30).values():
            try:
                fut.result(timeout=30)
            except Exception:
                pass  # never created: the worker failed before
