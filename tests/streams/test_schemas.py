"""Schema round-trips: every record survives JSON both ways, and subscribers get JSON Schema."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from streams import events as ev
from streams.decisions import Command, Culprit, Incident, Target
from streams.export import export_schemas
from streams.gpu_ids import short_pci
from streams.topics import TOPICS, topic_name

T = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
GPU = ev.GpuRef(index=2, uuid="GPU-1", pci="3a:00")

BODIES: list[ev.Body] = [
    ev.Inventory(rack="r1", gpus=[ev.GpuInfo(index=0, uuid="GPU-0", pci="18:00", power_domain="psu-A")]),
    ev.Xid(code=79, gpu=GPU, message="GPU has fallen off the bus."),
    ev.GpuLost(gpu=GPU),
    ev.KernelFault(fault="pcie_aer", severity="fatal", device="0000:3a:00.0"),
    ev.GpuSample(gpu=GPU, metrics=ev.GpuMetrics(temperature_c=61.5, ecc_sbe_volatile=3,
                                                clocks_event_reasons=["SW_POWER_CAP"])),
    ev.NcclTimeout(seq=5120, op_type="ALLREDUCE", timeout_ms=600000, ran_ms=600169),
    ev.NcclProgress(timeout_at=5120, last_enqueued=5120, last_completed=5119),
    ev.NcclError(message="unhandled system error"),
    ev.CudaError(error="an illegal memory access was encountered"),
    ev.CudaOom(gpu_index=5),
    ev.AppError(exception="ValueError", message="bad batch"),
    ev.WorkerExit(exitcode=-6, signal="SIGABRT"),
    ev.LaunchConfig(min_nodes=2, max_nodes=4, nproc_per_node=8),
    ev.JobStarted(allocation=[ev.RankAllocation(node="n1", gpus=[0, 1], ranks=[0, 1])], world_size=2,
                  elastic=ev.Elasticity(min_gpus=1, max_gpus=2),
                  checkpoint=ev.CheckpointPolicy(dir="/ck", interval_s=600), max_restarts=3),
    ev.JobEnded(status="failed"),
    ev.NodeState(ready=False),
    ev.BmcPower(on=True),
    ev.BmcSel(sensor="Power Supply PS2", description="Failure detected", component="power_supply",
              hardware_fault=True),
    ev.BmcUnreachable(),
    ev.AgentHeartbeat(),
    ev.TrainStep(step=10, loss=2.39, samples_per_s=430.0),
    ev.CheckpointSaved(step=600, path="/ck/600", bytes=14, seconds=4.7),
    ev.CheckpointFailed(step=610, error="ENOSPC"),
    ev.CheckpointLoaded(step=600),
    ev.TrainerHeartbeat(),
    ev.TrainerHeartbeat(step=3, in_step_s=412.5),
    ev.EndOfCapture(lines=10),
    ev.OperatorAction(action="release_gpu", gpu=GPU, by="alice", validated_by="dcgmi diag -r 3"),
]


def test_every_body_kind_is_covered() -> None:
    kinds = {b.kind for b in BODIES}
    declared = {m.model_fields["kind"].default for m in ev.Body.__origin__.__args__}  # type: ignore[attr-defined]
    assert kinds == declared


@pytest.mark.parametrize("body", BODIES, ids=lambda b: b.kind)
def test_event_round_trip(body: ev.Body) -> None:
    e = ev.Event(id="e1", ts=T, source="test", node="n1", job="j", rank=3, body=body)
    again = ev.Event.model_validate_json(e.model_dump_json())
    assert again == e
    assert again.kind == body.kind
    assert again.schema_version == ev.SCHEMA_VERSION


def test_nan_loss_survives_the_bus() -> None:
    e = ev.Event(id="e", ts=T, source="trainer", body=ev.TrainStep(step=1, loss=float("nan")))
    raw = e.model_dump_json()
    assert "NaN" in raw  # written the way Python's json module writes it
    loss = ev.Event.model_validate_json(raw).body.loss  # type: ignore[union-attr]
    assert loss is not None and math.isnan(loss)


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(ValidationError):
        ev.Event.model_validate({"id": "x", "ts": T.isoformat(), "source": "s", "body": {"kind": "nope"}})


def test_decisions_round_trip() -> None:
    inc = Incident(id="inc-1", job="j", category="gpu_off_bus", culprit=Culprit(node="n", gpus=["GPU-1"]),
                   opened_at=T, severity="page", state="open")
    cmd = Command(id="cmd-1", incident="inc-1", type="restart_job", target=Target(job="j"), issued_at=T,
                  params={"checkpoint": {"path": "/ck", "step": 1}, "gpus": 8, "exclude": {"nodes": [], "gpus": []}})
    assert Incident.model_validate_json(inc.model_dump_json()) == inc
    assert Command.model_validate_json(cmd.model_dump_json()) == cmd
    with pytest.raises(ValidationError):
        Incident.model_validate({**inc.model_dump(), "category": "bad_luck"})


def test_schema_export(tmp_path: Path) -> None:
    paths = export_schemas(tmp_path)
    assert {p.name for p in paths} == {f"{s}.schema.json" for s in TOPICS}
    for p in paths:
        schema = json.loads(p.read_text())
        assert schema["x-faultline-topic"]["suffix"] in TOPICS
        assert "properties" in schema


def test_topic_names() -> None:
    assert topic_name("faultline", "events") == "faultline.events"
    with pytest.raises(KeyError):
        topic_name("faultline", "nope")


@pytest.mark.parametrize("raw,want", [("00000000:C1:00.0", "c1:00"), ("PCI:0000:c1:00", "c1:00"),
                                      ("c1:00", "c1:00"), ("0000:3A:00.0", "3a:00"), ("", None), ("junk", None)])
def test_short_pci(raw: str, want: str | None) -> None:
    assert short_pci(raw) == want


def test_exported_schemas_name_their_dialect_and_have_a_uri_id(tmp_path: Path) -> None:
    from urllib.parse import urlparse

    from jsonschema import Draft202012Validator

    from streams.events import AgentHeartbeat, Event

    for path in export_schemas(tmp_path):
        schema = json.loads(path.read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        uri = urlparse(schema["$id"])
        assert uri.scheme == "urn" and schema["$id"].startswith(f"urn:faultline:schema:{path.name.split('.')[0]}:v")
        Draft202012Validator.check_schema(schema)  # a valid schema of the dialect it names
    events = json.loads((tmp_path / "events.schema.json").read_text())
    record = json.loads(Event(id="e1", ts=T, source="node_agent", node="n1", body=AgentHeartbeat()).model_dump_json())
    Draft202012Validator(events).validate(record)  # and it accepts what the producers write


# --- issue 27, item 6: an integer is an integer ----------------------------------------------------------------

_EVENT = {"id": "e1", "ts": "2026-04-22T03:00:00Z", "source": "test", "node": "n1"}
_FLOATS_IN_INTEGER_FIELDS = [  # (model, record): a JSON float where the schema means a whole number
    (ev.Event, {**_EVENT, "schema_version": 1.0, "body": {"kind": "agent_heartbeat"}}),
    (ev.Event, {**_EVENT, "body": {"kind": "xid", "code": 79.0, "gpu": {"index": 0}}}),
    (ev.Event, {**_EVENT, "body": {"kind": "worker_exit", "exitcode": 1.0}}),
    (ev.Event, {**_EVENT, "body": {"kind": "job_started", "world_size": 8.0}}),
    (ev.Event, {**_EVENT, "body": {"kind": "job_started", "elastic": {"min_gpus": 8.0, "max_gpus": 16}}}),
    (ev.Event, {**_EVENT, "body": {"kind": "gpu_sample", "gpu": {"index": 0}, "metrics": {"ecc_dbe_volatile": 2.0}}}),
    (ev.Event, {**_EVENT, "body": {"kind": "nccl_timeout", "seq": 5.0}}),
    (ev.Event, {**_EVENT, "body": {"kind": "cuda_oom", "gpu_index": 5.0}}),
    (Incident, {"schema_version": 1.0, "id": "i", "job": None, "category": "gpu_off_bus", "culprit": {},
                "opened_at": "2026-04-22T03:00:00Z", "severity": "page", "state": "open"}),
]


@pytest.mark.parametrize("model,record", _FLOATS_IN_INTEGER_FIELDS, ids=lambda x: str(x)[:60])
def test_every_integer_field_refuses_a_float(model: type[BaseModel], record: dict[str, Any]) -> None:
    """Issue 27, item 6: ``8.0`` where a whole number is meant is refused on arrival, never read as ``8``."""
    with pytest.raises(ValidationError, match="integer"):
        model.model_validate_json(json.dumps(record))
    exact = json.loads(json.dumps(record).replace(".0,", ",").replace(".0}", "}"))
    model.model_validate_json(json.dumps(exact))  # the same record with the integer: accepted


_RESTART = {"id": "c1", "incident": "i1", "type": "restart_job", "target": {"job": "llm"},
            "issued_at": "2026-04-22T03:00:00Z",
            "params": {"gpus": 8, "gpu_class": "h100", "attempt": 1, "capacity_known": 64,
                       "checkpoint": {"path": "/ck/1", "step": 1200},
                       "sizing": {"nproc_per_node": 8, "nodes": 1, "min_nodes": 1, "max_nodes": 2, "formable_nodes": 1},
                       "score": 1.0}}


def _with(path: tuple[str, ...], value: object) -> dict[str, Any]:
    record = json.loads(json.dumps(_RESTART))
    where = record["params"]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return record


@pytest.mark.parametrize("path", [("gpus",), ("attempt",), ("capacity_known",), ("checkpoint", "step"),
                                  ("sizing", "nproc_per_node"), ("sizing", "nodes"), ("sizing", "min_nodes"),
                                  ("sizing", "max_nodes"), ("sizing", "formable_nodes")])
@pytest.mark.parametrize("value", [8.0, 8.5, True, "8"])
def test_a_commands_counts_are_integers(path: tuple[str, ...], value: object) -> None:
    """A count a command's params carry (the GPUs a restart asks for, its attempt, its checkpoint's step...) is a
    JSON integer: ``8.0``, ``true`` or ``"8"`` is refused, saying which member, instead of reaching an executor
    that reads ``8.0`` otherwise than ``8`` (the Slurm backend dropped such a GPU count)."""
    assert Command.model_validate_json(json.dumps(_RESTART)).params["gpus"] == 8
    with pytest.raises(ValidationError, match=rf"params\.{'.'.join(path)} must be an integer"):
        Command.model_validate_json(json.dumps(_with(path, value)))
    with pytest.raises(ValidationError, match="must be an integer"):  # built in Python as well
        Command.model_validate(_with(path, value))


def test_other_params_keep_their_numbers_as_they_are() -> None:
    """Only counts are held to integers: a score or a threshold stays the number it is (``1.0`` included)."""
    cmd = Command.model_validate_json(json.dumps(_RESTART))
    assert cmd.params["score"] == 1.0 and isinstance(cmd.params["score"], float)
    assert Command.model_validate_json(json.dumps(_with(("checkpoint",), None))).params["checkpoint"] is None
