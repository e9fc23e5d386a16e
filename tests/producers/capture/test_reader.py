"""Reading a capture file: lines as they are, a line over the limit as its size, memory bounded."""

from __future__ import annotations

import io

import pytest

from producers.capture import MAX_LINE_BYTES
from producers.capture.reader import HEAD_BYTES, OversizedLine, read_capture_lines


class CountingReader(io.BytesIO):
    """Records the largest read it was asked for: an unbounded ``readline()`` shows up as -1."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.asked: list[int] = []

    def readline(self, size: int | None = -1, /) -> bytes:
        self.asked.append(-1 if size is None else size)
        return super().readline(size)


def read(data: bytes, max_bytes: int = MAX_LINE_BYTES) -> list[bytes | OversizedLine]:
    return list(read_capture_lines(io.BytesIO(data), max_bytes))


def test_lines_come_as_they_are_with_their_endings() -> None:
    assert read(b'{"a": 1}\n{"b": 2}\r\n\nlast') == [b'{"a": 1}\n', b'{"b": 2}\r\n', b"\n", b"last"]
    assert read(b"") == []


@pytest.mark.parametrize("ending", [b"\n", b"\r\n"])
def test_a_line_of_exactly_the_limit_is_whole(ending: bytes) -> None:
    assert read(b"x" * 10 + ending + b"next\n", max_bytes=10) == [b"x" * 10 + ending, b"next\n"]
    assert read(b"x" * 10, max_bytes=10) == [b"x" * 10]


@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n"])
@pytest.mark.parametrize("size", [11, 12, 13, 1000])
def test_a_line_over_the_limit_is_its_head_and_size(size: int, ending: bytes) -> None:
    out = read(b"y" * size + ending + (b"after\n" if ending else b""), max_bytes=10)
    assert out[0] == OversizedLine(head=b"y" * min(size, 12), size=size)
    assert out[1:] == ([b"after\n"] if ending else [])


def test_a_10_mb_line_is_skipped_in_bounded_reads_and_the_next_lines_count() -> None:
    huge = b'{"ts": "2026-04-22T03:00:00Z", "source": "kernel", "line": "' + b"x" * (10 << 20) + b'"}'
    stream = CountingReader(b'{"first": 1}\n' + huge + b"\r\n" + b'{"next": 2}\n')
    out = list(read_capture_lines(stream))
    assert out[0] == b'{"first": 1}\n' and out[2] == b'{"next": 2}\n' and len(out) == 3
    oversized = out[1]
    assert isinstance(oversized, OversizedLine)
    assert oversized.size == len(huge) and oversized.head == huge[:HEAD_BYTES]
    assert -1 not in stream.asked and max(stream.asked) <= MAX_LINE_BYTES + 2


def test_a_huge_last_line_without_a_newline() -> None:
    out = read(b"ok\n" + b"z" * 100_000, max_bytes=1000)
    assert out == [b"ok\n", OversizedLine(head=b"z" * 1002, size=100_000)]
