"""Read a capture file line by line without ever holding more than one allowed line.

A plain ``for line in file`` reads a whole line into memory however long it
is: a 10 MB line costs 10 MB, a 10 GB file without a newline costs the
machine. :func:`read_capture_lines` reads at most :data:`~producers.capture.MAX_LINE_BYTES`
(plus its line ending) at a time; a longer line is skipped in chunks and
stands in the output as an :class:`OversizedLine` (its first bytes and its
size), which the screen refuses with the reason. So memory stays bounded and
the line numbers of the lines after it stay right.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from producers.capture import MAX_LINE_BYTES

__all__ = ["HEAD_BYTES", "OversizedLine", "read_capture_lines"]

#: How much of an oversized line is kept, to show in its dead letter.
HEAD_BYTES = 4096
_SKIP_CHUNK = 1 << 16


@dataclass(frozen=True)
class OversizedLine:
    """A line longer than allowed, not read into memory: its first bytes and its whole size."""

    head: bytes
    size: int  # bytes, without the line ending


def _content_length(line: bytes) -> int:
    if line.endswith(b"\r\n"):
        return len(line) - 2
    return len(line) - 1 if line.endswith(b"\n") else len(line)


def read_capture_lines(stream: BinaryIO, max_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes | OversizedLine]:
    """Every line of ``stream`` (with its line ending), or an :class:`OversizedLine` in place
    of one longer than ``max_bytes`` (line ending not counted)."""
    limit = max_bytes + 2  # room for "\r\n"
    while True:
        line = stream.readline(limit)
        if not line:
            return
        if len(line) < limit or line.endswith(b"\n"):
            if _content_length(line) <= max_bytes:
                yield line
                continue
            size = _content_length(line)
            yield OversizedLine(head=line[: min(size, HEAD_BYTES)], size=size)
            continue
        size, tail = len(line), line[-2:]
        while not tail.endswith(b"\n"):
            chunk = stream.readline(_SKIP_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            tail = (tail + chunk)[-2:]
        size -= 2 if tail == b"\r\n" else 1 if tail.endswith(b"\n") else 0
        yield OversizedLine(head=line[: min(size, HEAD_BYTES)], size=size)
