"""Scale-out: correlator workers join, die and rejoin mid-replay; every cell decides as with one worker.

The six public scenarios are six cells of one namespace whose ``events`` topic
has four partitions (a cell's events share one partition: they are keyed by
cell). Each cell's capture is published in six chunks, one per step:

0. worker A alone judges the first chunk;
1. worker B joins while the second chunk streams in (a rebalance: B takes half
   the partitions, A drops them);
2. A and B share the third chunk (B rebuilds what it took from the log first);
3. A is killed with SIGKILL while the fourth chunk streams in, so B takes every
   partition over after the session timeout, re-judging what A had not committed;
4. A comes back (a second rebalance) while the fifth chunk streams in;
5. A and B share the last chunk and the end markers (one per cell).

Then, per cell, the incidents and commands on the topics must be exactly what
the offline correlator decides for that capture alone: the same ids, contents
and command order; nothing decided that no single worker would decide; one
incident per job and cause; a repeated record only ever a byte-identical copy.
The workers' logs must show the takeovers really happened (rebuilds).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from common.kafka_admin import create_namespace_topics, delete_namespace_topics, grow_topic
from common.kafka_reader import read_topic
from common.settings import Settings
from faultline.outcome import collate, decide_offline
from faultline.pipeline import CorrelatorWorker, end_marker, publish_capture
from producers.delivery import EventPublisher
from streams.decisions import Command, Incident, StreamEnd
from streams.topics import topic_name
from tests.harness.shared import needs_shared, scenario_files

PARTITIONS = 4
CHUNKS = 6

pytestmark = [pytest.mark.broker,
              needs_shared(*scenario_files())]


def _chunks(lines: list[bytes], n: int) -> list[list[bytes]]:
    size = -(-len(lines) // n)
    return [lines[i * size:(i + 1) * size] for i in range(n)]


def _ends(conf: dict[str, Any], topic: str) -> dict[int, int]:
    """High watermark of every partition that holds records."""
    c = Consumer({**conf, "group.id": "unused", "enable.auto.commit": False})
    try:
        marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(PARTITIONS)}
    finally:
        c.close()
    return {p: hi for p, (lo, hi) in marks.items() if hi > lo}


def _committed(conf: dict[str, Any], group: str, topic: str) -> dict[int, int]:
    c = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in
                c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
    finally:
        c.close()


class Phases:
    """Publishes chunks and waits until the live workers have judged (committed) them."""

    def __init__(self, conf: dict[str, Any], ns: str) -> None:
        self.conf, self.ns = conf, ns
        self.events = topic_name(ns, "events")
        self.group = f"faultline-correlator.{ns}"
        self.workers: list[CorrelatorWorker] = []

    def check_workers(self) -> None:
        for w in self.workers:
            assert not w.crashed(), f"worker {w.log_path.name} crashed:\n{w.tail()}"

    def wait_judged(self, what: str, timeout: float = 240) -> None:
        want = _ends(self.conf, self.events)
        deadline = time.monotonic() + timeout
        while True:
            self.check_workers()
            got = _committed(self.conf, self.group, self.events)
            if all(got.get(p, -1) >= end for p, end in want.items()):
                return
            assert time.monotonic() < deadline, (
                f"{what}: committed {got}, want {want};\n" + "\n".join(w.tail(40) for w in self.workers))
            time.sleep(0.5)

    def wait_assigned(self, worker: CorrelatorWorker, partitions: int, timeout: float = 180) -> None:
        """Until ``worker``'s latest assignment holds ``partitions`` events partitions: the rebalance is over."""
        deadline = time.monotonic() + timeout
        while not ((got := _assignments(worker)) and len(got[-1]) == partitions):
            self.check_workers()
            assert worker.alive() and time.monotonic() < deadline, \
                f"{worker.log_path.name}: assignments {got}, want {partitions} partitions:\n{worker.tail()}"
            time.sleep(0.5)

    def wait_stream_ends(self, cells: set[str], timeout: float = 240) -> list[StreamEnd]:
        deadline = time.monotonic() + timeout
        while True:
            self.check_workers()
            ends = [StreamEnd.model_validate_json(v) for v in read_topic(self.conf, topic_name(self.ns, "control"))]
            if cells <= {e.cell for e in ends}:
                return ends
            assert time.monotonic() < deadline, (
                f"stream ends for {sorted({e.cell for e in ends if e.cell})} of {sorted(cells)};\n"
                + "\n".join(w.tail(40) for w in self.workers))
            time.sleep(0.5)


