"""The Kafka broker restarts, twice, while the whole pipeline runs: nothing lost, nothing decided twice.

A broker of the test's own (``LocalKafka``; the shared one is never touched) carries a
capture's events from the agent's durable path (the disk-spooled publisher) to a real Faust
correlator worker process, an archive sink and an executor. Mid-stream the broker is
restarted at once; later, just as the agent hands over the event that makes the first
decisions, it is stopped, stays away for several seconds and starts again. After the end
marker:

- every event is on the events topic exactly once, and in the archive exactly once;
- the decisions (incidents, their categories and states, command ids in order) are those of
  :func:`faultline.outcome.decide_offline` on the same lines;
- no decision id is on its topic with two different contents; the archive holds each
  decision once, and the executor carries each command out once.

"Once" is guaranteed downstream, by id: the archive keeps one row per id (``FINAL``) and the
executor's at-most-once core skips an id it has settled. Exact copies of a decision on the
topic (a producer re-sending after a restart) are therefore allowed; they are counted and
printed with the other figures (run with ``-s``).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from common.kafka_admin import create_namespace_topics
from common.kafka_reader import read_topic
from common.settings import Settings
from deploy.local.kafka import LocalKafka
from faultline.outcome import collate, decide_offline
from faultline.pipeline import CorrelatorWorker, wait_for_end
from sinks.archive import Archive
from sinks.archive_sink import SUFFIXES, ArchiveSink
from sinks.executors.launch import ExecutorOptions, make_executor
from sinks.executors.runner import ExecutorRunner
from streams.decisions import Command, CommandResult, Incident
from streams.events import Event
from streams.topics import topic_name
from tests.harness.shared import needs_shared, scenario
from tests.harness.stages import Agent, Background, Recorder, wait

SCENARIO = scenario("xid79_multi_node")
DEADLINE_S = 240.0  # generous: JVM starts on a shared two-core machine; nothing asserts on time
PAUSE_S = 8.0  # how long the broker stays away the second time

pytestmark = [pytest.mark.broker,
              needs_shared(SCENARIO)]


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalKafka]:
    kafka = LocalKafka(tmp_path / "kafka", heap="256m")
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


# --- observation -----------------------------------------------------------------------------


def _wait(what: str, done: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
    wait(what, done, timeout_s)


def _caught_up(bootstrap: str, group: str, topics: list[str]) -> bool:
    """Whether ``group`` has committed every partition of ``topics`` up to its end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group}.probe"})
    try:
        meta = c.list_topics(timeout=10).topics
        parts = [TopicPartition(t, p) for t in topics for p in meta[t].partitions]
        ends = {(tp.topic, tp.partition): c.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
    finally:
        c.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a dropped client never answers its futures
    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, parts)]).values()
    try:
        committed = {(tp.topic, tp.partition): tp.offset for tp in future.result(timeout=30).topic_partitions}
    except KafkaException:  # the coordinator is still loading the group after a restart: not yet
        return False
    return all(committed.get(key, -1) >= end for key, end in ends.items() if end > 0)


