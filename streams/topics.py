"""Every topic faultline uses, declared once.

A namespace prefixes every name, so a replay (``faultline.replay-<id>``) runs
beside the live pipeline (``faultline``) on the same broker without touching it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from streams.batch import EventBatch
from streams.decisions import Approval, Command, CommandResult, DeadLetter, Incident, StreamEnd
from streams.events import Event

__all__ = ["TopicSpec", "TOPICS", "topic_name", "spec", "correlator_app_id", "correlator_internal_topics"]


@dataclass(frozen=True)
class TopicSpec:
    suffix: str
    key: str
    model: type[BaseModel]
    partitions: int
    cleanup: str  # "delete" or "compact"
    retention_ms: int | None
    doc: str
    # Records may also be this envelope of several ``model`` records (streams/batch.py); readers take both.
    batch: type[BaseModel] | None = None


_DAY = 86_400_000

TOPICS: dict[str, TopicSpec] = {
    spec.suffix: spec
    for spec in (
        # Keyed by cell (streams/cells.py): the correlator reasons across the nodes of a cell (racks,
        # power domains, a job's ranks), so a cell's events stay in one partition, in order, whatever
        # the partition count. More partitions spread more cells over more correlator workers.
        TopicSpec("events", "cell ('cell:<name>', streams/cells.py)", Event, 1, "delete", 7 * _DAY,
                  "Canonical events from every producer: one per record, or a batch of one producer's "
                  "events in one record (streams/batch.py).", batch=EventBatch),
        TopicSpec("incidents", "incident id", Incident, 6, "compact", None,
                  "Every version of every incident; compaction keeps the latest."),
        TopicSpec("commands", "command id", Command, 1, "delete", 30 * _DAY,
                  "Commands for downstream automation, in the order issued (one partition: a fence "
                  "always reaches an executor before the restart that avoids it)."),
        TopicSpec("command-results", "command id", CommandResult, 6, "delete", 30 * _DAY,
                  "One result per command and executor."),
        TopicSpec("approvals", "command id", Approval, 1, "delete", 90 * _DAY,
                  "Approvals and denials of commands that wait for a person, with who and when."),
        TopicSpec("deadletters", "stage", DeadLetter, 1, "delete", 30 * _DAY,
                  "Input that could not be used, with the reason."),
        TopicSpec("control", "namespace", StreamEnd, 1, "delete", 7 * _DAY,
                  "Replay markers: the correlator has judged a whole capture."),
    )
}


def spec(suffix: str) -> TopicSpec:
    return TOPICS[suffix]


def topic_name(namespace: str, suffix: str) -> str:
    """Full topic name, e.g. ``topic_name("faultline", "events") == "faultline.events"``."""
    if suffix not in TOPICS:
        raise KeyError(f"unknown topic {suffix!r}; declared: {sorted(TOPICS)}")
    return f"{namespace}.{suffix}"


def correlator_app_id(namespace: str) -> str:
    """The Faust app id of a namespace's correlator: its consumer group and its own topics' prefix."""
    return f"faultline-correlator.{namespace}"


def correlator_internal_topics(namespace: str) -> list[str]:
    """The topics the correlator keeps for itself (not for subscribers): the ``emitted`` table's
    changelog, the state snapshots and Faust's leader-assignor topic."""
    app = correlator_app_id(namespace)
    return [f"{app}-emitted-changelog", f"{app}-snapshots", f"{app}-__assignor-__leader"]
