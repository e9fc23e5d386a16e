"""The disk spool: append-only segments of checksummed records, a durable cursor, a size bound.

What a crash may leave, and what this module makes of it:

* **kill -9** (the page cache survives): every appended record is in its segment; a record
  whose ``write`` was cut short by the kill is a line without its end, cut off at the next start.
* **power cut** (the page cache is lost): :meth:`Spool.append` returns only once its records are
  on the disk (``fdatasync`` of the segment; a new segment's directory entry ``fsync``-ed when it
  is created), so a record the caller was told is spooled survives. Bytes written after the last
  sync may be gone, zeroed or garbled; every record carries a CRC-32, so at the next start the
  tail segment is read back record by record and cut at the first one that is torn or fails its
  checksum (nothing after it was synced either). A bad record elsewhere (bit rot) is reported as
  such by :meth:`Spool.read` and never handed on as data.
* **the cursor** (``cursor.dat``: the first record not yet acknowledged, and ``handed_since``,
  see below) is written in place into one of two preallocated slots and synced
  (:mod:`producers.spool.cursor`) before any segment it finished is deleted, so it never points
  past what is still on disk, and saving it needs no free space.

**A full disk** (``ENOSPC``/``EDQUOT`` from a write or its sync; issue 26): what the failed
append wrote is cut off again (truncating needs no space), then room is made the way the size
bound makes it -- the oldest segment is evicted (if the tail is the only one, it is closed first
and a new tail begun) -- and the append tried again; what was evicted is handed back to the
caller (:class:`Appended`) to be counted. Only when nothing older is left to evict are the new
records themselves refused (counted too). Nothing stays wedged: the next append tries again,
and once the disk has room appends succeed with no step by anyone. So that evicting a segment
frees a useful share of a small disk, a segment holds at most 1/:data:`SEGMENTS_PER_DISK` of its
filesystem's size (and ``segment_bytes``).

A record on disk is one line: ``<crc32 of the payload, 8 hex digits> <payload>`` where the
payload is the caller's line (ending in its newline). Lines without the checksum (written by an
earlier version) are read as they are.

``handed_since`` (wall-clock ms, or None) is kept for the publisher: a time no later than the
first hand-off to Kafka of any record after the cursor (None: none of them was handed yet). A
restarted publisher reads the log from that time on to find the records its predecessor had
delivered but not yet recorded as delivered (:mod:`producers.spool.readback`).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from common.private import private_dir
from producers.spool.cursor import NO_SPACE, CursorFile
from producers.spool.records import frame, unframe

__all__ = ["Appended", "Spool", "SpoolEntry", "frame", "unframe"]

log = logging.getLogger("faultline.producer.spool")

_SEGMENT_SUFFIX = ".jsonl"
_SAVE_EVERY_S = 0.5
#: A segment holds at most this share of its filesystem, so that evicting one frees room on a small disk.
SEGMENTS_PER_DISK = 16
_MIN_SEGMENT = 4096


def _sync_dir(directory: Path) -> None:
    """Make the directory's entries (a new segment, a renamed cursor) survive a power cut."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Appended:
    """What :meth:`Spool.append` did: ``stored`` (False: refused, the disk full and nothing older left),
    and the segments it evicted to make room, as ``(segment, its unread lines)``."""

    stored: bool = True
    evicted: list[tuple[int, list[bytes]]] = field(default_factory=list)


@dataclass(frozen=True)
class SpoolEntry:
    """One record read from the spool: its segment, the offset just after it, its line.

    ``ok`` is False for a record that failed its checksum (``line`` is then empty): the reader
    must drop it, and count it, rather than deliver garbage.
    """

    segment: int
    end: int
    line: bytes
    ok: bool = True


