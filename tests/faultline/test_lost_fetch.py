"""A record the consumer fetched but never handed over is judged anyway, even the last one of a capture.

Faust can lose a fetched batch around a rebalance while its consumer's position moves past it. One lost
in the middle of a partition is caught up from the log when the next record comes; one lost at the end
came back only when something more was written -- a successor that took a partition over just as a
capture's end marker arrived sat idle (this test's ancestor, the snapshot takeover test, timed out so).
Here the successor's consumer loses that end marker on purpose (tests/faultline/lossy_worker.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.settings import Settings
from faultline import pipeline
from faultline.pipeline import CorrelatorWorker, end_marker, publish_capture, wait_for_end
from producers.delivery import EventPublisher
from streams.topics import correlator_app_id, topic_name
from tests.faultline.takeover import assert_decided_as_offline, committed_offset
from tests.harness.shared import needs_shared, scenario

SCENARIO = scenario("xid79_multi_node")
LOSSY = Path(__file__).with_name("lossy_worker.py")

pytestmark = [pytest.mark.broker, needs_shared(SCENARIO)]


def test_an_end_marker_the_consumer_lost_is_fetched_again_and_judged(
        kafka_bootstrap: str, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name, snapshot_every_events=0)
    conf = settings.kafka_config(kafka_bootstrap)
    ns = f"{unique_name}.replay-lost"  # a capture ends (end_of_capture) only in a replay namespace
    create_namespace_topics(conf, ns, partitions=1)
    lines = SCENARIO.read_bytes().splitlines()
    try:
        pub = EventPublisher(conf, ns)
        n, events, _, last = publish_capture(pub, lines)
        pub.flush()
        first = CorrelatorWorker(settings, kafka_bootstrap, ns, name="first")
        deadline = time.monotonic() + 120
        while committed_offset(conf, correlator_app_id(ns), topic_name(ns, "events")) < events:
            assert time.monotonic() < deadline and first.alive(), first.tail()
            time.sleep(0.3)
        first.stop()  # every event judged and committed; it leaves the group

        pub.publish([end_marker(n, last)])
        pub.flush()
        popen = subprocess.Popen

        def lossy(argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
            assert argv[1:3] == ["-m", "correlators.app"]
            return popen([sys.executable, str(LOSSY), *argv[3:]], **kw)

        monkeypatch.setattr(pipeline.subprocess, "Popen", lossy)
        successor = CorrelatorWorker(settings, kafka_bootstrap, ns, name="successor")
        t0 = time.monotonic()
        try:
            wait_for_end(conf, ns, successor, timeout=90)
        finally:
            successor.stop()
        text = successor.log_text()
        assert f"test: lost the events record at offset {events} of partition 0" in text, text[-3000:]
        found = re.search(rf"handed over nothing past {events - 1} for (\d+)s; fetching offsets {events}-{events} "
                          "again", text)
        assert found, text[-3000:]
        assert_decided_as_offline(conf, ns, lines)
        print(json.dumps({"events": events, "lost": text.count("test: lost the events record"),
                          "quiet_before_refetch_s": int(found.group(1)),
                          "successor_start_to_end_marker_s": round(time.monotonic() - t0, 1)}))
    finally:
        delete_namespace_topics(conf, ns)
