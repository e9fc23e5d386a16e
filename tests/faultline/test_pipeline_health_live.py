"""A stage's heartbeat through a real broker: published, archived by the sink, shown up, then down once silent."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from common.heartbeat import HeartbeatPublisher
from common.kafka_admin import create_namespace_topics
from faultline.operator_views import status_data
from faultline.pipeline_health import judge
from sinks.archive.store import Archive
from sinks.archive_sink import ArchiveSink

pytestmark = pytest.mark.broker


def test_a_heartbeat_reaches_status_through_the_sink_and_its_silence_reads_down(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap}
    create_namespace_topics(conf, unique_name, partitions=1)
    with HeartbeatPublisher(conf, unique_name, "worker", version="0.1.0", dev_mode=True, instance="w1",
                            interval_s=0.5, lag=lambda: 4):
        time.sleep(1.2)  # three beats or so
    stopped = datetime.now(UTC)
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive, \
            ArchiveSink(archive, kafka_bootstrap, unique_name, consumer_config=conf) as sink:
        sink.drain(timeout_s=60)
        [row] = status_data(archive)["pipeline"]
        assert (row["stage"], row["instance"], row["version"], row["dev_mode"], row["lag"]) == (
            "worker", "w1", "0.1.0", True, 4)
        assert row["last_seen"] <= stopped
        newest = [dict(row, last_seen=row["last_seen"])]
    assert judge(newest, stopped)[0]["state"] == "up"
    assert judge(newest, stopped + timedelta(seconds=2))[0]["state"] == "down"  # silent past 3 x 0.5 s
    seen = REGISTRY.get_sample_value("faultline_stage_heartbeat_timestamp_seconds",
                                     {"stage": "worker", "stage_instance": "w1"})
    assert seen == pytest.approx(row["last_seen"].timestamp(), abs=0.01)  # StageSilent's series, set by the sink
