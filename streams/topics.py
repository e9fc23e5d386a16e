"""Every topic faultline uses, declared once.

A namespace prefixes every name, so a replay (``faultline.replay-<id>``) runs
beside the live pipeline (``faultline``) on the same broker without touching it.

**Scratch namespaces.** ``faultline replay``, ``faultline demo`` and ``faultline bench`` each make a
namespace of their own under the live one, named ``<namespace>.<kind>-<id>`` (:data:`SCRATCH_KINDS`,
:func:`scratch_namespace`), run a whole capture through it and throw it away. Only there does a
capture *end*: the replay-only ``end_of_capture`` record, which makes the correlator judge every
pending decision at once, is honoured in a namespace :func:`is_replay_namespace` says is one of
these, and refused (dead-lettered with the reason) on any other -- a live events topic, where
anyone with an agent's credential could otherwise close every settle window early.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from streams.batch import EventBatch
from streams.decisions import Approval, Command, CommandResult, DeadLetter, Incident, StreamEnd
from streams.events import Event
from streams.health import StageHeartbeat

__all__ = ["SCRATCH_KINDS", "TopicSpec", "TOPICS", "topic_name", "spec", "correlator_app_id",
           "correlator_internal_topics", "is_replay_namespace", "scratch_namespace"]


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
        TopicSpec("heartbeats", "stage/instance", StageHeartbeat, 1, "delete", _DAY,
                  "Each running stage's own heartbeat (streams/health.py): version, dev mode, lag."),
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


#: The kinds of namespace the ``faultline`` commands make for one run of their own (module docstring).
SCRATCH_KINDS = ("replay", "demo", "bench")


def scratch_namespace(namespace: str, kind: str, run_id: str) -> str:
    """The namespace a ``kind`` run (a replay, a demo, a benchmark) makes under ``namespace``."""
    if kind not in SCRATCH_KINDS:
        raise ValueError(f"unknown scratch namespace kind {kind!r}; one of {SCRATCH_KINDS}")
    return f"{namespace}.{kind}-{run_id}"


def is_replay_namespace(namespace: str) -> bool:
    """Whether ``namespace`` is a scratch one (``<namespace>.<kind>-<id>``): where a capture may end."""
    base, dot, last = namespace.rpartition(".")
    return bool(base and dot) and any(last.startswith(f"{kind}-") and len(last) > len(kind) + 1
                                      for kind in SCRATCH_KINDS)
