"""Shared steps of the takeover tests: kill a worker mid-stream, let a successor finish the capture,
and compare what was decided with the offline run."""

from __future__ import annotations

import os
import signal
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from common.settings import Settings
from faultline.outcome import collate, decide_offline
from faultline.pipeline import CorrelatorWorker, collect, end_marker, wait_for_end
from producers.delivery import EventPublisher
from streams.decisions import Command

__all__ = ["committed_offset", "sigkill", "finish_with_successor", "assert_decided_as_offline"]


def committed_offset(conf: dict[str, Any], group: str, topic: str, partition: int = 0) -> int:
    """``group``'s committed offset on ``topic[partition]`` (negative: none), read without joining it."""
    c = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        return int(c.committed([TopicPartition(topic, partition)], timeout=10)[0].offset)
    finally:
        c.close()


def sigkill(worker: CorrelatorWorker) -> None:
    """``kill -9`` the worker's process group: no shutdown, no flush, no commit."""
    os.killpg(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait(10)
    worker.stop()


def finish_with_successor(settings: Settings, bootstrap: str, ns: str, pub: EventPublisher, lines: int,
                          last: datetime | None) -> str:
    """Publish the end marker, start a new worker to take over and judge to the end; its log."""
    pub.publish([end_marker(lines, last)])
    pub.flush()
    successor = CorrelatorWorker(settings, bootstrap, ns)
    try:
        wait_for_end(settings.kafka_config(bootstrap), ns, successor, timeout=120)
    finally:
        successor.stop()
    return successor.log_text()


def assert_decided_as_offline(conf: dict[str, Any], ns: str, lines: list[bytes]) -> dict[str, Any]:
    """The namespace's topics hold the offline run's incidents and commands, in order, nothing under
    another id; returns the offline decisions."""
    incidents, commands = collect(conf, ns)
    got = collate(incidents, commands)
    want = decide_offline(lines)
    assert [(i["id"], i["category"], i["state"]) for i in got["incidents"]] == \
           [(i["id"], i["category"], i["state"]) for i in want["incidents"]]
    assert [c["id"] for c in got["commands"]] == [c["id"] for c in want["commands"]]
    assert {c.id for c in commands} == {c["id"] for c in want["commands"]}, "nothing decided under another id"
    assert all(isinstance(c, Command) for c in commands)
    return want
