"""Snapshots of one events partition's correlator state, so a takeover replays a bounded tail.

Without them a worker that takes a partition over (a crash, a rebalance, a
scale-out) rebuilds every cell's engine from the partition's log start: the
whole retained log. With them it installs the partition's newest snapshot and
replays only the records after it (:mod:`correlators.app`, ``catch_up``).

What a snapshot is. The :class:`~correlators.state.EngineState` of every cell
of one partition and the offset of the last record folded into them (the
:class:`~correlators.partitions.PartitionState` invariant: the fold of a
*prefix* of the log, so a snapshot is as good as a rebuild up to that offset).
The worker takes one only at a record boundary where every decision up to that
offset is on its topic, so a restore never skips publishing anything. Taking
one has two halves: :func:`capture_engines` serialises the states where they
are mutated (the worker's event loop, between two records); :func:`seal`
compresses and authenticates them anywhere else.

The state is data, never code. The body is the JSON of the typed state
(:data:`STATES`), read back by validating it against the same types: a body
that is not exactly such a state -- a pickle, a field too many, a naive
datetime, an unknown timer, a window over its bound, an incident named but not
held -- is refused (:class:`SnapshotRefused`), and nothing in it can construct
anything but the state's own dataclasses. No module outside the tests imports
``pickle`` or ``marshal``.

The bytes (:func:`seal`, :func:`open_snapshot`)::

    MAGIC (8 bytes) | header length (4, big endian) | header (JSON) | body (zlib(JSON)) | tag (32)

The header names the format version (:data:`FORMAT_VERSION`, the layout
above), the state version (:data:`STATE_VERSION`), the policy fingerprint
(:func:`policy_fingerprint`), the partition, its position, the cells and how
the tag was made. The tag covers everything before it:

* **HMAC-SHA256** with ``FAULTLINE_SNAPSHOT_KEY`` when it is set -- a dedicated
  key, not the command signing keys, so rotating those does not throw every
  snapshot away, and a leaked snapshot key cannot sign commands. Rotating it
  makes the old snapshots refused once (one full rebuild per partition).
* **SHA-256** alone when it is not: that catches corruption, not forgery. A
  forged snapshot can then at worst hold a state the engine could not have
  made from the log (the topic's ACL, :mod:`deploy.acls`, lets only the
  correlator's principal write it); it can never run code.

Loading checks, in this order and before the body is decoded: the magic and
layout, the tag (constant-time compare), the format version, the state
version, the policy fingerprint and the partition; then the body must
decompress within :data:`MAX_STATE_BYTES` and validate as the states of
exactly the cells the header names. Anything wrong raises
:class:`SnapshotRefused` with the reason; the caller logs it and falls back to
the full rebuild, which is always correct, only slower.

``STATE_VERSION`` is derived from the state's JSON Schema (:func:`state_version`,
docstrings aside, with the key types of maps and tuples told from lists):
adding, removing, renaming or retyping a field anywhere in the state, changing
a window's bound, a default or the set of timer names gives another version, so
a snapshot of the old shape is refused (never half-loaded) without anyone
remembering to bump anything. What the schema cannot see is a change of
*meaning* with the same shape (a field that now counts something else): bump
:data:`STATE_REVISION` by hand for that.

The policy fingerprint is the SHA-256 of the merged policy (defaults and the
user's file) as canonical JSON: a snapshot judged under another policy would
carry decisions the new policy does not make, so it is refused and the state
rebuilt under the new one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from correlators.partitions import PartitionState
from correlators.policy import Policy
from correlators.state import EngineState

__all__ = ["FORMAT_VERSION", "MAX_SNAPSHOT_BYTES", "MAX_STATE_BYTES", "STATE_REVISION", "STATE_VERSION",
           "STATES", "Snapshot", "SnapshotRefused", "SnapshotSchedule", "capture_engines", "check_retained",
           "open_snapshot", "policy_fingerprint", "restore", "seal", "state_version"]

#: The byte layout of a sealed snapshot (the module docstring); 2: the body is JSON (1 was a pickle).
FORMAT_VERSION = 2
#: Bump by hand when the state's *meaning* changes with the same shape (the shape is versioned by itself).
STATE_REVISION = 1
#: The snapshot topic's ``max.message.bytes``; a bigger snapshot is not written (the worker says so).
MAX_SNAPSHOT_BYTES = 32 * 1024 * 1024
#: The most a body may decompress to; a bigger one is refused unread (a forged zlib bomb).
MAX_STATE_BYTES = 16 * MAX_SNAPSHOT_BYTES

#: Reads and writes a snapshot's body: cell -> engine state.
STATES: TypeAdapter[dict[str, EngineState]] = TypeAdapter(dict[str, EngineState])

MAGIC = b"FLSNAP\x00\x01"
_TAG_BYTES = 32
_LEN = struct.Struct(">I")


class SnapshotRefused(ValueError):
    """A snapshot that must not be installed; the message says why (the caller rebuilds in full).

    ``kind`` is what the refusal is counted as: ``refused`` (it does not open: forged, corrupt, another
    version, policy or partition), ``stale`` (retention deleted records right after it) or
    ``beyond_log_end`` (it claims records the events log has never held).
    """

    def __init__(self, message: str, kind: str = "refused") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Snapshot:
    """One partition's engine states (cell -> state) as of the record at ``position``."""

    partition: int
    position: int
    states: dict[str, EngineState]


