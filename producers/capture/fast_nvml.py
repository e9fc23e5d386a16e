"""An NVML capture line straight to its event's record bytes, without a model per line.

Why: replay's profile (issue #30) found most of the replaying process's time in the usual
line -- one NVML sample, 99 % of a fleet's capture -- being decoded by the standard library,
validated into a :class:`~streams.events.GpuSample` and an :class:`~streams.events.Event`, and then
serialised again (``model_dump_json``) for its record: models built only to be written out.

**The rule.** :func:`~producers.capture.parse_capture_line` (with the schema) stays the one
contract. :func:`encode_nvml` returns an :class:`~producers.batching.EncodedEvent` only for a line
that parse accepts, holding exactly the bytes ``parse_capture_line(line)[0].model_dump_json()``
gives and the same time; for anything else -- another source, a value of an unusual type, an
escape, an integer that might be past the safe range, a field the checks below refuse -- it returns
None and the caller parses the line the usual way, which alone refuses lines and says why. So it
accepts a subset of what parse accepts, never more. ``tests/producers/test_fast_nvml.py`` checks
this on generated lines.

msgspec comes with the ``sink`` extra, which replay (the one user) needs anyway; the capture screen the
node agent shares takes a ``parse`` and does not import this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from pydantic_core import to_json

from producers.batching import EncodedEvent
from producers.capture.fields import SAFE_INTEGER, BadInput, opt_ident, opt_int
from producers.capture.line import capture_timestamp, event_ids, parse_capture_line
from producers.capture.sources import FLAG_METRICS, cached_short_pci
from streams.events import SCHEMA_VERSION, Event, GpuMetrics
from streams.identifiers import why_not_gpu, why_not_job, why_not_node
from streams.ranges import INT32_MAX, INT32_MIN

__all__ = ["FLOAT_METRICS", "INT_METRICS", "encode_nvml", "parse_for_publishing"]

#: The parse: the standard library's values for the JSON it reads; what it does not read (NaN, a
#: number past a float's range, bad UTF-8, anything malformed) raises: the line goes the usual way.
_JSON = msgspec.json.Decoder()
#: The envelope's and the sample's fields; a value under any other name is only checked for integers
#: past :data:`~producers.capture.fields.SAFE_INTEGER` (parse refuses those wherever they are, naming them).
_LINE_FIELDS = frozenset({"ts", "source", "node", "job", "rank", "local_rank", "gpu", "metrics"})
_GPU_FIELDS = frozenset({"index", "uuid", "pci_bus_id"})
#: :class:`streams.events.GpuMetrics`' fields by type (the test holds them to the model's).
FLOAT_METRICS = frozenset({"temperature_c", "power_w", "power_limit_w", "utilization_pct", "memory_used_mib",
                           "memory_total_mib"})
INT_METRICS = frozenset({"ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate",
                         "retired_pages_sbe", "retired_pages_dbe", "remapped_rows_pending", "remapped_rows_failure",
                         "pcie_replay_counter"})
_REASONS = "clocks_event_reasons"
_FLAGS = frozenset(FLAG_METRICS)
_METRICS = tuple(GpuMetrics.model_fields)


#: Node names and GPU ids their grammar took (streams/identifiers.py): the same few recur on every line.
_NODES: set[str] = set()
_GPUS: set[str] = set()
_KEPT = 65_536


def _valid(value: object, seen: set[str], why_not: Callable[[object], str | None]) -> bool:
    """Whether ``value`` is an identifier its grammar takes (remembered, the memory bounded)."""
    if type(value) is not str:
        return False
    if value in seen:
        return True
    if why_not(value) is not None:
        return False
    if len(seen) >= _KEPT:
        seen.clear()
    seen.add(value)
    return True


class _Usual(Exception):
    """Not on the fast path: the line is parsed the usual way."""


def parse_for_publishing(raw: bytes | str) -> list[Event | EncodedEvent]:
    """A line's events for a producer that only publishes them (``CaptureScreen(parse=...)``): the usual NVML
    line already written as its record, any other line parsed (the same events, the same refusals)."""
    if isinstance(raw, bytes) and (encoded := encode_nvml(raw)) is not None:
        return [encoded]
    return list(parse_capture_line(raw))


def encode_nvml(line: bytes) -> EncodedEvent | None:
    """The event of an NVML capture line as the schema writes it, or None: parse it the usual way."""
    content = line.rstrip(b"\r\n")
    if b'"nvml"' not in content or b"\\u" in content:
        return None
    try:
        obj = _JSON.decode(content)
    except (msgspec.DecodeError, ValueError):
        return None
    if type(obj) is not dict or obj.get("source") != "nvml":
        return None
    try:
        return _encode(content, obj)
    except (BadInput, _Usual):
        return None


def _encode(content: bytes, obj: dict[str, Any]) -> EncodedEvent:
    # In parse's order (producers/capture/line.py, then sources._nvml); any refusal: the usual way.
    ts = capture_timestamp(obj)
    node, gpu, metrics = obj.get("node"), obj.get("gpu"), obj.get("metrics")
    if not _valid(node, _NODES, why_not_node) or type(gpu) is not dict or type(metrics) is not dict:
        raise _Usual
    job = None if obj.get("job") is None else opt_ident(obj, "job", why_not_job)
    rank = None if obj.get("rank") is None else opt_int(obj, "rank", 0, INT32_MAX)
    local_rank = None if obj.get("local_rank") is None else opt_int(obj, "local_rank", 0, INT32_MAX)
    _no_big_integer(obj, _LINE_FIELDS)
    _no_big_integer(gpu, _GPU_FIELDS)
    index, uuid, pci = gpu.get("index"), gpu.get("uuid"), gpu.get("pci_bus_id")
    if index is not None and (type(index) is not int or not INT32_MIN <= index <= INT32_MAX):
        raise _Usual
    if uuid is not None and not _valid(uuid, _GPUS, why_not_gpu):
        raise _Usual
    if pci is not None and type(pci) is not str:
        raise _Usual
    pci = cached_short_pci(pci)
    if index is None and uuid is None and pci is None:
        raise _Usual
    (event_id,) = event_ids(content, 1)
    record = {"schema_version": SCHEMA_VERSION, "id": event_id, "ts": ts, "source": "nvml", "node": node, "job": job,
              "rank": rank, "local_rank": local_rank,
              "body": {"kind": "gpu_sample", "gpu": {"index": index, "uuid": uuid, "pci": pci},
                       "metrics": _metrics(metrics)}}
    return EncodedEvent(ts=ts, source="nvml", value=to_json(record))


def _metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """The sample's metrics as :class:`~streams.events.GpuMetrics` (strict) holds them, in its order."""
    out = dict.fromkeys(_METRICS)
    for key, value in metrics.items():
        if value is None:
            continue  # "not measured"
        if key not in out:  # ignored, but not an integer past the safe range
            _no_big_integer({key: value}, frozenset())
            continue
        kind = type(value)
        if key in FLOAT_METRICS:
            if kind is float:
                out[key] = value
            elif kind is int and -SAFE_INTEGER <= value <= SAFE_INTEGER:  # exact as a float
                out[key] = float(value)
            else:
                raise _Usual
        elif key in INT_METRICS:
            if kind is int and -SAFE_INTEGER <= value <= SAFE_INTEGER:
                out[key] = value
            elif kind is bool and key in _FLAGS:  # NVML's flags, counted (sources._nvml)
                out[key] = int(value)
            else:
                raise _Usual
        elif key == _REASONS and kind is list and all(type(reason) is str for reason in value):
            out[key] = value
        else:
            raise _Usual
    return out


def _no_big_integer(obj: dict[str, Any], known: frozenset[str]) -> None:
    """Raise when a value of ``obj`` not under a ``known`` name holds an integer past the safe range."""
    stack = [value for key, value in obj.items() if key not in known]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is int:
            if not -SAFE_INTEGER <= value <= SAFE_INTEGER:
                raise _Usual
        elif kind is dict:
            stack.extend(value.values())
        elif kind is list:
            stack.extend(value)
