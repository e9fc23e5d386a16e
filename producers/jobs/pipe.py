"""Complete lines from a pipe (a launcher's stdout, the agent's stdin), read without blocking.

The file counterpart, with rotation and a saved position, is
:class:`producers.node.follow.FileFollower`; a pipe has neither: what was
written before the reader started is the writer's to keep.
"""

from __future__ import annotations

import os

__all__ = ["PipeReader"]

_MAX_LINE = 64 * 1024  # a longer line is passed on in pieces of this size


class PipeReader:
    """New complete lines of the pipe ``fd`` per :meth:`read_lines` call, at most ``max_bytes`` a call.

    The descriptor is switched to non-blocking mode. At end of input a trailing
    unterminated line is still returned, and :attr:`eof` becomes true.
    """

    def __init__(self, fd: int, max_bytes: int = 1 << 20, close_fd: bool = False) -> None:
        self.fd = fd
        self.max_bytes = max_bytes
        self.eof = False
        self._close_fd = close_fd
        self._partial = b""
        os.set_blocking(fd, False)

    def read_lines(self) -> list[str]:
        """The complete lines written since the last call (without line endings)."""
        data = b""
        while not self.eof and len(data) < self.max_bytes:
            try:
                chunk = os.read(self.fd, self.max_bytes - len(data))
            except BlockingIOError:
                break
            if not chunk:
                self.eof = True
                break
            data += chunk
        *complete, self._partial = (self._partial + data).split(b"\n")
        while len(self._partial) > _MAX_LINE:
            complete.append(self._partial[:_MAX_LINE])
            self._partial = self._partial[_MAX_LINE:]
        if self.eof and self._partial:
            complete.append(self._partial)
            self._partial = b""
        return [raw.rstrip(b"\r").decode("utf-8", errors="replace") for raw in complete]

    def close(self) -> None:
        """Close the descriptor if this reader owns it."""
        if self._close_fd:
            os.close(self.fd)
            self._close_fd = False
