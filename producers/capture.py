"""One capture line (contract, section 1) -> zero or more canonical events.

:func:`parse_capture_line` reads one JSON Lines record and returns the
:class:`~streams.events.Event` s it carries, or raises :class:`BadInput` with
the reason (the caller dead-letters the line and goes on). Unknown fields are
ignored; types are checked strictly (an integer field takes a JSON integer,
not ``3.0``, ``"3"`` or ``true``).

A line is at most :data:`MAX_LINE_BYTES` (512 KiB) long, checked before it is
decoded. Every :class:`BadInput` has a ``kind`` (:data:`BAD_KINDS`: too long,
invalid UTF-8, not JSON, a missing field, a wrong type, an unknown source, a bad
timestamp, an invalid value) for the metric. One line is judged alone here;
what needs the lines around it (duplicates, a timestamp far from its
neighbours') is :mod:`producers.capture_screen`'s.

Envelope: ``ts`` (RFC 3339 with an offset, ``Z`` accepted, years 2000..2100,
stored in UTC) and ``source`` are required; ``node``, ``job`` (strings),
``rank``, ``local_rank`` (integers) are copied when present.

Per source (required fields in brackets):

==============  ==================================  =====================================
source          required                            events
==============  ==================================  =====================================
inventory       node, gpus                          Inventory
kernel          node, line                          Xid / GpuLost / KernelFault, or none
nvml            node, gpu (an id), metrics          GpuSample
framework       job, line                           NcclTimeout / ... / AppError, or none
torchelastic    job, exitcode                       WorkerExit [+ the error's class]
scheduler       event (+ job or node)               JobStarted / JobEnded / NodeState
bmc             node, one of power/sel/reachable    BmcPower, BmcSel, BmcUnreachable
node_agent      node, alive                         AgentHeartbeat (none when alive=false)
trainer         job, event (+ per event)            TrainStep / Checkpoint* / TrainerHeartbeat
==============  ==================================  =====================================

``node_agent`` with ``alive: false`` and ``bmc`` with ``reachable: true``
(and nothing else) yield no event: the first is not a heartbeat, the second
is a poll that says nothing.

Event ids are deterministic: the first 24 hex digits of the SHA-256 of the
raw line (without its line ending), so a re-sent line gets the same id; the
second and later events of one line get ``-1``, ``-2``... appended.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Literal, TypeVar, cast, get_args

from pydantic import BaseModel, ValidationError

from producers.bmc.sel import parse_sel_line
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
    Event,
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

# The same few bus ids recur on every sample.
_short_pci = lru_cache(maxsize=4096)(short_pci)

__all__ = ["BAD_KINDS", "MAX_LINE_BYTES", "SOURCES", "BadInput", "BadKind", "parse_capture_line", "too_long"]

Obj = Mapping[str, Any]
M = TypeVar("M", bound=BaseModel)
JobStatus = Literal["finished", "failed", "cancelled"]

_ID_HEX_DIGITS = 24
_YEARS = range(2000, 2101)
_REPR_MAX = 80
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


BadKind = Literal[
    "too_long", "invalid_utf8", "not_json", "missing_field", "wrong_type", "unknown_source",
    "bad_timestamp", "invalid_value", "duplicate", "clock_outlier",
]
#: Every kind of bad input, in the order a line is checked (the last two are judged by
#: :mod:`producers.capture_screen`, which sees a line among its neighbours).
BAD_KINDS: tuple[BadKind, ...] = get_args(BadKind)

#: The longest capture line, in bytes without its line ending. Half the Kafka record limit
#: (``message.max.bytes`` = 1 MiB), so the event a line becomes always fits in a record with
#: its envelope; a hundred times the longest line of a real capture (a torchelastic error
#: file with its Python traceback is ~10 KiB). Longer lines are bad input, refused before
#: they are decoded.
MAX_LINE_BYTES = 512 * 1024


class BadInput(ValueError):
    """A capture line that cannot be used; ``reason`` says why (for the dead letter), ``kind``
    which rule it broke (the label of ``faultline_capture_bad_lines_total``)."""

    def __init__(self, reason: str, kind: BadKind = "invalid_value") -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind: BadKind = kind


def too_long(size: int) -> BadInput:
    """The refusal of a line of ``size`` bytes (over :data:`MAX_LINE_BYTES`)."""
    return BadInput(f"line of {size:,} bytes is longer than the {MAX_LINE_BYTES:,} allowed; "
                    "split the observation or shorten its text", "too_long")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _REPR_MAX else text[: _REPR_MAX - 3] + "..."


# --- field access ------------------------------------------------------------------


def _opt_str(obj: Obj, key: str) -> str | None:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise BadInput(f"field {key!r} must be a string, got {_show(value)}", "wrong_type")


def _opt_int(obj: Obj, key: str) -> int | None:
    value = obj.get(key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise BadInput(f"field {key!r} must be an integer, got {_show(value)}", "wrong_type")


def _require(obj: Obj, key: str, source: str) -> Any:
    value = obj.get(key)
    if value is None:
        raise BadInput(f"{source}: missing {key!r}", "missing_field")
    return value


def _req_str(obj: Obj, key: str, source: str) -> str:
    value = _require(obj, key, source)
    if not isinstance(value, str):
        raise BadInput(f"field {key!r} must be a string, got {_show(value)}", "wrong_type")
    return value


def _req_int(obj: Obj, key: str, source: str) -> int:
    value = _require(obj, key, source)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadInput(f"field {key!r} must be an integer, got {_show(value)}", "wrong_type")
    return value


def _req_bool(obj: Obj, key: str, source: str) -> bool:
    value = _require(obj, key, source)
    if not isinstance(value, bool):
        raise BadInput(f"field {key!r} must be true or false, got {_show(value)}", "wrong_type")
    return value


def _req_object(obj: Obj, key: str, source: str) -> Obj:
    value = _require(obj, key, source)
    if not isinstance(value, dict):
        raise BadInput(f"field {key!r} must be an object, got {_show(value)}", "wrong_type")
    return value


def _req_list(obj: Obj, key: str, source: str) -> list[Any]:
    value = _require(obj, key, source)
    if not isinstance(value, list):
        raise BadInput(f"field {key!r} must be a list, got {_show(value)}", "wrong_type")
    return value


def _build(model: type[M], obj: Obj, fields: tuple[str, ...], source: str) -> M:
    """Validate ``fields`` of ``obj`` (nulls dropped, so defaults apply) into ``model``."""
    return _validate(model, {key: obj[key] for key in fields if obj.get(key) is not None}, source)


def _validate(model: type[M], data: Obj, source: str) -> M:
    """``model`` from ``data``, strictly; a validation error is bad input."""
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"]) or model.__name__
        kind: BadKind = "missing_field" if err["type"] == "missing" else "wrong_type"
        raise BadInput(f"{source}: field {where!r}: {err['msg']}", kind) from None


# --- per source ----------------------------------------------------------------------


def _gpu_info(value: object) -> GpuInfo:
    if not isinstance(value, dict):
        raise BadInput(f"inventory: each gpu must be an object, got {_show(value)}", "wrong_type")
    index = _req_int(value, "index", "inventory gpu")
    return GpuInfo(
        index=index,
        uuid=_opt_str(value, "uuid"),
        pci=_short_pci(_opt_str(value, "pci_bus_id")),
        name=_opt_str(value, "name"),
        power_domain=_opt_str(value, "power_domain"),
    )


def _inventory(obj: Obj) -> list[Body]:
    _req_str(obj, "node", "inventory")
    gpus = [_gpu_info(g) for g in _req_list(obj, "gpus", "inventory")]
    return [Inventory(rack=_opt_str(obj, "rack"), gpus=gpus)]


def _kernel(obj: Obj) -> list[Body]:
    _req_str(obj, "node", "kernel")
    body = parse_kernel_line(_req_str(obj, "line", "kernel"))
    return [body] if body is not None else []


# NVML reports these two as flags; captures write them as JSON booleans, the model counts them.
_FLAG_METRICS = ("remapped_rows_pending", "remapped_rows_failure")


def _nvml(obj: Obj) -> list[Body]:
    _req_str(obj, "node", "nvml")
    gpu = _req_object(obj, "gpu", "nvml")
    ref = {
        "index": _opt_int(gpu, "index"),
        "uuid": _opt_str(gpu, "uuid"),
        "pci": _short_pci(_opt_str(gpu, "pci_bus_id")),
    }
    if ref["index"] is None and ref["uuid"] is None and ref["pci"] is None:
        raise BadInput("nvml: gpu needs an index, uuid or pci_bus_id", "missing_field")
    metrics = _req_object(obj, "metrics", "nvml")
    flags = {key: int(metrics[key]) for key in _FLAG_METRICS if isinstance(metrics.get(key), bool)}
    # GpuMetrics ignores unknown names and takes null as "not measured": validate the object as is.
    sample = {"gpu": ref, "metrics": {**metrics, **flags} if flags else metrics}
    return [_validate(GpuSample, sample, "nvml")]


def _framework(obj: Obj) -> list[Body]:
    _req_str(obj, "job", "framework")
    body = parse_framework_line(_req_str(obj, "line", "framework"))
    return [body] if body is not None else []


def _torchelastic(obj: Obj) -> list[Body]:
    _req_str(obj, "job", "torchelastic")
    exitcode = _req_int(obj, "exitcode", "torchelastic")
    error_file = obj.get("error_file")
    if error_file is not None and not isinstance(error_file, dict | str):
        raise BadInput(f"field 'error_file' must be an object, a string or null, got {_show(error_file)}", "wrong_type")
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
    event = _req_str(obj, "event", "scheduler")
    if event == "job_started":
        _req_str(obj, "job", "scheduler job_started")
        return [_build(JobStarted, obj, _JOB_STARTED, "scheduler job_started")]
    if event in _JOB_END:
        _req_str(obj, "job", f"scheduler {event}")
        return [JobEnded(status=_JOB_END[event])]
    if event in _NODE_READY:
        _req_str(obj, "node", f"scheduler {event}")
        return [NodeState(ready=_NODE_READY[event])]
    raise BadInput(f"scheduler: unknown event {_show(event)}", "invalid_value")


def _bmc(obj: Obj) -> list[Body]:
    _req_str(obj, "node", "bmc")
    if all(obj.get(key) is None for key in ("power", "sel", "reachable")):
        raise BadInput("bmc: needs 'power', 'sel' or 'reachable'", "missing_field")
    bodies: list[Body] = []
    power = _opt_str(obj, "power")
    if power is not None:
        if power.lower() not in ("on", "off"):
            raise BadInput(f"bmc: power must be 'on' or 'off', got {_show(power)}", "invalid_value")
        bodies.append(BmcPower(on=power.lower() == "on"))
    sel = _opt_str(obj, "sel")
    if sel is not None:
        body = parse_sel_line(sel)
        if body is None:
            raise BadInput(f"bmc: sel is not an 'ipmitool sel elist' line: {_show(sel)}", "invalid_value")
        bodies.append(body)
    if obj.get("reachable") is not None and not _req_bool(obj, "reachable", "bmc"):
        bodies.append(BmcUnreachable())
    return bodies


def _node_agent(obj: Obj) -> list[Body]:
    _req_str(obj, "node", "node_agent")
    return [AgentHeartbeat()] if _req_bool(obj, "alive", "node_agent") else []


_TRAINER: dict[str, tuple[type[BaseModel], tuple[str, ...]]] = {
    "step": (TrainStep, ("step", "loss", "samples_per_s")),
    "checkpoint_saved": (CheckpointSaved, ("step", "path", "bytes", "seconds")),
    "checkpoint_failed": (CheckpointFailed, ("step", "path", "error")),
    "checkpoint_loaded": (CheckpointLoaded, ("step", "path")),
    "heartbeat": (TrainerHeartbeat, ()),
}


def _trainer(obj: Obj) -> list[Body]:
    _req_str(obj, "job", "trainer")
    event = _req_str(obj, "event", "trainer")
    if event not in _TRAINER:
        raise BadInput(f"trainer: unknown event {_show(event)}", "invalid_value")
    model, fields = _TRAINER[event]
    return [cast(Body, _build(model, obj, fields, f"trainer {event}"))]


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


# --- the line ------------------------------------------------------------------------


def _decode(raw: bytes | str) -> tuple[bytes, Obj]:
    """The line's bytes (for the id) and its JSON object."""
    try:
        if isinstance(raw, bytes | bytearray):
            data = bytes(raw).rstrip(b"\r\n")
            if len(data) > MAX_LINE_BYTES:  # before decoding: a huge line costs no parsing
                raise too_long(len(data))
            text = data.decode("utf-8")
        else:
            text = raw.rstrip("\r\n")
            data = text.encode("utf-8")
            if len(data) > MAX_LINE_BYTES:
                raise too_long(len(data))
    except UnicodeError:
        raise BadInput("invalid UTF-8", "invalid_utf8") from None
    if not text.strip():
        raise BadInput("empty line", "not_json")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"not JSON: {exc}", "not_json") from None
    if not isinstance(obj, dict):
        raise BadInput(f"not a JSON object: {type(obj).__name__}", "not_json")
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        _check_no_lone_surrogates(obj)
    return data, obj


