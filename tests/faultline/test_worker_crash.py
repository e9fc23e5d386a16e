"""A correlator worker killed with SIGKILL mid-stream and started again decides as if nothing happened."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from faultline.outcome import collate, decide_offline
from faultline.pipeline import CorrelatorWorker, archive, collect, end_marker, publish_capture, wait_for_end
from faultline.settings import Settings
from faultline.topic_io import create_namespace_topics, delete_namespace_topics, read_topic
from producers.delivery import EventPublisher
from sinks.archive.store import Archive
from streams.decisions import Command, Incident
from streams.topics import topic_name

SCENARIO = Path(__file__).resolve().parents[3] / "shared" / "scenarios" / "xid79_multi_node.jsonl"

pytestmark = [pytest.mark.broker,
              pytest.mark.skipif(not SCENARIO.is_file(), reason="shared scenarios not present")]


def _committed(conf: dict[str, Any], group: str, topic: str) -> int:
    c = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        c.close()


def test_sigkill_mid_stream_then_restart_gives_the_same_decisions(kafka_bootstrap: str, tmp_path: Path,
                                                                   unique_name: str) -> None:
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name,
                        archive=f"chdb://{tmp_path / 'archive'}")
    conf = settings.kafka_config(kafka_bootstrap)
    ns = f"{unique_name}.crash"
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
                   and _committed(conf, f"faultline-correlator.{ns}", topic_name(ns, "events")) > 0):
            assert time.monotonic() < deadline and first.alive(), first.tail()
            time.sleep(0.2)
        os.killpg(first.proc.pid, signal.SIGKILL)  # mid-stream: the incident is open, decisions pending
        first.proc.wait(10)
        first.stop()

        pub.publish([end_marker(n, last)])
        pub.flush()
        second = CorrelatorWorker(settings, kafka_bootstrap, ns)
        try:
            wait_for_end(conf, ns, second, timeout=120)
        finally:
            second.stop()
        assert "rebuilt state from" in second.log_text()

        incidents, commands = collect(conf, ns)
        got = collate(incidents, commands)
        want = decide_offline(lines)
        assert [(i["id"], i["category"], i["state"]) for i in got["incidents"]] == \
               [(i["id"], i["category"], i["state"]) for i in want["incidents"]]
        assert [c["id"] for c in got["commands"]] == [c["id"] for c in want["commands"]]
        # Nothing decided twice under a different id: every record on the topic is one of those.
        assert {c.id for c in commands} == {c["id"] for c in want["commands"]}
        assert all(isinstance(i, Incident) for i in incidents) and all(isinstance(c, Command) for c in commands)

        # The archive holds what an uninterrupted run archives: every event once, the same decisions.
        archive(settings, conf, ns)
        with Archive.open(settings.archive_url) as store:
            assert store.count("events") == n_events + 1  # and the end marker
            # (the topic's order is checked above; the archive orders by issue time, ties by id)
            assert sorted(c["id"] for c in store.commands()) == sorted(c["id"] for c in want["commands"])
            assert sorted((i["id"], i["state"]) for i in store.latest_incidents()) == \
                   sorted((i["id"], i["state"]) for i in want["incidents"])
    finally:
        delete_namespace_topics(conf, ns)
