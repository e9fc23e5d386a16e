"""A three-broker cluster loses the leaders of the events, changelog and commands partitions, by kill -9.

The whole pipeline runs on :class:`~deploy.local.cluster.LocalKafkaCluster` (three KRaft nodes,
every topic at replication factor 3 with ``min.insync.replicas=2``, producers ``acks=all``): the
agent's spooled publisher trickles a capture whose decisions are spread through it
(:func:`tests.harness.captures.spread_capture`: seven incidents, fifteen commands) to a real Faust
worker process; an executor carries the commands out by counting them. At seeded lines of the
stream (the agent is held there for the moment of the kill, then goes on) the broker leading the
events partition is SIGKILLed, later the one leading the worker's ``emitted`` changelog, then the
one leading the commands partition. Each stays dead for a seeded while, and **the pipeline must go
on meanwhile**: the topic it led is written to again and the worker commits progress; then it
comes back, in sync, before the next. Counted per id:

- every event on the events topic exactly once; nothing lost;
- every incident version and command of the uninterrupted (offline) run published at least once,
  every copy identical, nothing else; the commands in the offline order;
- every command carried out exactly once;
- every topic of the namespace, and the worker's own (the ``emitted`` changelog, the snapshots,
  the assignor's), has three replicas.

A topic with one replica on the killed broker stops whoever writes there until that broker is back:
a changelog at replication factor 1 fails the "pipeline goes on" check at the changelog's kill, and
the replica check. Seeds are in the test ids; figures are printed (``-s``).
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.kafka_reader import read_topic
from common.settings import Settings
from deploy.local.cluster import LocalKafkaCluster
from faultline.outcome import collate, decide_offline
from faultline.pipeline import CorrelatorWorker, wait_for_end
from producers.capture import parse_capture_line
from sinks.executors.launch import ExecutorOptions, make_executor
from sinks.executors.runner import ExecutorRunner
from streams.decisions import Command, CommandResult, Incident
from streams.events import Event
from streams.topics import TOPICS, correlator_app_id, correlator_internal_topics, topic_name
from tests.faultline.takeover import committed_offset
from tests.harness.captures import spread_capture
from tests.harness.copies import Copies
from tests.harness.seeds import seed_params
from tests.harness.stages import Agent, Background, Recorder, wait

pytestmark = [pytest.mark.broker, pytest.mark.reliability]

DEADLINE_S = 240.0  # generous: four JVMs and a worker on a shared two-core machine; nothing asserts on time
PROGRESS_S = 60.0  # how long one dead broker may hold the worker's progress up before the test calls it a stall


class Fault:
    """One broker killed at a line of the stream, kept dead a while (and until the worker moved on), revived."""

    def __init__(self, what: str, topic: str, line: int, hold_s: float) -> None:
        self.what, self.topic, self.line, self.hold_s = what, topic, line, hold_s
        self.broker = -1
        self.at_event = 0
        self.down_s = 0.0
        self.progress: tuple[int, int] = (-1, -1)  # the worker's committed events offset: at the kill, while down
        self.written: tuple[int, int] = (-1, -1)  # the end of the topic: at the kill, while down

    def inject(self, cluster: LocalKafkaCluster, agent: Agent, conf: dict[str, Any], ns: str,
               next_line: int | None) -> None:
        """With the agent held at :attr:`line`: kill the topic's leader, let the agent go on, wait, revive."""
        self.broker = cluster.leader_of(self.topic)
        self.at_event = len(agent.event_ids)
        group, events = correlator_app_id(ns), topic_name(ns, "events")
        before, written = committed_offset(conf, group, events), _end(conf, self.topic)
        t = time.monotonic()
        cluster.kill(self.broker)
        agent.hold_at(next_line)  # events keep coming while the broker is dead
        time.sleep(self.hold_s)
        # One broker of three is gone: the stream must go on -- the topic it led is written to again (the agent
        # keeps publishing; decisions keep coming), and the worker commits its progress.
        def state() -> str:
            ends = {s: _end(conf, topic_name(ns, s)) for s in ("events", "incidents", "commands")}
            return (f"; at the kill: {self.topic} ended at {written}, the worker had committed {before}; now the "
                    f"worker has committed {committed_offset(conf, group, events)}, {self.topic} ends at "
                    f"{_end(conf, self.topic)}, topics end at {ends}; the agent handed {len(agent.event_ids)} "
                    f"events (held at line {agent.held_at or '-'})")

        try:
            wait(f"{self.topic} written to while broker {self.broker}, its leader, is dead",
                 lambda: _end(conf, self.topic) > written, PROGRESS_S, 0.5)
            wait(f"the worker commits progress while broker {self.broker} ({self.what} leader) is dead",
                 lambda: committed_offset(conf, group, events) > max(before, 0), PROGRESS_S, 0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{state()}") from None
        self.progress = (before, committed_offset(conf, group, events))
        self.written = (written, _end(conf, self.topic))
        cluster.revive(self.broker)
        self.down_s = time.monotonic() - t

    def __str__(self) -> str:
        return (f"{self.what} leader (broker {self.broker}) killed at event {self.at_event}, back after "
                f"{self.down_s:.1f}s; meanwhile its topic grew {self.written[0]} -> {self.written[1]}, the worker "
                f"committed {max(self.progress[0], 0)} -> {self.progress[1]}")


def _faults(rng: random.Random, lines: list[bytes], ns: str) -> list[Fault]:
    """The three faults at seeded lines, each far enough before the next that something is written meanwhile to
    the topic whose leader it kills: the agent always writes events; the worker writes its changelog after a
    decision and the commands topic with a command, so a decision (with a command) falls between."""
    due = _decisions_by_line(lines)  # line -> (decisions, of them commands) made once that line is judged
    n, margin = len(lines), 40  # lines past the decision the worker should have judged before the next kill
    plan = [("events", topic_name(ns, "events"), (15, 30), lambda d, c: True),
            ("changelog", f"{correlator_app_id(ns)}-emitted-changelog", (35, 50), lambda d, c: d > 0),
            ("commands", topic_name(ns, "commands"), (55, 75), lambda d, c: c > 0)]
    faults: list[Fault] = []
    earliest = 1
    for what, topic, (lo, hi), writes in plan:
        line = max(earliest, rng.randint(n * lo // 100, n * hi // 100))
        faults.append(Fault(what, topic, line, rng.uniform(1, 3)))
        after = next(k for k in range(line + 1, n + 1) if writes(*due.get(k, (0, 0))))
        earliest = after + margin
    return faults


def _decisions_by_line(lines: list[bytes]) -> dict[int, tuple[int, int]]:
    """For each capture line after which the uninterrupted run decides: (decisions, commands among them)."""
    per_event: list[tuple[int, int]] = []
    decide_offline(lines, on_decisions=lambda ds: per_event.append((len(ds), sum(isinstance(d, Command) for d in ds))))
    out: dict[int, tuple[int, int]] = {}
    judged = 0
    for n, raw in enumerate(lines, 1):
        for _ in parse_capture_line(raw):
            d, c = per_event[judged]
            judged += 1
            if d:
                prev = out.get(n, (0, 0))
                out[n] = (prev[0] + d, prev[1] + c)
    return out


def _end(conf: dict[str, Any], topic: str) -> int:
    """The end offset of ``topic[0]`` now (-1 while it has no leader to ask)."""
    c = Consumer({**conf, "group.id": "probe", "enable.auto.commit": False, "log_level": 0})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1])
    except KafkaException:
        return -1
    finally:
        c.close()


def _replicas(cluster: LocalKafkaCluster, names: list[str]) -> dict[str, int]:
    """The fewest replicas of any partition, per topic (0: the topic does not exist)."""
    meta = cluster.admin().list_topics(timeout=30).topics
    return {n: min((len(p.replicas) for p in meta[n].partitions.values()), default=0) if n in meta else 0
            for n in names}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", seed_params(default=(11,), soak=tuple(range(1000, 1010))))
def test_killing_partition_leaders_of_a_replicated_cluster_loses_and_doubles_nothing(
        kafka_cluster: LocalKafkaCluster, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    bootstrap = kafka_cluster.bootstrap
    ns = f"cluster-{uuid.uuid4().hex[:8]}.replay-run"  # a capture ends (end_of_capture) only in a replay namespace
    settings = Settings(kafka=bootstrap, data_dir=tmp_path, namespace=ns)
    conf = settings.kafka_config(bootstrap)
    create_namespace_topics(conf, ns, partitions=1)
    lines = spread_capture()
    want = decide_offline(lines)
    faults = _faults(rng, lines, ns)
    ctx = f"[seed={seed}] "

    backend = Recorder()
    executor = ExecutorRunner(make_executor(ExecutorOptions(backend="webhook", state_dir=tmp_path / "executor",
                                                            fleet_size=100), backend), conf, ns)
    worker = CorrelatorWorker(settings, bootstrap, ns)
    agent = Agent(conf, ns, tmp_path / "spool", lines, DEADLINE_S, every=20, pause_s=0.1)  # ~200 lines/s
    stages: list[Background] = []
    try:
        stages.append(Background("executor", executor.run))
        wait("the worker holds the events partition",
             lambda: "assigned events partitions [0]" in worker.log_text() or not worker.alive(), DEADLINE_S)
        assert worker.alive(), worker.tail()
        agent.hold_at(faults[0].line)
        agent.thread.start()
        for k, fault in enumerate(faults):
            wait(f"line {fault.line} of the capture", lambda at=fault.line: agent.held_at >= at)
            fault.inject(kafka_cluster, agent, conf, ns, faults[k + 1].line if k + 1 < len(faults) else None)
        agent.thread.join(DEADLINE_S)
        assert agent.error is None and agent.delivered, f"{ctx}agent: {agent.error!r}, {agent.pub.backlog()} unsent"
        wait_for_end(conf, ns, worker, timeout=DEADLINE_S)
        wait("the executor answers every command", lambda: {c["id"] for c in want["commands"]} <= {
            CommandResult.model_validate_json(v).command
            for v in read_topic(conf, topic_name(ns, "command-results"), timeout=30)}, DEADLINE_S)
        assert worker.alive() and not worker.crashed(), worker.tail()
        for stage in stages:
            stage.end()
        internal = correlator_internal_topics(ns)
        replicas = _replicas(kafka_cluster, [topic_name(ns, s) for s in TOPICS] + internal + ["__consumer_offsets"])
        raw_events = list(read_topic(conf, topic_name(ns, "events"), timeout=60))
        raw_incidents = list(read_topic(conf, topic_name(ns, "incidents"), timeout=60))
        raw_commands = list(read_topic(conf, topic_name(ns, "commands"), timeout=60))
    finally:
        for stage in stages:
            stage.stop.set()
            stage.thread.join(60)
        executor.close()
        worker.stop()
        for fault in faults:  # whatever happened, the next test finds the cluster whole
            if fault.broker > 0 and not kafka_cluster.node(fault.broker).is_running():
                kafka_cluster.revive(fault.broker)
        delete_namespace_topics(conf, ns)

    assert replicas == {name: 3 for name in replicas}, f"{ctx}topics with fewer than 3 replicas: " + str(
        {n: r for n, r in replicas.items() if r != 3})
    events = Copies.of("events", raw_events, lambda v: Event.model_validate_json(v).id)
    events.assert_each_once(agent.event_ids, ctx)
    versions = Copies.of("incident versions", raw_incidents,
                         lambda v: (lambda i: (i.id, i.version))(Incident.model_validate_json(v)))
    commands = Copies.of("commands", raw_commands, lambda v: Command.model_validate_json(v).id)
    want_versions = {(i.id, i.version) for i in _offline_versions(lines)}
    versions.assert_at_least_once_identical(want_versions, ctx)
    commands.assert_at_least_once_identical({c["id"] for c in want["commands"]}, ctx)
    got = collate([Incident.model_validate_json(v) for v in raw_incidents],
                  [Command.model_validate_json(v) for v in raw_commands])
    assert [c["id"] for c in got["commands"]] == [c["id"] for c in want["commands"]], ctx + "command order"
    assert [(i["id"], i["state"]) for i in got["incidents"]] == [(i["id"], i["state"]) for i in want["incidents"]]
    runnable = {c["id"] for c in want["commands"] if not c["requires_approval"]}
    Copies.counted("executions", backend.executed).assert_each_once(runnable, ctx)
    print(f"\nreplicated cluster {ctx}: events={len(agent.event_ids)} incidents={len(want['incidents'])} "
          f"versions={len(want_versions)} commands={len(want['commands'])} faults: {'; '.join(map(str, faults))}; "
          f"lost=0 event_copies={events.extra_copies} version_copies={versions.extra_copies} "
          f"command_copies={commands.extra_copies} executed={sum(backend.executed.values())} executed_twice=0 "
          f"replicas={sorted(set(replicas.values()))} worker_rebuilt={'rebuilt state from' in worker.log_text()}")


def _offline_versions(lines: list[bytes]) -> list[Incident]:
    """Every incident version the uninterrupted run publishes."""
    seen: list[Incident] = []
    decide_offline(lines, on_decisions=lambda ds: seen.extend(d for d in ds if isinstance(d, Incident)))
    return seen

