"""The spool's cursor on disk, written in place: saving it never needs free space.

A cursor replaced by rename (write a temporary file, rename it over the old one) needs a free
block for every save, so on a full disk the publisher could deliver but never record that it had
(issue 26). ``cursor.dat`` is instead two fixed slots of :data:`SLOT_BYTES`, allocated when the
file is created; a save overwrites the slot that does not hold the newest state with the state
and a sequence number one higher, as a checksummed line (:func:`producers.spool.records.frame`)
padded with spaces, and syncs it. Loading takes the valid slot with the higher sequence number.
So a save needs no block the file does not already have, and a power cut in the middle of one
tears at most the slot being written: the other still holds the state saved before it.

A ``cursor.json`` of an earlier version (one JSON object, replaced by rename) is read when there
is no ``cursor.dat`` yet, and removed once the first in-place save is on disk.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path
from typing import Any

from producers.node.state import load_state
from producers.spool.records import frame, unframe

__all__ = ["NO_SPACE", "SLOT_BYTES", "CursorFile"]

log = logging.getLogger("faultline.producer.spool")

#: The bytes of one slot: a cursor's line is about 90.
SLOT_BYTES = 256
#: The errors of a write that found no room (a full disk, a quota).
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_NAME = "cursor.dat"
_LEGACY = "cursor.json"


class CursorFile:
    """The two-slot cursor file of a spool directory (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / _NAME
        self._seq = 0
        self._fd: int | None = None
        self._legacy = False

    def load(self) -> dict[str, Any] | None:
        """The newest valid state saved, or None (no cursor yet, or neither slot readable)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        best: dict[str, Any] | None = None
        for slot in range(2):
            raw = data[slot * SLOT_BYTES:(slot + 1) * SLOT_BYTES]
            payload = unframe(raw.split(b"\n", 1)[0] + b"\n", legacy_ok=False) if b"\n" in raw else None
            try:
                state = json.loads(payload) if payload is not None else None
            except ValueError:
                state = None
            if isinstance(state, dict) and isinstance(state.get("seq"), int) and state["seq"] >= self._seq:
                self._seq, best = state["seq"], state
        if best is None:
            self._legacy = (self.directory / _LEGACY).exists()
            if self._legacy:
                return load_state(self.directory / _LEGACY)
            if data.strip(b"\0 "):
                log.error("spool: neither slot of %s is readable; starting from the oldest record", self.path)
            return None  # (no state saved yet: a file just created holds zeros)
        return {k: v for k, v in best.items() if k != "seq"}

    def prepare(self) -> None:
        """Create the file now, while there may be room (a full disk: the first :meth:`save` tries again)."""
        try:
            self._open()
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise
            log.warning("spool: no room to create %s yet", self.path)

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` into the older slot and sync it (raises OSError if the file cannot be made)."""
        fd = self._open()
        line = frame(json.dumps({**state, "seq": self._seq + 1}, separators=(",", ":")).encode() + b"\n")
        if len(line) > SLOT_BYTES:
            raise ValueError(f"spool: a cursor of {len(line)} bytes does not fit its slot")
        os.pwrite(fd, line.ljust(SLOT_BYTES, b" "), ((self._seq + 1) % 2) * SLOT_BYTES)
        os.fdatasync(fd)
        self._seq += 1
        if self._legacy:
            (self.directory / _LEGACY).unlink(missing_ok=True)
            (self.directory / (_LEGACY + ".tmp")).unlink(missing_ok=True)
            self._legacy = False

    def _open(self) -> int:
        """The file, created with both slots allocated (the only time it needs space)."""
        if self._fd is not None:
            return self._fd
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < 2 * SLOT_BYTES:
                try:
                    os.posix_fallocate(fd, 0, 2 * SLOT_BYTES)
                except OSError as exc:
                    if exc.errno in NO_SPACE:
                        raise
                    os.ftruncate(fd, 2 * SLOT_BYTES)  # a filesystem without fallocate
                os.fsync(fd)
            if created:
                dfd = os.open(self.directory, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        except OSError:
            os.close(fd)
            if created:
                self.path.unlink(missing_ok=True)
            raise
        self._fd = fd
        return fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
