"""Snapshots of one events partition's correlator state, so a takeover replays a bounded tail.

Without them a worker that takes a partition over (a crash, a rebalance, a
scale-out) rebuilds every cell's engine from the partition's log start: the
whole retained log. With them it installs the partition's newest snapshot and
replays only the records after it (:mod:`correlators.app`, ``catch_up``).

What a snapshot is. Every cell's :class:`~correlators.engine.Correlator` of one
partition and the offset of the last record folded into them (the
:class:`~correlators.partitions.PartitionState` invariant: the fold of a
*prefix* of the log, so a snapshot is as good as a rebuild up to that offset).
The worker takes one only at a record boundary where every decision up to that
offset is on its topic, so a restore never skips publishing anything.

The bytes (:func:`seal`, :func:`open_snapshot`)::

    MAGIC (8 bytes) | header length (4, big endian) | header (JSON) | body (zlib(pickle)) | tag (32)

The header names the format version (:data:`FORMAT_VERSION`, the layout
above), the state version (:data:`STATE_VERSION`), the policy fingerprint
(:func:`policy_fingerprint`), the partition, its position, the cells and how
the tag was made. The tag covers everything before it:

* **HMAC-SHA256** with ``FAULTLINE_SNAPSHOT_KEY`` when it is set -- a dedicated
  key, not the command signing keys, so rotating those does not throw every
  snapshot away, and a leaked snapshot key cannot sign commands. Rotating it
  makes the old snapshots refused once (one full rebuild per partition).
* **SHA-256** alone when it is not: that catches corruption, not forgery. Then
  the trust boundary is the topic's ACL: only the correlator's principal may
  write ``<app id>-snapshots`` (:mod:`deploy.acls`). Unpickling runs code, so a
  deployment where others can write that topic must set the key.

Loading checks, in this order and before anything is unpickled: the magic and
layout, the tag (constant-time compare), the format version, the state
version, the policy fingerprint and the partition. Anything wrong raises
:class:`SnapshotRefused` with the reason; the caller logs it and falls back to
the full rebuild, which is always correct, only slower.

``STATE_VERSION``: bump it by hand whenever the shape of the engine's state
changes -- a field of :class:`~correlators.state.EngineState` or of an
object it holds (incidents, timers, topology, health, ledger...) is added,
removed, renamed or changes meaning, or a class it holds moves module. A
snapshot of another version is refused (never half-loaded), so forgetting to
bump is the one way to restore a wrong state: the test
``tests/correlators/test_snapshots.py`` pins the field names of the engine's
state to catch the common case.

The policy fingerprint is the SHA-256 of the merged policy (defaults and the
user's file) as canonical JSON: a snapshot judged under another policy would
carry decisions the new policy does not make, so it is refused and the state
rebuilt under the new one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import pickle
import struct
import zlib
from dataclasses import dataclass, field

from correlators.engine import Correlator
from correlators.partitions import PartitionState
from correlators.policy import Policy

__all__ = ["FORMAT_VERSION", "STATE_VERSION", "MAX_SNAPSHOT_BYTES", "Snapshot", "SnapshotRefused", "SnapshotSchedule",
           "check_retained", "open_snapshot", "pickle_engines", "policy_fingerprint", "restore", "seal"]

#: The byte layout of a sealed snapshot (the module docstring).
FORMAT_VERSION = 1
#: The shape of the engine's state; bump by hand when it changes (see the module docstring).
STATE_VERSION = 2
#: The snapshot topic's ``max.message.bytes``; a bigger snapshot is not written (the worker says so).
MAX_SNAPSHOT_BYTES = 32 * 1024 * 1024

MAGIC = b"FLSNAP\x00\x01"
_TAG_BYTES = 32
_LEN = struct.Struct(">I")


class SnapshotRefused(ValueError):
    """A snapshot that must not be installed; the message says why (the caller rebuilds in full)."""


@dataclass(frozen=True)
class Snapshot:
    """One partition's engines (cell -> engine) as of the record at ``position``."""

    partition: int
    position: int
    engines: dict[str, Correlator]