class _ShapeSchema(GenerateJsonSchema):
    """JSON Schema that also tells the shapes JSON itself does not: a dict's key type (``dict[int, X]`` and
    ``dict[str, X]`` both read as objects) and a tuple from a list."""

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        out = super().dict_schema(schema)
        keys = schema.get("keys_schema")
        out["propertyNames"] = self.generate_inner(keys) if keys is not None else {}
        return out

    def tuple_schema(self, schema: core_schema.TupleSchema) -> JsonSchemaValue:
        return {**super().tuple_schema(schema), "x-python": "tuple"}


def _shape_only(schema: Any) -> Any:
    """``schema`` without what is prose, not shape: descriptions (docstrings) and titles."""
    if isinstance(schema, list):
        return [_shape_only(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k in ("description", "title"):
            continue
        if k in ("properties", "$defs"):  # name -> schema: the names are shape
            out[k] = {name: _shape_only(sub) for name, sub in v.items()}
        else:
            out[k] = _shape_only(v)
    return out


def state_version(state_type: Any = EngineState) -> int:
    """The version of ``state_type``'s shape: a hash of its JSON Schema (docstrings aside) and of
    :data:`STATE_REVISION`."""
    schema = TypeAdapter(state_type).json_schema(mode="validation", schema_generator=_ShapeSchema)
    text = json.dumps({"revision": STATE_REVISION, "schema": _shape_only(schema)}, sort_keys=True,
                      separators=(",", ":"))
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


#: The shape of the engine's state (derived; see the module docstring).
STATE_VERSION = state_version()


def policy_fingerprint(policy: Policy) -> str:
    """SHA-256 of the merged policy as canonical JSON (key order and whitespace do not matter)."""
    text = json.dumps(policy.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def capture_engines(state: PartitionState) -> tuple[int, list[str], bytes]:
    """(position, cells, the engines' states as JSON) of ``state``, as they are now.

    The part that must run where the state is mutated (the worker's event loop), between two
    records; compressing and sealing (:func:`seal`) may run elsewhere.
    """
    engines = state.engines
    cells = sorted(engines)
    return state.position, cells, STATES.dump_json({cell: engines[cell].state for cell in cells})


def _tag(key: bytes | None, data: bytes) -> bytes:
    if key:
        return hmac.new(key, data, hashlib.sha256).digest()
    return hashlib.sha256(data).digest()


def seal(partition: int, position: int, cells: list[str], body: bytes, fingerprint: str,
         key: bytes | None, level: int = 6) -> bytes:
    """The snapshot's bytes: header, compressed body and tag (HMAC with ``key``, else a checksum)."""
    header = json.dumps({"format": FORMAT_VERSION, "state": STATE_VERSION, "policy": fingerprint,
                         "partition": partition, "position": position, "cells": cells,
                         "auth": "hmac-sha256" if key else "sha256"}, sort_keys=True).encode()
    data = MAGIC + _LEN.pack(len(header)) + header + zlib.compress(body, level)
    return data + _tag(key, data)


def open_snapshot(blob: bytes, partition: int, fingerprint: str, key: bytes | None) -> Snapshot:
    """The snapshot in ``blob``, checked (see the module docstring) before its body is decoded.

    Raises :class:`SnapshotRefused` saying what is wrong.
    """
    if len(blob) < len(MAGIC) + _LEN.size + _TAG_BYTES or not blob.startswith(MAGIC):
        raise SnapshotRefused("not a faultline snapshot (bad magic or truncated)")
    data, tag = blob[:-_TAG_BYTES], blob[-_TAG_BYTES:]
    if not hmac.compare_digest(tag, _tag(key, data)):
        raise SnapshotRefused("authentication failed: the bytes were altered, or sealed with another key "
                              "(FAULTLINE_SNAPSHOT_KEY differs between writer and reader, or one of them has none)")
    (hlen,) = _LEN.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + _LEN.size
    try:
        header = json.loads(data[start:start + hlen])
    except ValueError as exc:
        raise SnapshotRefused(f"unreadable header: {exc}") from None
    if not isinstance(header, dict):
        raise SnapshotRefused("unreadable header: not an object")
    if header.get("format") != FORMAT_VERSION:
        raise SnapshotRefused(f"format version {header.get('format')!r}, this code reads {FORMAT_VERSION}")
    if header.get("state") != STATE_VERSION:
        raise SnapshotRefused(f"state version {header.get('state')!r}, this code's is {STATE_VERSION} "
                              "(the engine's state changed shape)")
    if header.get("policy") != fingerprint:
        raise SnapshotRefused("taken under another policy (its fingerprint differs from the current policy's)")
    if header.get("partition") != partition:
        raise SnapshotRefused(f"of partition {header.get('partition')!r}, not {partition}")
    position = header.get("position")
    if not isinstance(position, int) or position < 0:
        raise SnapshotRefused(f"bad position {position!r}")
    states = _decode(data[start + hlen:])
    if sorted(states) != header.get("cells"):
        raise SnapshotRefused(f"the body holds cells {sorted(states)}, the header names {header.get('cells')!r}")
    return Snapshot(partition, position, states)


def _decode(compressed: bytes) -> dict[str, EngineState]:
    """The body's states: decompressed within :data:`MAX_STATE_BYTES`, validated, consistent; else refused."""
    inflate = zlib.decompressobj()
    try:
        text = inflate.decompress(compressed, MAX_STATE_BYTES + 1)
    except zlib.error as exc:
        raise SnapshotRefused(f"body does not decompress: {exc}") from None
    if len(text) > MAX_STATE_BYTES or inflate.unconsumed_tail:
        raise SnapshotRefused(f"body decompresses to more than {MAX_STATE_BYTES} bytes")
    if not inflate.eof or inflate.unused_data:
        raise SnapshotRefused("body is not one complete zlib stream")
    try:
        states = STATES.validate_json(text)
    except ValidationError as exc:
        raise SnapshotRefused(f"body is not the engine's state ({exc.error_count()} errors, first: "
                              f"{_first_error(exc)})") from None
    except Exception as exc:  # a validator that raised something else: still only a refusal
        raise SnapshotRefused(f"body is not the engine's state ({type(exc).__name__}: {exc})") from None
    for cell, st in states.items():
        if bad := st.dangling():
            raise SnapshotRefused(f"state of cell {cell!r} is inconsistent: {bad[0]}"
                                  + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
    return states


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False, include_input=False)[0]
    return f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"


def restore(state: PartitionState, snap: Snapshot) -> None:
    """Install ``snap`` into a fresh ``state`` (one that holds no engine and no position yet): one engine per
    cell, made like the state's own (its policy) and holding the snapshot's state."""
    if state.position >= 0 or state.engines:
        raise ValueError(f"partition {state.partition}: restore a snapshot only into a fresh state")
    if snap.partition != state.partition:
        raise ValueError(f"snapshot of partition {snap.partition} cannot go into partition {state.partition}")
    template = state.new_engine()
    state.restore({cell: template.restored(s) for cell, s in snap.states.items()}, snap.position)


def check_retained(position: int, log_start: int, log_end: int) -> None:
    """Refuse a snapshot whose position the events partition cannot bring up to date from.

    ``log_start`` and ``log_end`` are the partition's watermarks (the first offset retained, the next
    one to be written). The records right after the snapshot must still be there: when retention
    deleted some (``position < log_start - 1``) it would skip them. And it cannot be of records the
    log never held (``position >= log_end``): restored, it would make every record up to its position
    look judged already, and the worker would skip them all -- blind until the log reached it (a
    position of 10**12: for ever). Even sealed with the real key, such a snapshot is refused and the
    state rebuilt from the log start instead, as without a snapshot.
    """
    if position >= log_end:
        raise SnapshotRefused(f"taken at offset {position}, but the events partition ends before offset {log_end}: "
                              "it claims records the log never held", "beyond_log_end")
    if position < log_start - 1:
        raise SnapshotRefused(f"taken at offset {position}, but the events partition starts at {log_start} now "
                              f"(retention deleted offsets {position + 1}-{log_start - 1})", "stale")


@dataclass
class SnapshotSchedule:
    """When each partition's next snapshot is due: every ``every_events`` judged events or ``every_s``
    seconds (monotonic), whichever comes first, counted from the partition's last snapshot or from its
    first record here (a batch record counts its events: the bound is on what a takeover replays).
    ``every_events`` <= 0: never."""

    every_events: int
    every_s: float
    _since: dict[int, tuple[int, float]] = field(default_factory=dict)

    def due(self, partition: int, now: float, events: int = 1) -> bool:
        """Count one judged record of ``partition`` (holding ``events``); whether a snapshot is due after it."""
        if self.every_events <= 0:
            return False
        count, since = self._since.get(partition, (0, now))
        count += events
        self._since[partition] = (count, since)
        return count >= self.every_events or now - since >= self.every_s

    def taken(self, partition: int, now: float) -> None:
        """A snapshot of ``partition`` was taken at ``now``: count afresh."""
        self._since[partition] = (0, now)

    def forget(self, partitions: list[int]) -> None:
        """Partitions no longer held (revoked)."""
        for p in partitions:
            self._since.pop(p, None)
