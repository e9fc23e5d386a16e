"""A correlator worker killed with SIGKILL mid-stream and started again decides as if nothing happened."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.kafka_reader import read_topic
from common.settings import Settings
from faultline.pipeline import CorrelatorWorker, archive, publish_capture
from producers.delivery import EventPublisher
from sinks.archive.store import Archive
from streams.topics import correlator_app_id, topic_name
from tests.faultline.takeover import (
    assert_decided_as_offline,
    committed_offset,
    finish_with_successor,
    sigkill,
)
from tests.harness.shared import needs_shared, scenario

SCENARIO = scenario("xid79_multi_node")

pytestmark = [pytest.mark.broker,
              needs_shared(SCENARIO)]


def test_sigkill_mid_stream_then_restart_gives_the_same_decisions(kafka_bootstrap: str, tmp_path: Path,
                                                                   unique_name: str) -> None:
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name,
                        archive=f"chdb://{tmp_path / 'archive'}")
    conf = settings.kafka_config(kafka_bootstrap)
    ns = f"{unique_name}.replay-crash"  # a capture ends (end_of_capture) only in a replay namespace
    create_namespace_topics(conf, ns, partitions=1)
    lines = SCENARIO.read_bytes().splitlines()
    try:
        pub = EventPublisher(conf, ns)
        n, n_events, _, last = publish_capture(pub, lines)
        pub.flush()

        first = CorrelatorWorker(settings, kafka_bootstrap, ns)
        deadline = time.monotonic() + 90
        # Kill it once it has published decisions and committed some progress, so the next one must rebuild.
        while not (list(read_topic(conf, topic_name(ns, "incidents"), timeout=5))
                   and committed_offset(conf, correlator_app_id(ns), topic_name(ns, "events")) > 0):
            assert time.monotonic() < deadline and first.alive(), first.tail()
            time.sleep(0.2)
        sigkill(first)  # mid-stream: the incident is open, decisions pending

        log = finish_with_successor(settings, kafka_bootstrap, ns, pub, n, last)
        assert "rebuilt state from" in log
        want = assert_decided_as_offline(conf, ns, lines)

        # The archive holds what an uninterrupted run archives: every event once, the same decisions.
        archive(settings, conf, ns)
        with Archive.open(settings.archive_url, ns) as store:  # the run's namespace: archived apart from the live one
            assert store.count("events") == n_events + 1  # and the end marker
            # (the topic's order is checked above; the archive orders by issue time, ties by id)
            assert sorted(c["id"] for c in store.commands()) == sorted(c["id"] for c in want["commands"])
            assert sorted((i["id"], i["state"]) for i in store.latest_incidents()) == \
                   sorted((i["id"], i["state"]) for i in want["incidents"])
    finally:
        delete_namespace_topics(conf, ns)