def policy_fingerprint(policy: Policy) -> str:
    """SHA-256 of the merged policy as canonical JSON (key order and whitespace do not matter)."""
    text = json.dumps(policy.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def pickle_engines(state: PartitionState) -> tuple[int, list[str], bytes]:
    """(position, cells, pickled engines) of ``state``, as they are now.

    The part that must run where the state is mutated (the worker's event loop), between two
    records; compressing and sealing (:func:`seal`) may run elsewhere.
    """
    engines = state.engines
    return state.position, sorted(engines), pickle.dumps(engines, protocol=pickle.HIGHEST_PROTOCOL)


def _tag(key: bytes | None, data: bytes) -> bytes:
    if key:
        return hmac.new(key, data, hashlib.sha256).digest()
    return hashlib.sha256(data).digest()


def seal(partition: int, position: int, cells: list[str], pickled: bytes, fingerprint: str,
         key: bytes | None, level: int = 6) -> bytes:
    """The snapshot's bytes: header, compressed body and tag (HMAC with ``key``, else a checksum)."""
    header = json.dumps({"format": FORMAT_VERSION, "state": STATE_VERSION, "policy": fingerprint,
                         "partition": partition, "position": position, "cells": cells,
                         "auth": "hmac-sha256" if key else "sha256"}, sort_keys=True).encode()
    data = MAGIC + _LEN.pack(len(header)) + header + zlib.compress(pickled, level)
    return data + _tag(key, data)


def open_snapshot(blob: bytes, partition: int, fingerprint: str, key: bytes | None) -> Snapshot:
    """The snapshot in ``blob``, checked (see the module docstring) before it is unpickled.

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
    try:
        engines = pickle.loads(zlib.decompress(data[start + hlen:]))  # noqa: S301 -- authenticated above
    except Exception as exc:  # authenticated yet unloadable: a code change the state version missed
        raise SnapshotRefused(f"could not unpickle ({type(exc).__name__}: {exc}); bump STATE_VERSION "
                              "when the engine's state changes shape") from None
    if not isinstance(engines, dict) or not all(isinstance(e, Correlator) for e in engines.values()):
        raise SnapshotRefused("the body is not a map of cell to engine")
    return Snapshot(partition, position, engines)


def restore(state: PartitionState, snap: Snapshot) -> None:
    """Install ``snap`` into a fresh ``state`` (one that holds no engine and no position yet)."""
    if state.position >= 0 or state.engines:
        raise ValueError(f"partition {state.partition}: restore a snapshot only into a fresh state")
    if snap.partition != state.partition:
        raise ValueError(f"snapshot of partition {snap.partition} cannot go into partition {state.partition}")
    state.restore(snap.engines, snap.position)


def check_retained(position: int, log_start: int) -> None:
    """Refuse a snapshot older than what the events partition still holds.

    The records right after it must still be there to bring it up to date; when retention deleted
    some (``position < log_start - 1``) it would skip them, so the state is rebuilt from the log
    start instead, as without a snapshot.
    """
    if position < log_start - 1:
        raise SnapshotRefused(f"taken at offset {position}, but the events partition starts at {log_start} now "
                              f"(retention deleted offsets {position + 1}-{log_start - 1})")


@dataclass
class SnapshotSchedule:
    """When each partition's next snapshot is due: every ``every_events`` judged records or ``every_s``
    seconds (monotonic), whichever comes first, counted from the partition's last snapshot or from its
    first record here. ``every_events`` <= 0: never."""

    every_events: int
    every_s: float
    _since: dict[int, tuple[int, float]] = field(default_factory=dict)

    def due(self, partition: int, now: float) -> bool:
        """Count one judged record of ``partition``; whether a snapshot is due after it."""
        if self.every_events <= 0:
            return False
        count, since = self._since.get(partition, (0, now))
        count += 1
        self._since[partition] = (count, since)
        return count >= self.every_events or now - since >= self.every_s

    def taken(self, partition: int, now: float) -> None:
        """A snapshot of ``partition`` was taken at ``now``: count afresh."""
        self._since[partition] = (0, now)

    def forget(self, partitions: list[int]) -> None:
        """Partitions no longer held (revoked)."""
        for p in partitions:
            self._since.pop(p, None)