def _rebuilds(worker: CorrelatorWorker) -> list[tuple[int, int, float]]:
    """(events, partition, seconds) of every rebuild this worker logged."""
    return [(int(n), int(p), float(s)) for n, p, s in re.findall(
        r"rebuilt state from (\d+) earlier events of partition (\d+) \(\d+ cells\) in ([\d.]+)s", worker.log_text())]


def _catch_ups(worker: CorrelatorWorker) -> list[tuple[int, int, int]]:
    """(first offset, last offset, partition) of every run of records this worker caught up on from the log."""
    return [(int(a), int(b), int(p)) for a, b, p in re.findall(
        r"caught up on offsets (\d+)-(\d+) of partition (\d+)", worker.log_text())]


def _assignments(worker: CorrelatorWorker) -> list[set[int]]:
    """Every events assignment this worker logged, oldest first."""
    return [{int(p) for p in found.split(",") if p.strip()}
            for found in re.findall(r"assigned events partitions \[([\d, ]*)\]", worker.log_text())]


def _delete_worker_topics(conf: dict[str, Any], ns: str) -> None:
    """The changelog and assignor topics Faust made for this namespace's workers."""
    admin = AdminClient(conf)
    mine = [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"faultline-correlator.{ns}-")]
    for fut in (admin.delete_topics(mine, operation_timeout=30).values() if mine else []):
        try:
            fut.result(timeout=30)
        except Exception:  # already gone
            pass


