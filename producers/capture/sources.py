"""Per capture source (contract, section 1): one line's JSON object to the bodies of its events.

The table of sources, their required fields and the events they become is in
:mod:`producers.capture` (the package docstring).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Literal, cast

from pydantic import BaseModel

from producers.bmc.sel import parse_sel_line
from producers.capture.fields import (
    BadInput,
    Obj,
    build,
    opt_ident,
    opt_int,
    opt_str,
    req_bool,
    req_int,
    req_list,
    req_object,
    req_str,
    show,
    validate,
)
from producers.framework.torch_lines import parse_framework_line
from producers.framework.torchelastic import parse_worker_failure
from producers.kernel import parse_kernel_line
from streams.events import (
    AgentHeartbeat,
    BmcPower,
    BmcUnreachable,
    Body,
    CheckpointFailed,
    CheckpointLoaded,
    CheckpointSaved,
    GpuInfo,
    GpuSample,
    Inventory,
    JobEnded,
    JobStarted,
    NodeState,
    TrainerHeartbeat,
    TrainStep,
)
from streams.gpu_ids import short_pci
from streams.identifiers import why_not_gpu
from streams.ranges import INT32_MAX, INT32_MIN

__all__ = ["FLAG_METRICS", "SOURCES", "bodies_of", "cached_short_pci"]

# The same few bus ids recur on every sample.
cached_short_pci = lru_cache(maxsize=4096)(short_pci)
JobStatus = Literal["finished", "failed", "cancelled"]


def _gpu_info(value: object) -> GpuInfo:
    if not isinstance(value, dict):
        raise BadInput(f"inventory: each gpu must be an object, got {show(value)}", "wrong_type")
    index = req_int(value, "index", "inventory gpu")
    if not INT32_MIN <= index <= INT32_MAX:
        raise BadInput(f"inventory gpu: index {show(index)} is outside the 32-bit range", "invalid_value")
    return GpuInfo(
        index=index,
        uuid=opt_ident(value, "uuid", why_not_gpu),
        pci=cached_short_pci(opt_str(value, "pci_bus_id")),
        name=opt_str(value, "name"),
        power_domain=opt_str(value, "power_domain"),
    )


def _inventory(obj: Obj) -> list[Body]:
    req_str(obj, "node", "inventory")
    gpus = [_gpu_info(g) for g in req_list(obj, "gpus", "inventory")]
    return [Inventory(rack=opt_str(obj, "rack"), gpus=gpus)]


def _kernel(obj: Obj) -> list[Body]:
    req_str(obj, "node", "kernel")
    body = parse_kernel_line(req_str(obj, "line", "kernel"))
    return [body] if body is not None else []


# NVML reports these two as flags; captures write them as JSON booleans, the model counts them.
FLAG_METRICS = ("remapped_rows_pending", "remapped_rows_failure")


def _nvml(obj: Obj) -> list[Body]:
    req_str(obj, "node", "nvml")
    gpu = req_object(obj, "gpu", "nvml")
    ref = {
        "index": opt_int(gpu, "index", INT32_MIN, INT32_MAX),
        "uuid": opt_ident(gpu, "uuid", why_not_gpu),
        "pci": cached_short_pci(opt_str(gpu, "pci_bus_id")),
    }
    if ref["index"] is None and ref["uuid"] is None and ref["pci"] is None:
        raise BadInput("nvml: gpu needs an index, uuid or pci_bus_id", "missing_field")
    metrics = req_object(obj, "metrics", "nvml")
    flags = {key: int(metrics[key]) for key in FLAG_METRICS if isinstance(metrics.get(key), bool)}
    # GpuMetrics ignores unknown names and takes null as "not measured": validate the object as is.
    sample = {"gpu": ref, "metrics": {**metrics, **flags} if flags else metrics}
    return [validate(GpuSample, sample, "nvml")]


def _framework(obj: Obj) -> list[Body]:
    req_str(obj, "job", "framework")
    body = parse_framework_line(req_str(obj, "line", "framework"))
    return [body] if body is not None else []


def _torchelastic(obj: Obj) -> list[Body]:
    req_str(obj, "job", "torchelastic")
    exitcode = req_int(obj, "exitcode", "torchelastic")
    error_file = obj.get("error_file")
    if error_file is not None and not isinstance(error_file, dict | str):
        raise BadInput(f"field 'error_file' must be an object, a string or null, got {show(error_file)}", "wrong_type")
    exit_, classified = parse_worker_failure(exitcode, error_file)
    return [exit_] if classified is None else [exit_, classified]


_JOB_STARTED = ("allocation", "world_size", "elastic", "checkpoint", "gpu_class", "owner", "max_restarts")
_JOB_END: dict[str, JobStatus] = {
    "job_finished": "finished",
    "job_failed": "failed",
    "job_cancelled": "cancelled",
}
_NODE_READY = {"node_ready": True, "node_not_ready": False}


def _scheduler(obj: Obj) -> list[Body]:
    event = req_str(obj, "event", "scheduler")
    if event == "job_started":
        req_str(obj, "job", "scheduler job_started")
        return [build(JobStarted, obj, _JOB_STARTED, "scheduler job_started")]
    if event in _JOB_END:
        req_str(obj, "job", f"scheduler {event}")
        return [JobEnded(status=_JOB_END[event])]
    if event in _NODE_READY:
        req_str(obj, "node", f"scheduler {event}")
        return [NodeState(ready=_NODE_READY[event])]
    raise BadInput(f"scheduler: unknown event {show(event)}", "invalid_value")


def _bmc(obj: Obj) -> list[Body]:
    req_str(obj, "node", "bmc")
    if all(obj.get(key) is None for key in ("power", "sel", "reachable")):
        raise BadInput("bmc: needs 'power', 'sel' or 'reachable'", "missing_field")
    bodies: list[Body] = []
    power = opt_str(obj, "power")
    if power is not None:
        if power.lower() not in ("on", "off"):
            raise BadInput(f"bmc: power must be 'on' or 'off', got {show(power)}", "invalid_value")
        bodies.append(BmcPower(on=power.lower() == "on"))
    sel = opt_str(obj, "sel")
    if sel is not None:
        body = parse_sel_line(sel)
        if body is None:
            raise BadInput(f"bmc: sel is not an 'ipmitool sel elist' line: {show(sel)}", "invalid_value")
        bodies.append(body)
    if obj.get("reachable") is not None and not req_bool(obj, "reachable", "bmc"):
        bodies.append(BmcUnreachable())
    return bodies


def _node_agent(obj: Obj) -> list[Body]:
    req_str(obj, "node", "node_agent")
    return [AgentHeartbeat()] if req_bool(obj, "alive", "node_agent") else []


_TRAINER: dict[str, tuple[type[BaseModel], tuple[str, ...]]] = {
    "step": (TrainStep, ("step", "loss", "samples_per_s")),
    "checkpoint_saved": (CheckpointSaved, ("step", "path", "bytes", "seconds")),
    "checkpoint_failed": (CheckpointFailed, ("step", "path", "error")),
    "checkpoint_loaded": (CheckpointLoaded, ("step", "path")),
    "heartbeat": (TrainerHeartbeat, ("step", "in_step_s")),
}


def _trainer(obj: Obj) -> list[Body]:
    req_str(obj, "job", "trainer")
    event = req_str(obj, "event", "trainer")
    if event not in _TRAINER:
        raise BadInput(f"trainer: unknown event {show(event)}", "invalid_value")
    model, fields = _TRAINER[event]
    return [cast(Body, build(model, obj, fields, f"trainer {event}"))]


_HANDLERS: dict[str, Callable[[Obj], list[Body]]] = {
    "inventory": _inventory,
    "kernel": _kernel,
    "nvml": _nvml,
    "framework": _framework,
    "torchelastic": _torchelastic,
    "scheduler": _scheduler,
    "bmc": _bmc,
    "node_agent": _node_agent,
    "trainer": _trainer,
}

#: The capture sources of the contract.
SOURCES: frozenset[str] = frozenset(_HANDLERS)


def bodies_of(source: str, obj: Obj) -> list[Body]:
    """The bodies of the events one line of ``source`` carries (``source`` is one of :data:`SOURCES`)."""
    return _HANDLERS[source](obj)
