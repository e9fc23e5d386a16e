"""A worker SIGKILLed mid-stream; the next one restores its snapshot, replays only the tail, decides the same.

The model is tests/faultline/test_worker_crash.py (a takeover with no snapshot: a rebuild from the
log start); here the first worker snapshots its state every few hundred events, so the second
must install the newest snapshot and rebuild only the events after it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.settings import Settings
from correlators.policy import load_policy
from correlators.snapshot_topic import read_latest_snapshot, snapshot_topic_name
from correlators.snapshots import open_snapshot, policy_fingerprint
from faultline.pipeline import CorrelatorWorker, publish_capture
from producers.delivery import EventPublisher
from streams.topics import correlator_app_id, topic_name
from tests.faultline.takeover import (
    assert_decided_as_offline,
    committed_offset,
    finish_with_successor,
    sigkill,
)
from tests.harness.shared import needs_shared, scenario

SCENARIO = scenario("xid79_multi_node")
KEY = "snapshot-test-key-0123456789abcdef"
EVERY = 400

pytestmark = [pytest.mark.broker,
              needs_shared(SCENARIO)]


def test_takeover_restores_the_snapshot_and_replays_only_the_tail(kafka_bootstrap: str, tmp_path: Path,
                                                                  unique_name: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The workers are child processes: they read these from the environment they inherit.
    monkeypatch.setenv("FAULTLINE_SNAPSHOT_EVERY_EVENTS", str(EVERY))
    monkeypatch.setenv("FAULTLINE_SNAPSHOT_KEY", KEY)
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name)
    conf = settings.kafka_config(kafka_bootstrap)
    ns = f"{unique_name}.replay-snap"  # a capture ends (end_of_capture) only in a replay namespace
    app_id = correlator_app_id(ns)
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
            committed = committed_offset(conf, app_id, topic_name(ns, "events"))
        sigkill(first)

        text = finish_with_successor(settings, kafka_bootstrap, ns, pub, n, last)
        found = re.search(r"restored snapshot of partition 0 at offset (\d+) \(1 cells\); rebuilt (\d+) later "
                          r"events in [\d.]+s", text)
        assert found, text[-3000:]
        restored_at, rebuilt = int(found.group(1)), int(found.group(2))
        assert restored_at >= snapped >= events // 2
        assert rebuilt == events - 1 - restored_at  # exactly the events between the snapshot and the takeover
        assert rebuilt < restored_at  # the snapshot spared more than what was replayed after it
        assert "rebuilt state from" not in text  # no full rebuild

        assert_decided_as_offline(conf, ns, lines)
    finally:
        delete_namespace_topics(conf, ns)
        for fut in AdminClient(conf).delete_topics([snapshots], operation_timeout=30).values():
            try:
                fut.result(timeout=30)
            except Exception:
                pass  # never created: the worker failed before
