"""The operator's view while it runs: `status`, `incident`, `timeline` and `report` while `sink run` writes.

Everything here is a real process on the default embedded archive: ``faultline sink run`` owns the
chDB directory and keeps archiving a stream of heartbeats, and each view is a ``faultline``
command of its own that reads through the sink (no ClickHouse server anywhere).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pydantic import BaseModel

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.settings import REPO_ROOT, Settings
from producers.delivery import EventPublisher
from sinks.archive.store import Archive
from streams.decisions import Culprit, Incident
from streams.events import AgentHeartbeat, Event
from streams.topics import topic_name
from tests.sinks.records import at, sample_records

pytestmark = pytest.mark.broker


class Pipeline:
    """A namespace with a `faultline sink run` process, and a thread that keeps publishing heartbeats."""

    def __init__(self, kafka: str, namespace: str, data_dir: Path) -> None:
        self.settings = Settings(kafka=kafka, namespace=namespace, data_dir=data_dir,
                                 archive=f"chdb://{data_dir / 'archive'}")
        self.conf = self.settings.kafka_config(kafka)
        self.env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "FAULTLINE_KAFKA": kafka,
                    "FAULTLINE_NAMESPACE": namespace, "FAULTLINE_ARCHIVE": self.settings.archive_url,
                    "FAULTLINE_DATA_DIR": str(data_dir)}
        self.sink: subprocess.Popen[bytes] | None = None
        self.sink_log = data_dir / "sink.log"
        self.published = 0
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeats, daemon=True)

    def start_sink(self) -> None:
        with self.sink_log.open("ab") as log:  # a file, not a pipe nobody reads while the sink runs
            self.sink = subprocess.Popen([sys.executable, "-m", "faultline.cli", "sink", "run"], cwd=REPO_ROOT,
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def publish(self, suffix: str, records: list[BaseModel]) -> None:
        """Records onto a topic, keyed as the pipeline keys them (some topics are compacted)."""
        failed: list[str] = []
        producer = Producer(self.conf)
        for i, r in enumerate(records):
            key = str(getattr(r, "id", None) or getattr(r, "command", None) or i)
            producer.produce(topic_name(self.settings.namespace, suffix), key=key.encode(),
                             value=r.model_dump_json().encode(),
                             on_delivery=lambda err, _msg: failed.append(str(err)) if err else None)
        assert producer.flush(30) == 0 and not failed, failed

    def _heartbeats(self) -> None:
        pub = EventPublisher(self.conf, self.settings.namespace)
        while not self._stop.wait(0.05):
            pub.publish([Event(id=f"live-hb-{self.published}", ts=datetime.now(UTC), source="node_agent",
                               node=f"n{self.published % 16}", body=AgentHeartbeat())])
            pub.flush()
            self.published += 1

    def cli(self, *args: str, check: bool = True) -> Any:
        """Run ``faultline ARGS --json`` as a process of its own; its JSON (a list for several lines).

        Without ``check`` a failing command gives None (for waiting until it succeeds).
        """
        done = subprocess.run([sys.executable, "-m", "faultline.cli", *args, "--json"], cwd=REPO_ROOT, env=self.env,
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0 and not check:
            return None
        assert done.returncode == 0, f"faultline {' '.join(args)}: {done.stderr[-3000:]}"
        docs = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        return docs[0] if len(docs) == 1 else docs

    def incident_resolved(self) -> bool:
        story = self.cli("incident", "inc-1", check=False)
        return story is not None and story["incident"]["state"] == "resolved"

    def sink_said(self) -> str:
        return "; the sink logged:\n" + self.sink_log.read_text(errors="replace")[-3000:]

    def heartbeats_archived(self) -> int:
        sources = {s["source"]: s for s in self.cli("status")["sources"]}
        return int(sources["node_agent"]["events"]) if "node_agent" in sources else 0

    def stop_sink(self) -> None:
        assert self.sink is not None
        self.sink.send_signal(signal.SIGTERM)
        assert self.sink.wait(60) == 0, self.sink_log.read_text(errors="replace")[-3000:]

    def close(self) -> None:
        self._stop.set()
        if self._beat.is_alive():
            self._beat.join(10)
        if self.sink is not None and self.sink.poll() is None:
            self.sink.kill()
            self.sink.wait(10)
        delete_namespace_topics(self.conf, self.settings.namespace)


@pytest.fixture
def pipeline(kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Iterator[Pipeline]:
    create_namespace_topics({"bootstrap.servers": kafka_bootstrap}, unique_name, partitions=1)
    p = Pipeline(kafka_bootstrap, unique_name, tmp_path)
    try:
        yield p
    finally:
        p.close()


def _until(what: str, check: Any, timeout: float = 90, context: Any = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}{context()}"
        time.sleep(0.5)


def test_the_views_read_while_the_sink_writes(pipeline: Pipeline) -> None:
    s = sample_records()
    pipeline.start_sink()
    pipeline.publish("events", list(s.events))
    pipeline.publish("incidents", list(s.incidents))
    pipeline.publish("commands", list(s.commands))
    pipeline.publish("command-results", list(s.results))
    pipeline._beat.start()
    _until("the sink to archive the incident", pipeline.incident_resolved, context=pipeline.sink_said)
    before = _until("heartbeats in the archive", pipeline.heartbeats_archived)

    status = pipeline.cli("status")
    assert {"kernel", "trainer", "node_agent"} <= {x["source"] for x in status["sources"]}
    story = pipeline.cli("incident", "inc-1")
    assert {e["entry_type"] for e in story["timeline"]} == {"signal", "incident", "command", "result"}
    timeline = pipeline.cli("timeline", "j1")
    assert timeline["incident"]["id"] == "inc-1" and timeline["timeline"] == story["timeline"]
    report = pipeline.cli("report")
    assert report["sections"]["hardware_share"]["rows"][0]["hardware_incidents"] == 1

    # A replay's rows go into the archive through the running sink, under a namespace of their own.
    replay_ns = f"{pipeline.settings.namespace}.replay-0001"
    with Archive.open(pipeline.settings.archive_url, replay_ns, live=pipeline.settings.namespace) as replay:
        assert replay.role == "reader"
        replay.write_incidents([Incident(id="inc-replay", job="j-replay", category="cuda_oom",
                                         culprit=Culprit(node="n7"), opened_at=at(40), severity="page",
                                         state="open", version=1)])
    assert [i["id"] for i in pipeline.cli("status", "--namespace", replay_ns)["open_incidents"]] == ["inc-replay"]
    assert pipeline.cli("status")["open_incidents"] == []
    causes = {r["category"] for r in pipeline.cli("report")["sections"]["failure_causes"]["rows"]}
    assert causes == {"gpu_off_bus"}

    _until("the sink to go on writing while it is read", lambda: pipeline.heartbeats_archived() > before)
    pipeline.stop_sink()
    assert pipeline.cli("incident", "inc-1")["incident"]["id"] == "inc-1"  # no owner now: opens the directory


def test_a_sink_started_while_a_reader_holds_the_archive_takes_it_over(pipeline: Pipeline) -> None:
    with Archive.open(pipeline.settings.archive_url, pipeline.settings.namespace) as mine:
        assert mine.role == "owner"  # this process holds the directory, as a `faultline report` might
        pipeline.start_sink()
        pipeline._beat.start()
        _until("the sink to archive through this process", lambda: mine.count("events") > 0)
    # This process let go: the sink owns the directory now and keeps archiving; the views read through it.
    first = _until("heartbeats", pipeline.heartbeats_archived)
    _until("the sink to archive after taking over", lambda: pipeline.heartbeats_archived() > first)
    pipeline.stop_sink()
