"""Which lines of a training log are evidence, and which are only the noise around it.

A line is kept when :func:`producers.framework.parse_framework_line` names a
failure in it -- an NCCL watchdog timeout, the ``last enqueued / last
completed NCCL work`` line, an NCCL or CUDA error, a CUDA out-of-memory --
with one refinement for Python tracebacks: only the exception line that ends
a traceback counts (``RuntimeError: ...`` printed on its own is often just a
log message), and of a chain of tracebacks (``During handling of the above
exception...``) only the last one's. The frame and source lines of a
traceback are never evidence, even when they quote an error message
(``raise RuntimeError("CUDA error: ...")``).

Because a chain may continue on the next read, the exception line of a
traceback is held back until something else is written, or until the caller
says a read went by without more (:meth:`ErrorLineSelector.tick`).
"""

from __future__ import annotations

import re
from typing import Generic, TypeVar

from producers.framework import parse_framework_line
from streams.events import AppError

__all__ = ["ErrorLineSelector"]

T = TypeVar("T")

# Launcher prefixes before a worker's output (as in producers.framework.torch_lines).
_PREFIX = re.compile(r"(?:\[(?:rank|default)\d+\]:|\[\d+,\d+\]<std(?:out|err)>:|\d+: )")
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


def _content(line: str) -> str:
    """The line without a launcher prefix (one space after it dropped too), indentation kept."""
    m = _PREFIX.match(line)
    if m is None:
        return line
    rest = line[m.end() :]
    return rest[1:] if rest.startswith(" ") else rest


class ErrorLineSelector(Generic[T]):
    """Feed lines (each with a tag, e.g. when it was read); get back the ones that are evidence."""

    def __init__(self) -> None:
        self._in_traceback = False
        self._pending: tuple[str, T] | None = None
        self._pending_ticks = 0

    def feed(self, line: str, tag: T) -> list[tuple[str, T]]:
        """The lines (with their tags) that ``line`` makes final: possibly a held exception line, and ``line``."""
        content = _content(line)
        stripped = content.strip()
        if stripped.startswith(_TRACEBACK):
            self._in_traceback = True
            self._pending = None  # a chained traceback: its own exception line supersedes
            return []
        if not stripped or stripped in _CHAINED:
            return []
        if self._in_traceback:
            if content[:1].isspace():
                return []  # frames, source lines, carets
            self._in_traceback = False
            if parse_framework_line(line) is not None:
                self._pending, self._pending_ticks = (line, tag), 0
            return []
        out = self.flush()
        if not isinstance(parse_framework_line(line), AppError | None):
            out.append((line, tag))
        return out

    def tick(self) -> list[tuple[str, T]]:
        """Call after each read: a held exception line that waited a whole read is final."""
        if self._pending is None:
            return []
        if self._pending_ticks >= 1:
            return self.flush()
        self._pending_ticks += 1
        return []

    def flush(self) -> list[tuple[str, T]]:
        """The held exception line, if any (at the end of the input)."""
        pending, self._pending = self._pending, None
        return [pending] if pending is not None else []
