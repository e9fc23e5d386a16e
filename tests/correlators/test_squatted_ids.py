"""Issue 27 item 3: a record under a predictable event id cannot make the real event a duplicate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from correlators.engine import Correlator
from correlators.policy import load_policy
from streams.decisions import Command, Incident
from streams.event_identity import identity
from streams.events import (
    AgentHeartbeat,
    EndOfCapture,
    Event,
    GpuInfo,
    GpuRef,
    Inventory,
    JobStarted,
    RankAllocation,
    Xid,
)

T = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def _run(events: list[Event]) -> tuple[list[Incident], list[Command]]:
    c = Correlator(load_policy())
    out = [d for e in events for d in c.process(e)]
    return [d for d in out if isinstance(d, Incident)], [d for d in out if isinstance(d, Command)]


def _capture(squat: bool) -> list[Event]:
    def gpus(n: str) -> list[GpuInfo]:
        return [GpuInfo(index=i, uuid=f"GPU-{n}-{i}", pci=f"{0x18 + i:02x}:00") for i in range(2)]

    job_id = "scheduler-line-2"  # deterministic: from the capture line, so anyone can predict it
    events = [Event(id=f"inv-{n}", ts=T, source="inventory", node=n, body=Inventory(rack="r1", gpus=gpus(n)))
              for n in ("n1", "n2")]
    if squat:  # an agent's credential publishes first, under the id the job_started will get
        events.append(Event(id=job_id, ts=_at(1), source="scheduler", node="n1", body=AgentHeartbeat()))
    events.append(Event(id=job_id, ts=_at(2), source="scheduler", job="llm", body=JobStarted(
        allocation=[RankAllocation(node=n, gpus=[0, 1], ranks=[2 * i, 2 * i + 1]) for i, n in enumerate(("n1", "n2"))],
        world_size=4)))
    events.append(Event(id="xid-1", ts=_at(600), source="kernel", node="n1", body=Xid(code=79, gpu=GpuRef(pci="18:00"))))
    events.append(Event(id="end", ts=_at(4000), source="replay", body=EndOfCapture()))
    return events


def test_a_squatted_job_started_id_does_not_drop_the_real_job() -> None:
    """A heartbeat under the next job_started's id: the XID's incident still has its job, and it restarts."""
    honest_incidents, honest_commands = _run(_capture(squat=False))
    incidents, commands = _run(_capture(squat=True))
    assert {i.job for i in honest_incidents} == {"llm"}
    assert {i.job for i in incidents} == {"llm"}
    assert sorted(c.type for c in commands) == sorted(c.type for c in honest_commands)
    assert "restart_job" in [c.type for c in commands]


def test_a_re_sent_event_is_still_a_duplicate_and_other_content_is_not() -> None:
    e = Event(id="e1", ts=T, source="kernel", node="n1", body=Xid(code=79, gpu=GpuRef(pci="18:00")))
    again = Event.model_validate_json(e.model_dump_json())  # re-sent, through the bus
    assert identity(again) == identity(e)
    assert identity(e.model_copy(update={"source": "node_agent"})) != identity(e)
    assert identity(e.model_copy(update={"body": AgentHeartbeat()})) != identity(e)
    c = Correlator(load_policy())
    c.process(Event(id="inv", ts=T, source="inventory", node="n1",
                    body=Inventory(gpus=[GpuInfo(index=0, uuid="GPU-0", pci="18:00")])))
    c.process(e)
    assert c.process(again) == []
    assert not c.state.seen.add(identity(again))  # the window holds it: a redelivery is dropped