def test_workers_join_die_and_rejoin_mid_replay_and_every_cell_decides_as_with_one_worker(
        kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name)
    conf = settings.kafka_config(kafka_bootstrap)
    ns = f"{unique_name}.replay-scale"  # a capture ends (end_of_capture) only in a replay namespace
    create_namespace_topics(conf, ns)  # the declared counts: commands keep one partition, in issue order
    grow_topic(conf, topic_name(ns, "events"), PARTITIONS)
    cells = {p.stem: p.read_bytes().splitlines() for p in scenario_files()}
    want = {cell: decide_offline(lines) for cell, lines in cells.items()}
    owner = {d["id"]: cell for cell, w in want.items() for d in w["incidents"] + w["commands"]}
    assert len(owner) == sum(len(w["incidents"]) + len(w["commands"]) for w in want.values()), \
        "two cells decide the same id: the cells could not be told apart"
    phases = Phases(conf, ns)
    pubs = {cell: EventPublisher(conf, ns, cell) for cell in cells}
    chunks = {cell: _chunks(lines, CHUNKS) for cell, lines in cells.items()}
    last: dict[str, Any] = {}

    def publish(chunk: int) -> None:
        for cell, pub in pubs.items():
            _, _, _, ts = publish_capture(pub, chunks[cell][chunk])
            last[cell] = ts or last.get(cell)
            if chunk == CHUNKS - 1:
                pub.publish([end_marker(len(cells[cell]), last[cell])])
        for pub in pubs.values():
            pub.flush()

    def start(name: str) -> CorrelatorWorker:
        worker = CorrelatorWorker(settings, kafka_bootstrap, ns, name=name)
        phases.workers.append(worker)
        return worker

    half = PARTITIONS // 2
    try:
        publish(0)
        used = _ends(conf, phases.events)
        # With at most one partition empty, each of two workers always holds a partition with records.
        assert len(used) >= PARTITIONS - 1, f"the cells landed on partitions {sorted(used)} only"
        a = start("a")
        phases.wait_judged("0: A alone")

        b = start("b")
        publish(1)  # judged while B joins
        phases.wait_assigned(b, half)
        phases.wait_assigned(a, half)
        phases.wait_judged("1: B joins")

        publish(2)
        phases.wait_judged("2: A and B")

        publish(3)
        os.killpg(a.proc.pid, signal.SIGKILL)  # mid-chunk: B takes its partitions over
        a.proc.wait(10)
        a.stop()
        phases.workers.remove(a)
        phases.wait_assigned(b, PARTITIONS)
        phases.wait_judged("3: A killed, B alone")

        a2 = start("a2")
        publish(4)  # judged while A rejoins
        phases.wait_assigned(a2, half)
        phases.wait_assigned(b, half)
        phases.wait_judged("4: A rejoins")

        publish(5)
        ends = phases.wait_stream_ends(set(cells))
        phases.wait_judged("5: A and B, end markers")
        for w in phases.workers:
            assert w.alive(), w.tail()
        rebuilds = {w.log_path.stem.rsplit("-", 1)[-1]: _rebuilds(w) for w in (a, b, a2)}
        catch_ups = {w.log_path.stem.rsplit("-", 1)[-1]: _catch_ups(w) for w in (a, b, a2)}
        a_dropped = "dropped the state of" in a.log_text()
        for w in (b, a2):
            w.stop()

        # The takeovers really happened: A dropped what B took; B rebuilt what it took when it joined
        # and again when A died; A's successor rebuilt what it took back from B.
        assert a_dropped, a.tail()
        assert len(rebuilds["b"]) >= 2 and len(rebuilds["a2"]) >= 1, rebuilds

        incident_records = [Incident.model_validate_json(v) for v in read_topic(conf, topic_name(ns, "incidents"))]
        command_records = [Command.model_validate_json(v) for v in read_topic(conf, topic_name(ns, "commands"))]
        strays = {d.id for d in incident_records + command_records} - set(owner)
        assert not strays, f"decided by no single-worker run: {sorted(strays)}"
        # A record seen twice (a worker killed between publishing and recording it) is the same bytes.
        contents: dict[tuple[str, int], set[str]] = defaultdict(set)
        for d in incident_records:
            contents[(d.id, d.version)].add(d.model_dump_json())
        for c in command_records:
            contents[(c.id, 0)].add(c.model_dump_json())
        assert all(len(v) == 1 for v in contents.values()), [k for k, v in contents.items() if len(v) > 1]

        for cell, expected in want.items():
            got = collate([i for i in incident_records if owner[i.id] == cell],
                          [c for c in command_records if owner[c.id] == cell])
            assert sorted(got["incidents"], key=lambda i: i["id"]) == \
                   sorted(expected["incidents"], key=lambda i: i["id"]), cell
            assert got["commands"] == expected["commands"], cell  # same ids, contents and order
            per_cause: dict[tuple[str | None, str], int] = defaultdict(int)
            for inc in got["incidents"]:
                per_cause[(inc["job"], inc["category"])] += 1
            assert all(n == 1 for n in per_cause.values()), (cell, dict(per_cause))
        assert {e.cell for e in ends} == set(cells) and {e.partition for e in ends} == set(used)

        print(json.dumps({
            "cells": len(cells), "partitions": PARTITIONS, "partitions_used": sorted(used),
            "events": sum(_ends(conf, phases.events).values()) - len(cells),
            "incidents": sum(len(w["incidents"]) for w in want.values()),
            "commands": sum(len(w["commands"]) for w in want.values()),
            "incident_records": len(incident_records), "command_records": len(command_records),
            "duplicate_command_records": len(command_records) - len({c.id for c in command_records}),
            "stream_ends": len(ends), "rebuilds": rebuilds, "catch_ups": catch_ups,
        }))
    finally:
        for w in phases.workers:
            w.stop()
        delete_namespace_topics(conf, ns)
        _delete_worker_topics(conf, ns)
