"""What the correlators decide: incidents and commands (the contract's output).

These models carry exactly the fields of ``shared/contract/README.md`` §2 plus
a few of our own (version, summary, evidence...) that subscribers may use and
the contract lets them ignore.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from streams.ranges import Int, UInt32

__all__ = [
    "CATEGORIES",
    "COMMAND_TYPES",
    "Category",
    "CommandType",
    "Severity",
    "Culprit",
    "Fault",
    "GateExclusion",
    "GateWait",
    "Incident",
    "RestartGate",
    "Target",
    "Command",
    "CommandResult",
    "DeadLetter",
    "StreamEnd",
    "Approval",
    "COUNT_PARAMS",
]

Category = Literal[
    "gpu_off_bus",
    "gpu_memory_fault",
    "gpu_ecc_degradation",
    "gpu_thermal",
    "gpu_nvlink_fault",
    "gpu_firmware_fault",
    "power_supply_fault",
    "node_down",
    "node_hardware_fault",
    "rack_outage",
    "network_timeout",
    "cuda_oom",
    "software_crash",
    "checkpoint_failure",
    "checkpoint_stale",
    "training_hang",
    "loss_anomaly",
]
CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]

CommandType = Literal[
    "quarantine_gpu",
    "cordon_node",
    "drain_node",
    "restart_job",
    "validate_gpu",
    "release_gpu",
    "open_ticket",
    "notify",
    "checkpoint_now",  # ask a running job to save now (reversible, no approval): hardware that warns (README)
    "reset_gpu",
    "reboot_node",
]
COMMAND_TYPES: tuple[str, ...] = CommandType.__args__  # type: ignore[attr-defined]

Severity = Literal["page", "ticket", "info"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Culprit(_Model):
    node: str | None = None
    gpus: list[str] = Field(default_factory=list)


class GateWait(_Model):
    """A detector the restart gate waits for: on which node (and GPU), until when it could still speak."""

    node: str
    gpu: str | None = None
    detector: str
    due: datetime


class GateExclusion(_Model):
    """Hardware the restart leaves out although it is not fenced, and why."""

    node: str
    gpu: str | None = None
    verdict: Literal["suspect", "no_verdict"]
    why: str = ""


class RestartGate(_Model):
    """The restart gate of the incident's current round (``correlators.restart_gate``): ``waiting`` for
    a verdict on some hardware, or ``passed`` (the restart went out, leaving out what ``excluded`` says)."""

    state: Literal["waiting", "passed"]
    failure_at: datetime
    bound: datetime
    waiting: list[GateWait] = Field(default_factory=list)
    excluded: list[GateExclusion] = Field(default_factory=list)
    # Past what one record holds (streams/bounds.py): how many more waits / exclusions the gate has.
    waiting_more: Int = 0
    excluded_more: Int = 0


class Fault(_Model):
    """Another fault found while the incident was open, on hardware of its own: a second culprit."""

    category: Category
    culprit: Culprit
    reason: str = ""
    incident: str | None = None  # its own incident (one per job and root cause), published beside this one


class Incident(_Model):
    """One incident per affected job and root cause; every change is a new version.

    ``gate`` and ``faults`` are additive (schema version 1 still): subscribers that do not know them
    ignore them."""

    schema_version: Int = 1
    id: str
    job: str | None
    category: Category
    culprit: Culprit
    opened_at: datetime
    severity: Severity
    state: str
    version: UInt32 = 1  # the archive's column
    updated_at: datetime | None = None
    summary: str = ""
    evidence: list[str] = Field(default_factory=list)
    lost_gpu_hours: float | None = None
    gate: RestartGate | None = None
    faults: list[Fault] = Field(default_factory=list)
    # What this version leaves out to stay within streams.bounds.MAX_RECORD_BYTES, and where it is ("": nothing).
    cut: str = ""


#: The members of a command's ``params`` that are counts, by command type (a path of keys into them): each
#: is a JSON integer when present, never ``8.0``, ``true`` or ``"8"`` (issue 27). RFC 8785 writes ``8.0`` as
#: ``8``, so a signature over one covers the other, yet an executor that reads JSON numbers as they come sees a
#: float: the Slurm backend dropped such a GPU count. Other params (a score, a threshold) stay the numbers they
#: are, and other types' members of the same name may be other things (an ``open_ticket``'s ``gpus`` are ids).
COUNT_PARAMS: dict[str, tuple[tuple[str, ...], ...]] = {
    "restart_job": (("gpus",), ("attempt",), ("capacity_known",), ("checkpoint", "step"),
                    *(("sizing", key) for key in ("nproc_per_node", "nodes", "min_nodes", "max_nodes",
                                                  "formable_nodes"))),
}


def _counts_are_integers(params: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> None:
    for path in paths:
        where: Any = params
        for key in path[:-1]:
            where = where.get(key) if isinstance(where, dict) else None
        value = where.get(path[-1]) if isinstance(where, dict) else None
        if value is not None and type(value) is not int:  # bool is an int to Python, not a count
            raise ValueError(f"params.{'.'.join(path)} must be an integer, not {value!r}")


class Target(_Model):
    job: str | None = None
    node: str | None = None
    gpu: str | None = None


class Command(_Model):
    schema_version: Int = 1
    id: str
    incident: str
    type: CommandType
    target: Target
    issued_at: datetime
    requires_approval: bool = False
    params: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""
    # Set by the correlator when it signs (streams/signing.py): executors refuse commands unsigned,
    # tampered with, signed by an unknown key, expired, or signed for another namespace or cluster.
    namespace: str | None = None
    cluster: str | None = None
    expires_at: datetime | None = None
    signature: str | None = None

    @model_validator(mode="after")
    def _counts(self) -> Command:
        _counts_are_integers(self.params, COUNT_PARAMS.get(self.type, ()))
        return self


class CommandResult(_Model):
    """What an executor reports for one command id."""

    schema_version: Int = 1
    command: str
    status: Literal["done", "failed", "skipped_duplicate", "waiting_approval", "denied", "dry_run", "refused"]
    at: datetime
    executor: str
    detail: str = ""
    # Signed with an executor key (streams/signing.py): executors learn only from results of their own kind.
    signature: str | None = None


class Approval(_Model):
    """A person's decision on a command that requires approval (``faultline approve`` / ``deny``).

    It names the exact command: its id and ``command_hash`` (streams/canonical.py), so it can
    release that content only, never another command that reuses the id. Signed with the
    operator's key, whose key id is ``by``.
    """

    schema_version: Int = 1
    command: str
    decision: Literal["approve", "deny"]
    by: str
    at: datetime
    reason: str = ""
    command_hash: str | None = None
    signature: str | None = None


class DeadLetter(_Model):
    """A record that could not be used, with why. Never silently dropped."""

    schema_version: Int = 1
    stage: str
    reason: str
    raw: str
    at: datetime


class StreamEnd(_Model):
    """Replay only: the correlator has judged every observation of a capture."""

    schema_version: Int = 1
    end_of_stream: Literal[True] = True
    events: Int = 0  # records of the partition up to and including the marker (an event each, or a batch)
    seconds: float | None = None  # wall time the correlator spent on them
    cpu_seconds: float | None = None  # the worker process's CPU time over the same span (all its threads)
    cell: str | None = None  # the cell whose end-of-capture marker this answers (one marker per cell)
    partition: Int | None = None  # the events partition it came from; ``events`` counts that partition
