"""Bytes of one serialized record of each kind the plan sizes: real models, typical contents.

Events go through the agent's own parser (:func:`producers.capture.parse_capture_line`) from a
typical observation of each kind; decisions are the real models, ``model_dump_json()`` exactly
as the producers send them. Kafka's record overhead is left out (small next to these sizes).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

__all__ = ["record_sizes"]

_TS = "2026-04-22T03:00:41.956+00:00"
_GPU = {"index": 3, "uuid": "GPU-ca6fc2b7-ca57-71d0-eea0-627083a9c179", "pci_bus_id": "00000000:18:00.0"}
_OBSERVATIONS: dict[str, dict[str, Any]] = {
    "gpu_sample": {"ts": _TS, "source": "nvml", "node": "gpu-node-0017", "gpu": _GPU, "metrics": {
        "temperature_c": 61.5, "power_w": 612.3, "power_limit_w": 700.0, "utilization_pct": 98,
        "memory_used_mib": 71234, "memory_total_mib": 81559, "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0,
        "ecc_sbe_aggregate": 3, "ecc_dbe_aggregate": 0, "retired_pages_sbe": 0, "retired_pages_dbe": 0,
        "remapped_rows_pending": False, "remapped_rows_failure": False, "clocks_event_reasons": [],
        "pcie_replay_counter": 0}},
    "agent_heartbeat": {"ts": _TS, "source": "node_agent", "node": "gpu-node-0017", "alive": True},
    "train_step": {"ts": _TS, "source": "trainer", "job": "pretrain-70b-run-0042", "rank": 0,
                   "node": "gpu-node-0017", "event": "step", "step": 125_430, "loss": 1.9342,
                   "samples_per_s": 4215.7},
    "xid": {"ts": _TS, "source": "kernel", "node": "gpu-node-0017",
            "line": "NVRM: Xid (PCI:0000:18:00): 48, pid=2712, name=python, An uncorrectable double bit "
                    "error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."},
}


def _decision_sizes() -> dict[str, int]:
    """Serialized sizes of typical decisions (real models, typical contents)."""
    from streams.decisions import Approval, Command, CommandResult, Culprit, DeadLetter, Incident, Target

    at = datetime(2026, 4, 22, 3, 0, 41, tzinfo=UTC)
    incident = Incident(
        id="inc-5f1c2a9e0b7d4c31", job="pretrain-70b-run-0042", category="gpu_memory_fault",
        culprit=Culprit(node="gpu-node-0017", gpus=[str(_GPU["uuid"])]), opened_at=at, severity="page",
        state="recovering", version=4, updated_at=at,
        summary="XID 48 double-bit ECC on gpu-node-0017 GPU 3; job restarted from step 125000 without it",
        evidence=[f"ev-{i:020x}" for i in range(6)], lost_gpu_hours=12.5)
    command = Command(
        id="cmd-3f2a9c41b8e07d55", incident=incident.id, type="restart_job",
        target=Target(job=incident.job, node="gpu-node-0017", gpu=str(_GPU["uuid"])), issued_at=at,
        params={"checkpoint": {"path": "/ckpt/pretrain-70b/step_125000", "step": 125_000}, "gpus": 1024,
                "exclude": {"nodes": [], "gpus": [["gpu-node-0017", str(_GPU["uuid"])]]}},
        reason="gpu_memory_fault: restart from the newest valid checkpoint without the failed GPU")
    result = CommandResult(command=command.id, status="done", at=at, executor="slurm",
                           detail="scontrol requeuehold 812345; ExcNodeList=gpu-node-0017; release")
    approval = Approval(command=command.id, decision="approve", by="alice", at=at,
                        reason="job checkpointed; reboot is safe")
    dead = DeadLetter(stage="agent", reason="kernel_log: line is not UTF-8", raw="x" * 300, at=at)
    return {name: len(model.model_dump_json().encode())
            for name, model in (("incident", incident), ("command", command), ("result", result),
                                ("approval", approval), ("deadletter", dead))}


def record_sizes() -> dict[str, int]:
    """Bytes of one serialized record of each kind the sizing uses (events through the agent's parser)."""
    from producers.capture import parse_capture_line

    sizes: dict[str, int] = {}
    for kind, obs in _OBSERVATIONS.items():
        events = [e for e in parse_capture_line(json.dumps(obs)) if e.body.kind == kind]
        if not events:
            raise RuntimeError(f"the parser made no {kind} event of its example observation")
        sizes[kind] = len(events[0].model_dump_json().encode())
    sizes.update(_decision_sizes())
    return sizes