class Spool:
    """Append-only checksummed segments with a durable committed cursor and a size bound.

    ``append`` writes at the tail and syncs; ``read`` returns records after the read pointer
    (from the cursor on at start); ``commit`` says everything before a position is done
    (saved, then finished segments deleted, at most every half second: see :meth:`save`);
    ``evict_oldest`` drops the oldest segment when the spool is over ``max_bytes``.
    """

    def __init__(self, directory: Path, max_bytes: int = 256 << 20, segment_bytes: int = 4 << 20) -> None:
        if segment_bytes * 2 > max_bytes:
            raise ValueError("spool: segment_bytes must be at most half of max_bytes")
        self.directory = Path(directory)
        private_dir(self.directory)  # what the node saw, before it is sent: this user's alone
        self.max_bytes = max_bytes
        disk = os.statvfs(self.directory)
        #: Where a segment is closed: ``segment_bytes``, or less on a small disk (see the module docstring).
        self.segment_bytes = min(segment_bytes, max(_MIN_SEGMENT, disk.f_blocks * disk.f_frsize // SEGMENTS_PER_DISK))
        #: Appends that found the disk full, and whether the last one did.
        self.disk_full_count = 0
        self.disk_full = False
        self._sizes = {self._number(p): p.stat().st_size for p in self.directory.glob(f"*{_SEGMENT_SUFFIX}")}
        self._cursor_file = CursorFile(self.directory)
        saved = self._cursor_file.load() or {}
        self._cursor_file.prepare()
        head = min(self._sizes, default=1)
        segment, offset = int(saved.get("segment", head)), int(saved.get("offset", 0))
        self._cursor = (segment, offset) if segment in self._sizes else (head, 0)
        #: Whether the state on disk says when records after its cursor were first handed on
        #: (False: a cursor from an earlier version, or none at all with records spooled).
        self.handed_since_known = "handed_since" in saved or not any(self._sizes.values())
        self.handed_since: int | None = saved.get("handed_since") if self.handed_since_known else None
        self._saved = (self._cursor, self.handed_since)
        self._saved_at = 0.0
        if not self._sizes:
            self._new_segment(self._cursor[0])
        self.torn = self._repair_tail()
        if self._cursor[0] == self.tail and self._cursor[1] > self._sizes[self.tail]:
            log.error("spool: the cursor points past the end of %s; resuming at its end", self._path(self.tail).name)
            self._cursor = (self.tail, self._sizes[self.tail])
        self._writer = self._open_tail()
        self._read_at = self._cursor
        self._reader: BinaryIO | None = None
        self.unread = self._count_from(*self._cursor)

    @property
    def tail(self) -> int:
        return max(self._sizes)

    @property
    def head(self) -> int:
        return min(self._sizes)

    @property
    def cursor(self) -> tuple[int, int]:
        """(segment, offset) of the first record not yet committed."""
        return self._cursor

    def _path(self, segment: int) -> Path:
        return self.directory / f"{segment:012d}{_SEGMENT_SUFFIX}"

    @staticmethod
    def _number(path: Path) -> int:
        return int(path.name[: -len(_SEGMENT_SUFFIX)])

    def _open_tail(self) -> int:
        return os.open(self._path(self.tail), os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def _new_segment(self, number: int) -> None:
        """Create an empty segment durably (its directory entry synced before any record goes in)."""
        self._path(number).touch()
        _sync_dir(self.directory)
        self._sizes[number] = 0

    def _repair_tail(self) -> int:
        """Cut the tail segment at its first torn or corrupt record; the number of bytes cut off."""
        path = self._path(self.tail)
        keep, framed = 0, False
        with open(path, "rb") as fh:
            for raw in fh:
                if unframe(raw, legacy_ok=not framed) is None:
                    break
                framed = framed or not raw.startswith(b"{")
                keep += len(raw)
        size = self._sizes[self.tail]
        if keep == size:
            return 0
        log.warning("spool: dropping %d bytes of a torn or corrupt record (and what follows) at the end of %s; "
                    "they were never reported as spooled", size - keep, path.name)
        with open(path, "r+b") as fh:
            fh.truncate(keep)
            os.fsync(fh.fileno())
        self._sizes[self.tail] = keep
        return size - keep

    def _count_from(self, segment: int, offset: int) -> int:
        count = 0
        for number in sorted(n for n in self._sizes if n >= segment):
            with open(self._path(number), "rb") as fh:
                fh.seek(offset if number == segment else 0)
                count += sum(1 for _ in fh)
        return count

    def size_of(self, segment: int) -> int:
        """Bytes in ``segment`` now."""
        return self._sizes[segment]

    def size_bytes(self) -> int:
        """Bytes not yet committed."""
        return sum(self._sizes.values()) - self._cursor[1]

    def append(self, lines: list[bytes]) -> Appended:
        """Add records (each one line, ending in a newline) at the tail; on disk when this returns stored
        (a full disk: see the module docstring)."""
        if any(not line.endswith(b"\n") or line.count(b"\n") != 1 for line in lines):
            raise ValueError("spool: every record is one line ending in a newline")
        data = b"".join(frame(line) for line in lines)
        done = Appended()
        while True:
            try:
                if self._sizes[self.tail] >= self.segment_bytes:
                    self._rotate()
                self._write(data)
                break
            except OSError as exc:
                if exc.errno not in NO_SPACE:
                    raise
                self.disk_full_count += 1
                self.disk_full = True
                evicted = self._make_room()
                if evicted is None:
                    log.error("spool: the disk of %s is full and nothing older is left to evict: %d records "
                              "refused", self.directory, len(lines))
                    done.stored = False
                    return done
                done.evicted.append(evicted)
        self.disk_full = False
        self.unread += len(lines)
        return done

    def _write(self, data: bytes) -> None:
        """Append ``data`` to the tail and sync it; on an error, cut off what was written and raise."""
        start = self._sizes[self.tail]
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._writer, view):]
            os.fdatasync(self._writer)
        except OSError:
            os.ftruncate(self._writer, start)
            raise
        self._sizes[self.tail] = start + len(data)

    def _make_room(self) -> tuple[int, list[bytes]] | None:
        """Evict the oldest segment (closing the tail first if it is the only one with records); None if
        there is nothing to evict but the new records."""
        if len(self._sizes) == 1:
            if self._sizes[self.tail] == self._cursor[1]:
                return None  # the tail holds nothing not yet committed
            try:
                self._rotate()
            except OSError as exc:
                if exc.errno not in NO_SPACE:
                    raise
                return None
        return self._evict_head()

    def _rotate(self) -> None:
        number = self.tail + 1
        self._new_segment(number)
        os.close(self._writer)
        self._writer = self._open_tail()

    def read(self, max_records: int) -> list[SpoolEntry]:
        """Up to ``max_records`` records after the read pointer, which moves past them."""
        entries: list[SpoolEntry] = []
        while len(entries) < max_records and self.unread > 0:
            segment, offset = self._read_at
            if self._reader is None:
                self._reader = open(self._path(segment), "rb")
                self._reader.seek(offset)
            raw = self._reader.readline()
            if raw:
                offset += len(raw)
                payload = unframe(raw)
                if payload is None:
                    log.error("spool: a record of segment %d fails its checksum (disk corruption); dropped",
                              segment)
                entries.append(SpoolEntry(segment, offset, payload or b"", ok=payload is not None))
                self._read_at = (segment, offset)
                self.unread -= 1
            elif segment < self.tail:
                self._reader.close()
                self._reader = None
                self._read_at = (min(n for n in self._sizes if n > segment), 0)
            else:
                break
        return entries

    def commit(self, segment: int, offset: int, handed_since: int | None = None) -> None:
        """Every record before ``(segment, offset)`` is done; ``handed_since`` as the module docstring says.

        Saved (and the segments it finished deleted) by :meth:`save`, at most every half second:
        a cursor saved a little late only makes a restart look at a few more records.
        """
        if (segment, offset) < self._cursor or segment not in self._sizes:
            return
        self._cursor = (segment, offset)
        self.handed_since = handed_since
        self.save()

    def mark_handed(self, at_ms: int) -> None:
        """A record after the cursor is about to be handed on (at wall-clock ``at_ms``): make sure the state
        on disk says that records after its cursor may be in Kafka, before any is."""
        if self.handed_since is None:
            self.handed_since = at_ms
        if self._saved[1] is None:
            self.save(force=True)

    def save(self, force: bool = False) -> None:
        """Write the cursor durably if it moved (and half a second passed, unless ``force``), then delete
        the segments it finished."""
        state = (self._cursor, self.handed_since)
        if state == self._saved or (not force and time.monotonic() - self._saved_at < _SAVE_EVERY_S):
            return
        try:
            self._cursor_file.save({"segment": self._cursor[0], "offset": self._cursor[1],
                                    "handed_since": self.handed_since})
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise
            # No room to create the cursor file: deleting what the cursor finished is still safe (a cursor
            # pointing at a deleted segment resumes at the oldest one left), and frees room for the next save.
            log.warning("spool: no room to create %s yet; saving the cursor later", self._cursor_file.path)
        else:
            self._saved, self._saved_at = state, time.monotonic()
        for number in [n for n in self._sizes if n < self._cursor[0]]:
            self._delete(number)

    def evict_oldest(self) -> tuple[int, list[bytes]] | None:
        """Drop the oldest segment if the spool is over its bound: ``(segment, its unread lines)``."""
        if self.size_bytes() <= self.max_bytes:
            return None
        if len(self._sizes) == 1:
            self._rotate()
        return self._evict_head()

    def _evict_head(self) -> tuple[int, list[bytes]]:
        oldest = self.head
        unread = self._unread_lines(oldest)
        self.unread -= len(unread)
        if self._read_at[0] == oldest:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            self._read_at = (oldest + 1, 0)
        self._cursor = max(self._cursor, (oldest + 1, 0))
        self.save(force=True)  # the cursor first, then the segment goes (save deletes what it finished)
        if oldest in self._sizes:
            self._delete(oldest)
        return oldest, unread

    def _unread_lines(self, segment: int) -> list[bytes]:
        if self._read_at[0] > segment:
            return []
        with open(self._path(segment), "rb") as fh:
            fh.seek(self._read_at[1] if self._read_at[0] == segment else 0)
            return [payload for raw in fh.readlines() if (payload := unframe(raw)) is not None]

    def _delete(self, segment: int) -> None:
        self._path(segment).unlink(missing_ok=True)
        del self._sizes[segment]

    def close(self) -> None:
        self.save(force=True)
        os.close(self._writer)
        self._cursor_file.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