def _check_no_lone_surrogates(obj: Obj) -> None:
    """JSON may escape half a UTF-16 pair (``"\\ud800"``); such a string cannot be
    sent on as UTF-8, so the line is bad input rather than a poisoned event."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except (UnicodeError, RecursionError):
        raise BadInput("invalid UTF-8: lone surrogate escape in a string", "invalid_utf8") from None


def _timestamp(obj: Obj) -> datetime:
    value = obj.get("ts")
    if value is None:
        raise BadInput("missing 'ts'", "missing_field")
    if not isinstance(value, str):
        raise BadInput(f"field 'ts' must be an RFC 3339 string, got {_show(value)}", "bad_timestamp")
    try:
        ts = datetime.fromisoformat(value.upper())
    except ValueError:
        raise BadInput(f"ts is not RFC 3339: {_show(value)}", "bad_timestamp") from None
    if ts.tzinfo is None or ts.utcoffset() is None:
        raise BadInput(f"ts has no UTC offset: {_show(value)}", "bad_timestamp")
    if ts.year not in _YEARS:
        raise BadInput(f"ts outside the years 2000..2100: {_show(value)}", "bad_timestamp")
    return ts.astimezone(UTC)


def _source(obj: Obj) -> str:
    value = obj.get("source")
    if value is None:
        raise BadInput("missing 'source'", "missing_field")
    if not isinstance(value, str) or value not in _HANDLERS:
        raise BadInput(f"unknown source {_show(value)}", "unknown_source")
    return value


def _event_ids(data: bytes, count: int) -> list[str]:
    """Deterministic ids for the ``count`` events of the line ``data``."""
    digest = hashlib.sha256(data).hexdigest()[:_ID_HEX_DIGITS]
    return [digest if i == 0 else f"{digest}-{i}" for i in range(count)]


def parse_capture_line(raw: bytes | str) -> list[Event]:
    """Turn one capture line into its canonical events (possibly none).

    Raises :class:`BadInput` for anything that is not a usable observation;
    never any other exception.
    """
    data, obj = _decode(raw)
    source = _source(obj)
    ts = _timestamp(obj)
    node, job = _opt_str(obj, "node"), _opt_str(obj, "job")
    rank, local_rank = _opt_int(obj, "rank"), _opt_int(obj, "local_rank")
    bodies = _HANDLERS[source](obj)
    ids = _event_ids(data, len(bodies))
    return [
        Event(id=id_, ts=ts, source=source, node=node, job=job, rank=rank, local_rank=local_rank, body=body)
        for id_, body in zip(ids, bodies, strict=True)
    ]
