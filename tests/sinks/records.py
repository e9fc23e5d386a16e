"""One incident's worth of records, built from the streams models, for the archive tests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from streams.decisions import Command, CommandResult, Culprit, DeadLetter, Incident, Target
from streams.events import (
    AgentHeartbeat,
    CheckpointFailed,
    CheckpointLoaded,
    CheckpointSaved,
    Event,
    GpuMetrics,
    GpuRef,
    GpuSample,
    JobStarted,
    RankAllocation,
    TrainStep,
    WorkerExit,
    Xid,
)

T0 = datetime(2025, 4, 22, 3, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """``T0`` plus some seconds."""
    return T0 + timedelta(seconds=seconds)


@dataclass(frozen=True)
class Sample:
    """A GPU falling off the bus under job ``j1``, with everything the pipeline made of it."""

    events: list[Event]
    incidents: list[Incident]
    commands: list[Command]
    results: list[CommandResult]
    deadletters: list[DeadLetter]


def sample_records() -> Sample:
    gpu = GpuRef(index=3, uuid="GPU-3", pci="c1:00")
    events = [
        Event(id="e-start", ts=at(0), source="scheduler", job="j1",
              body=JobStarted(allocation=[RankAllocation(node="n1", gpus=[3], ranks=[0])], world_size=1)),
        Event(id="e-ckpt-saved", ts=at(10), source="trainer", job="j1", node="n1", rank=0,
              body=CheckpointSaved(step=100, path="/ckpt/100", bytes=1 << 30, seconds=12.5)),
        Event(id="e-ckpt-failed", ts=at(20), source="trainer", job="j1", node="n1", rank=0,
              body=CheckpointFailed(step=200, path="/ckpt/200", error="No space left on device")),
        Event(id="e-step", ts=at(25), source="trainer", job="j1", node="n1", rank=0,
              body=TrainStep(step=250, loss=1.25)),
        Event(id="e-sample", ts=at(28), source="nvml", node="n1",
              body=GpuSample(gpu=gpu, metrics=GpuMetrics(temperature_c=61.0))),
        Event(id="e-alive", ts=at(29), source="node_agent", node="n1", body=AgentHeartbeat()),
        Event(id="e-xid", ts=at(30), source="kernel", node="n1",
              body=Xid(code=79, gpu=GpuRef(pci="c1:00"), message="GPU has fallen off the bus.")),
        Event(id="e-exit", ts=at(31), source="torchelastic", job="j1", node="n1", rank=0,
              body=WorkerExit(exitcode=-6, signal="SIGABRT")),
        Event(id="e-other-node", ts=at(32), source="kernel", node="n2",
              body=Xid(code=13, gpu=GpuRef(index=0))),
        Event(id="e-ckpt-loaded", ts=at(90), source="trainer", job="j1", node="n2", rank=0,
              body=CheckpointLoaded(step=100, path="/ckpt/100")),
    ]
    incidents = [
        Incident(id="inc-1", job="j1", category="gpu_off_bus", culprit=Culprit(node="n1", gpus=["GPU-3"]),
                 opened_at=at(33), updated_at=at(33 + 20 * (v - 1)), severity="page",
                 state=["open", "mitigating", "resolved"][v - 1], version=v, summary=f"version {v}")
        for v in (1, 2, 3)
    ]
    commands = [
        Command(id="cmd-quarantine", incident="inc-1", type="quarantine_gpu",
                target=Target(node="n1", gpu="GPU-3"), issued_at=at(34), reason="XID 79"),
        Command(id="cmd-restart", incident="inc-1", type="restart_job", target=Target(job="j1"),
                issued_at=at(35), reason="restart from step 100",
                params={"checkpoint": {"path": "/ckpt/100", "step": 100}, "gpus": 1,
                        "exclude": {"nodes": [], "gpus": [["n1", "GPU-3"]]}}),
        Command(id="cmd-validate", incident="inc-1", type="validate_gpu",
                target=Target(node="n1", gpu="GPU-3"), issued_at=at(60), reason="after repair"),
        Command(id="cmd-release", incident="inc-1", type="release_gpu",
                target=Target(node="n1", gpu="GPU-3"), issued_at=at(70), reason="diagnostics passed"),
    ]
    results = [
        CommandResult(command="cmd-quarantine", status="done", at=at(36), executor="k8s"),
        CommandResult(command="cmd-restart", status="waiting_approval", at=at(37), executor="k8s"),
        CommandResult(command="cmd-restart", status="done", at=at(50), executor="k8s", detail="restarted"),
    ]
    deadletters = [
        DeadLetter(stage="parse:kernel", reason="not JSON", raw="{oops", at=at(5)),
        DeadLetter(stage="parse:nvml", reason="missing ts", raw='{"source": "nvml"}', at=at(6)),
    ]
    return Sample(events, incidents, commands, results, deadletters)