def _group_holds(bootstrap: str, group: str, topic: str) -> bool:
    """Whether a member of ``group`` has partitions of ``topic`` assigned (the group is stable)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_consumer_groups([group]).values()
    try:
        members = future.result(timeout=30).members
    except KafkaException:
        return False
    return any(tp.topic == topic for m in members if m.assignment for tp in m.assignment.topic_partitions)


def _first_decision(lines: list[bytes]) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """The offline decisions, and how many events are judged when the first decision is made."""
    judged: list[bool] = []
    want = decide_offline(lines, on_decisions=lambda ds: judged.append(bool(ds)))
    return want, judged.index(True) + 1


def _by_id(raw: list[bytes], key: Callable[[bytes], object]) -> dict[object, list[bytes]]:
    out: dict[object, list[bytes]] = {}
    for value in raw:
        out.setdefault(key(value), []).append(value)
    return out


# --- the test --------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_broker_restarts_under_the_whole_pipeline_lose_and_double_nothing(
        own_broker: LocalKafka, tmp_path: Path) -> None:
    bootstrap = own_broker.bootstrap
    ns = f"restart-{uuid.uuid4().hex[:8]}.replay-run"  # a capture ends (end_of_capture) only in a replay namespace
    settings = Settings(kafka=bootstrap, data_dir=tmp_path, namespace=ns)
    conf = settings.kafka_config(bootstrap)
    create_namespace_topics(conf, ns, partitions=1)
    lines = SCENARIO.read_bytes().splitlines()
    want, first_decision = _first_decision(lines)

    backend = Recorder()
    executor = ExecutorRunner(make_executor(ExecutorOptions(backend="webhook", state_dir=tmp_path / "executor",
                                                            fleet_size=100), backend), conf, ns)
    archive = Archive.open(f"chdb://{tmp_path / 'archive'}")
    sink = ArchiveSink(archive, bootstrap, ns, consumer_config=conf)
    worker = CorrelatorWorker(settings, bootstrap, ns)
    agent = Agent(conf, ns, tmp_path / "spool", lines, DEADLINE_S)
    stages: list[Background] = []
    took: list[float] = []
    try:
        stages.append(Background("archive-sink", lambda stop: sink.run(stop, max_wait_s=0.2)))
        stages.append(Background("executor", executor.run))
        # Faults start once the worker runs: a broker that goes away while Faust starts up is fatal to it
        # (its supervisor restarts it; tests/faultline/test_worker_crash.py), not what this test is about.
        _wait("the worker holds the events partition",
              lambda: _group_holds(bootstrap, f"faultline-correlator.{ns}", topic_name(ns, "events")) or not worker.alive())
        assert worker.alive(), worker.tail()
        agent.thread.start()

        _wait("a third of the capture", lambda: len(agent.event_ids) >= len(lines) // 3)
        t = time.monotonic()
        own_broker.restart()  # straight back up
        took.append(time.monotonic() - t)
        _wait("the event of the first decision", lambda: len(agent.event_ids) >= first_decision)
        t = time.monotonic()
        own_broker.stop()  # as the worker judges it and publishes its decisions
        time.sleep(PAUSE_S)  # the agent keeps spooling; the worker, sink and executor keep trying
        own_broker.start()
        took.append(time.monotonic() - t)

        agent.thread.join(DEADLINE_S)
        assert agent.error is None and agent.delivered, f"agent: {agent.error!r}, {agent.pub.backlog()} unsent"
        assert agent.pub.dropped == 0 and agent.pub.spooled > 0, "events waited on disk while the broker was away"
        wait_for_end(conf, ns, worker, timeout=DEADLINE_S)
        _wait("the archive sink commits everything",
              lambda: _caught_up(bootstrap, f"{ns}.archive", [topic_name(ns, s) for s in SUFFIXES]))
        # The executor's guarantee is its ledger, not its committed offset (a commit refused while the broker
        # was away is not repeated until the next command): wait until it has answered every command.
        _wait("the executor answers every command", lambda: {c["id"] for c in want["commands"]} <= {
            CommandResult.model_validate_json(v).command
            for v in read_topic(conf, topic_name(ns, "command-results"), timeout=30)})
        assert worker.alive() and not worker.crashed(), worker.tail()
        worker_log = worker.log_text()
        for stage in stages:
            stage.end()
    finally:
        for stage in stages:
            stage.stop.set()
            stage.thread.join(60)
        sink.close()
        executor.close()
        worker.stop()
        try:
            archived = {t: [tuple(r.values()) for r in archive.query(q)] for t, q in (
                ("events", "SELECT id FROM events FINAL"),
                ("commands", "SELECT id FROM commands FINAL"),
                ("incident_versions", "SELECT id, version FROM incident_versions FINAL"))}
        finally:
            archive.close()

    # Every event on the topic exactly once, and in the archive exactly once.
    expected = agent.event_ids
    assert len(set(expected)) == len(expected)
    events = _by_id(list(read_topic(conf, topic_name(ns, "events"), timeout=60)),
                    lambda v: Event.model_validate_json(v).id)
    assert set(events) == set(expected), f"lost: {len(set(expected) - set(events))}"
    event_copies = sum(len(v) - 1 for v in events.values())
    assert event_copies == 0, f"{event_copies} events on the topic more than once"
    assert sorted(archived["events"]) == sorted((i,) for i in expected), "every event archived once"

    # The decisions are those of an uninterrupted, offline run...
    raw_incidents = list(read_topic(conf, topic_name(ns, "incidents"), timeout=60))
    raw_commands = list(read_topic(conf, topic_name(ns, "commands"), timeout=60))
    got = collate([Incident.model_validate_json(v) for v in raw_incidents],
                  [Command.model_validate_json(v) for v in raw_commands])
    assert [(i["id"], i["category"], i["state"]) for i in got["incidents"]] == \
           [(i["id"], i["category"], i["state"]) for i in want["incidents"]]
    assert [c["id"] for c in got["commands"]] == [c["id"] for c in want["commands"]]

    # ...each made once: one content per id on the topics, one row per id in the archive, one execution.
    commands = _by_id(raw_commands, lambda v: Command.model_validate_json(v).id)
    versions = _by_id(raw_incidents, lambda v: (Incident.model_validate_json(v).id,
                                                Incident.model_validate_json(v).version))
    assert all(len(set(v)) == 1 for v in commands.values()), "a command id issued with two contents"
    assert all(len(set(v)) == 1 for v in versions.values()), "an incident version published with two contents"
    assert sorted(archived["commands"]) == sorted((c,) for c in commands)
    assert sorted(archived["incident_versions"]) == sorted(versions)
    runnable = {c["id"] for c in want["commands"] if not c["requires_approval"]}
    assert backend.executed == Counter(runnable), "every command carried out exactly once"
    results = _by_id(list(read_topic(conf, topic_name(ns, "command-results"), timeout=60)),
                     lambda v: CommandResult.model_validate_json(v).command)
    assert set(results) == set(commands), "every command has its result"

    print(f"\nbroker restart: events={len(expected)} restarts=2 (back after {took[0]:.1f}s; "
          f"{took[1]:.1f}s incl. {PAUSE_S:.0f}s away, at event {first_decision}) lost=0 "
          f"event_copies_topic={event_copies} event_copies_archive=0 incidents={len(got['incidents'])} "
          f"commands={len(commands)} executed={sum(backend.executed.values())} "
          f"command_copies_topic={sum(len(v) - 1 for v in commands.values())} "
          f"incident_version_copies_topic={sum(len(v) - 1 for v in versions.values())} "
          f"result_copies_topic={sum(len(v) - 1 for v in results.values())} "
          f"worker_rebuilt={'rebuilt the state' in worker_log}")
