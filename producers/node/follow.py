"""Follow a growing text file across rotation and truncation, remembering where it stopped.

:class:`FileFollower` returns the complete lines appended since its last call
(a trailing partial line waits for its newline). Its position -- the file's
inode, the offset after the last line returned and a fingerprint of the bytes
just before it -- is saved in a state file after every call, so a new
follower on the same state file (an agent restart) goes on exactly where the
old one stopped: no line twice, none lost.

- **First start** (no state file): an existing file is read from its end
  (history is not news); a file that appears later is read from its start.
- **Rotation by rename** (``kern.log`` -> ``kern.log.1``, new ``kern.log``):
  the old file is read to its end, then the new one from its start. After a
  restart, a file rotated while the agent was down is found again by its
  inode among its siblings, and its rest is read first.
- **Truncation or in-place rewrite** (``copytruncate``, ``> file``): the file
  is shorter than the offset, or the bytes before the offset changed; it is
  read again from its start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

from producers.node.state import load_state, save_state

__all__ = ["FileFollower"]

_FINGERPRINT_BYTES = 64
_MAX_REOPENS = 4  # rotations handled within one call


class FileFollower:
    """New complete lines of ``path`` per :meth:`read_lines` call, at most ``max_bytes`` a call."""

    def __init__(self, path: Path, state_path: Path, max_bytes: int = 1 << 20) -> None:
        self.path = Path(path)
        self.state_path = state_path
        self.max_bytes = max_bytes
        self._fh: BinaryIO | None = None
        self._inode: int | None = None
        self._pos = 0  # offset after the last complete line returned
        self._partial = b""
        self._fingerprint = b""
        self._saved: dict[str, Any] | None = load_state(state_path)
        self._first_start = self._saved is None

    def read_lines(self) -> list[str]:
        """The complete lines written since the last call (without line endings)."""
        if self._fh is None and not self._open_initial():
            return []
        lines: list[bytes] = []
        budget = self.max_bytes
        for _ in range(_MAX_REOPENS):
            self._check_rewritten()
            budget -= self._read_available(lines, budget)
            if budget <= 0 or not self._switch_if_rotated(lines):
                break
        self._save()
        return [raw.rstrip(b"\r").decode("utf-8", errors="replace") for raw in lines]

    def close(self) -> None:
        """Save the position and close the file."""
        if self._fh is not None:
            self._save()
            self._fh.close()
            self._fh = None

    # --- opening ----------------------------------------------------------------------

    def _open_initial(self) -> bool:
        """Open where the saved state says (or per the first-start rule); False if nothing to open."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._first_start = False  # a file that appears later is new from its first byte
            return False
        saved = self._saved or {}
        inode, offset = saved.get("inode"), saved.get("offset")
        fingerprint = bytes.fromhex(str(saved.get("fingerprint", "")))
        if self._first_start:
            self._open(self.path, st.st_size, b"")
            self._first_start = False
        elif isinstance(inode, int) and isinstance(offset, int) and inode != st.st_ino:
            old = self._find_by_inode(inode)
            if old is not None:
                self._open(old, offset, fingerprint)
            else:
                self._open(self.path, 0, b"")
        else:
            self._open(self.path, offset if isinstance(offset, int) else 0, fingerprint)
        return True

    def _open(self, path: Path, offset: int, fingerprint: bytes) -> None:
        fh = open(path, "rb")  # held across calls; closed by close() or the next rotation
        size = os.fstat(fh.fileno()).st_size
        if offset > size:
            offset, fingerprint = 0, b""
        fh.seek(offset)
        self._fh, self._inode = fh, os.fstat(fh.fileno()).st_ino
        self._pos, self._partial, self._fingerprint = offset, b"", fingerprint

    def _find_by_inode(self, inode: int) -> Path | None:
        """The sibling of ``path`` with ``inode`` (where a rotation renamed it), if any."""
        try:
            siblings = list(self.path.parent.iterdir())
        except OSError:
            return None
        for sibling in siblings:
            try:
                if sibling.stat().st_ino == inode and sibling.is_file():
                    return sibling
            except OSError:
                continue
        return None

    # --- reading ----------------------------------------------------------------------

    def _read_available(self, lines: list[bytes], budget: int) -> int:
        """Append complete lines read now to ``lines``; return the bytes read."""
        assert self._fh is not None
        data = self._fh.read(max(budget, 0))
        if not data:
            return 0
        chunk = self._partial + data
        *complete, self._partial = chunk.split(b"\n")
        if complete:
            lines.extend(complete)
            consumed = len(chunk) - len(self._partial)
            self._fingerprint = (self._fingerprint + chunk[:consumed])[-_FINGERPRINT_BYTES:]
            self._pos += consumed
        return len(data)

    def _check_rewritten(self) -> None:
        """Start over if the file was truncated or rewritten under the saved position."""
        assert self._fh is not None
        fd = self._fh.fileno()
        size = os.fstat(fd).st_size
        n = len(self._fingerprint)
        if size >= self._pos >= n and (n == 0 or os.pread(fd, n, self._pos - n) == self._fingerprint):
            return
        self._fh.seek(0)
        self._pos, self._partial, self._fingerprint = 0, b"", b""

    def _switch_if_rotated(self, lines: list[bytes]) -> bool:
        """At the end of a rotated-away file, move to the file now at ``path``; True if moved."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False  # renamed, the new file not created yet: keep the old one
        if st.st_ino == self._inode:
            return False
        assert self._fh is not None
        if self._fh.read(1):  # the old file grew since we read it: finish it first
            self._fh.seek(-1, os.SEEK_CUR)
            return True
        if self._partial:  # an unterminated last line of a finished file is still a line
            lines.append(self._partial)
        self._fh.close()
        self._open(self.path, 0, b"")
        return True

    def _save(self) -> None:
        state: dict[str, Any] = {"inode": self._inode, "offset": self._pos, "fingerprint": self._fingerprint.hex()}
        if state != self._saved:
            save_state(self.state_path, state)
            self._saved = state
