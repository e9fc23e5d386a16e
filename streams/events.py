"""Canonical events: what producers put on the bus and correlators read.

Every record on the ``events`` topic is one :class:`Event`: a small common
envelope (id, event time, where it was seen) plus a typed ``body`` chosen by
``kind``. Producers turn raw observations (a kernel line, an NVML sample, a
torchelastic error file...) into these; the correlators never see raw text.

The schema is versioned (:data:`SCHEMA_VERSION`): additive changes (a new
optional field, a new kind) keep the version; anything else bumps it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from streams.identifiers import GpuId, JobId, NodeId
from streams.launch import LaunchConfig
from streams.ranges import Int, Int32, Int64, NonNegInt32

__all__ = [
    "SCHEMA_VERSION",
    "GpuRef",
    "GpuInfo",
    "Inventory",
    "Xid",
    "GpuLost",
    "KernelFault",
    "GpuMetrics",
    "GpuSample",
    "NcclTimeout",
    "NcclProgress",
    "NcclError",
    "CudaError",
    "CudaOom",
    "AppError",
    "WorkerExit",
    "LaunchConfig",
    "RankAllocation",
    "Elasticity",
    "CheckpointPolicy",
    "JobStarted",
    "JobEnded",
    "NodeState",
    "BmcPower",
    "BmcSel",
    "BmcUnreachable",
    "AgentHeartbeat",
    "TrainStep",
    "CheckpointSaved",
    "CheckpointFailed",
    "CheckpointLoaded",
    "TrainerHeartbeat",
    "EndOfCapture",
    "OperatorAction",
    "Body",
    "Event",
]

SCHEMA_VERSION = 1


class _Model(BaseModel):
    # NaN and Infinity travel as JSON constants (as Python's json writes them): a NaN loss is news.
    model_config = ConfigDict(extra="ignore", frozen=True, ser_json_inf_nan="constants")


class GpuRef(_Model):
    """A GPU as one source names it; any of the fields may be missing.

    ``pci`` is normalised to the short bus form ``c1:00`` (see
    :func:`streams.gpu_ids.short_pci`), so the kernel's ``PCI:0000:c1:00`` and
    NVML's ``00000000:C1:00.0`` compare equal.
    """

    index: Int32 | None = None
    uuid: GpuId | None = None
    pci: str | None = None


class GpuInfo(_Model):
    index: Int32
    uuid: GpuId | None = None
    pci: str | None = None
    name: str | None = None
    power_domain: str | None = None


# --- node hardware -----------------------------------------------------------------


class Inventory(_Model):
    kind: Literal["inventory"] = "inventory"
    rack: str | None = None
    gpus: list[GpuInfo] = Field(default_factory=list)


class Xid(_Model):
    """An NVIDIA XID reported by the kernel driver (NVRM) or NVML events."""

    kind: Literal["xid"] = "xid"
    code: Int
    gpu: GpuRef
    message: str = ""


class GpuLost(_Model):
    """A GPU gone: 'fallen off the bus' without an XID, or NVML GPU_IS_LOST."""

    kind: Literal["gpu_lost"] = "gpu_lost"
    gpu: GpuRef
    message: str = ""


class KernelFault(_Model):
    """Other kernel evidence: PCIe AER, machine checks, the host OOM killer."""

    kind: Literal["kernel_fault"] = "kernel_fault"
    fault: Literal["pcie_aer", "machine_check", "host_oom"]
    severity: Literal["corrected", "uncorrected", "fatal", "info"] = "info"
    device: str | None = None
    message: str = ""


class GpuMetrics(_Model):
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    utilization_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    ecc_sbe_volatile: Int | None = None
    ecc_dbe_volatile: Int | None = None
    ecc_sbe_aggregate: Int | None = None
    ecc_dbe_aggregate: Int | None = None
    retired_pages_sbe: Int | None = None
    retired_pages_dbe: Int | None = None
    remapped_rows_pending: Int | None = None
    remapped_rows_failure: Int | None = None
    clocks_event_reasons: list[str] | None = None
    pcie_replay_counter: Int | None = None


class GpuSample(_Model):
    kind: Literal["gpu_sample"] = "gpu_sample"
    gpu: GpuRef
    metrics: GpuMetrics


# --- training processes ----------------------------------------------------------------


class NcclTimeout(_Model):
    """ProcessGroupNCCL watchdog: a collective ran past its timeout."""

    kind: Literal["nccl_timeout"] = "nccl_timeout"
    seq: Int | None = None
    op_type: str | None = None
    timeout_ms: Int | None = None
    ran_ms: Int | None = None


class NcclProgress(_Model):
    """'Timeout at NCCL work: X, last enqueued NCCL work: Y, last completed NCCL work: Z'."""

    kind: Literal["nccl_progress"] = "nccl_progress"
    timeout_at: Int | None = None
    last_enqueued: Int | None = None
    last_completed: Int | None = None


class NcclError(_Model):
    kind: Literal["nccl_error"] = "nccl_error"
    message: str = ""


class CudaError(_Model):
    kind: Literal["cuda_error"] = "cuda_error"
    error: str = ""
    message: str = ""


class CudaOom(_Model):
    kind: Literal["cuda_oom"] = "cuda_oom"
    gpu_index: Int | None = None
    message: str = ""


class AppError(_Model):
    """A Python exception or other application error from the training code."""

    kind: Literal["app_error"] = "app_error"
    exception: str = ""
    message: str = ""


class WorkerExit(_Model):
    """torchelastic reports a worker exit; ``exitcode < 0`` is death by signal."""

    kind: Literal["worker_exit"] = "worker_exit"
    exitcode: Int
    signal: str | None = None
    error: str | None = None


# --- scheduler ---------------------------------------------------------------------------


class RankAllocation(_Model):
    node: NodeId
    gpus: list[Int32] = Field(default_factory=list)
    ranks: list[NonNegInt32] = Field(default_factory=list)


class Elasticity(_Model):
    min_gpus: Int
    max_gpus: Int


class CheckpointPolicy(_Model):
    dir: str | None = None
    interval_s: float | None = None


class JobStarted(_Model):
    kind: Literal["job_started"] = "job_started"
    allocation: list[RankAllocation] = Field(default_factory=list)
    world_size: Int | None = None
    elastic: Elasticity | None = None
    checkpoint: CheckpointPolicy | None = None
    gpu_class: str | None = None
    owner: str | None = None
    max_restarts: Int | None = None


class JobEnded(_Model):
    kind: Literal["job_ended"] = "job_ended"
    status: Literal["finished", "failed", "cancelled"]


class NodeState(_Model):
    kind: Literal["node_state"] = "node_state"
    ready: bool


# --- out-of-band and liveness ----------------------------------------------------------


class BmcPower(_Model):
    kind: Literal["bmc_power"] = "bmc_power"
    on: bool


class BmcSel(_Model):
    """One `ipmitool sel elist` line, parsed."""

    kind: Literal["bmc_sel"] = "bmc_sel"
    sensor: str = ""
    description: str = ""
    asserted: bool = True
    component: Literal["power_supply", "memory", "cpu", "board", "thermal", "other"] = "other"
    hardware_fault: bool = False
    line: str = ""


class BmcUnreachable(_Model):
    kind: Literal["bmc_unreachable"] = "bmc_unreachable"


class AgentHeartbeat(_Model):
    kind: Literal["agent_heartbeat"] = "agent_heartbeat"


# --- trainer reports ---------------------------------------------------------------------


class TrainStep(_Model):
    kind: Literal["train_step"] = "train_step"
    step: Int64
    loss: float | None = None
    samples_per_s: float | None = None


class CheckpointSaved(_Model):
    kind: Literal["checkpoint_saved"] = "checkpoint_saved"
    step: Int64
    path: str | None = None
    bytes: Int64 | None = None
    seconds: float | None = None


class CheckpointFailed(_Model):
    kind: Literal["checkpoint_failed"] = "checkpoint_failed"
    step: Int64 | None = None
    path: str | None = None
    error: str = ""


class CheckpointLoaded(_Model):
    kind: Literal["checkpoint_loaded"] = "checkpoint_loaded"
    step: Int64 | None = None
    path: str | None = None


class TrainerHeartbeat(_Model):  # alive; optionally "in step ``step`` for ``in_step_s`` seconds"
    kind: Literal["trainer_heartbeat"] = "trainer_heartbeat"
    step: Int64 | None = None
    in_step_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)


# --- people ------------------------------------------------------------------------------------


class OperatorAction(_Model):
    """A person's action on hardware (`faultline quarantine` / `faultline release`), with who and why.

    ``release_gpu`` returns hardware to service and needs ``validated_by`` (who or what validated it);
    without ``gpu`` it releases the whole node (its cordon and its GPUs). The whole event is signed with an
    operator key for one namespace and cluster (:func:`streams.signing.sign_operator_action`); ``by`` is the key id.
    """

    kind: Literal["operator_action"] = "operator_action"
    action: Literal["quarantine_gpu", "cordon_node", "release_gpu"]
    gpu: GpuRef | None = None
    by: str
    reason: str = ""
    validated_by: str | None = None
    namespace: str | None = None  # under the signature, as a command's are
    cluster: str | None = None
    signature: str | None = None


# --- control -------------------------------------------------------------------------------


class EndOfCapture(_Model):
    """Replay only: every observation of the capture has been sent.

    Moves the correlator's watermark past the end so every pending window and
    timeout is judged, then the correlator forwards the marker downstream.
    """

    kind: Literal["end_of_capture"] = "end_of_capture"
    lines: Int = 0


Body = Annotated[
    Inventory
    | Xid
    | GpuLost
    | KernelFault
    | GpuSample
    | NcclTimeout
    | NcclProgress
    | NcclError
    | CudaError
    | CudaOom
    | AppError
    | WorkerExit
    | LaunchConfig
    | JobStarted
    | JobEnded
    | NodeState
    | BmcPower
    | BmcSel
    | BmcUnreachable
    | AgentHeartbeat
    | TrainStep
    | CheckpointSaved
    | CheckpointFailed
    | CheckpointLoaded
    | TrainerHeartbeat
    | EndOfCapture
    | OperatorAction,
    Field(discriminator="kind"),
]


class Event(_Model):
    """One canonical event. ``id`` is stable for the same observation, so a
    re-sent line is recognised downstream as a duplicate."""

    schema_version: Int = SCHEMA_VERSION
    id: str
    ts: datetime
    source: str
    # Identifiers reach command lines (streams/identifiers.py); ranks the archive's Int32 column.
    node: NodeId | None = None
    job: JobId | None = None
    rank: NonNegInt32 | None = None
    local_rank: NonNegInt32 | None = None
    body: Body

    @property
    def kind(self) -> str:
        return self.body.kind
