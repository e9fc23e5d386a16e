"""Text from outside, made harmless for a terminal: no control character or bidi override gets through.

Log lines, names, paths and reasons come from training jobs, kernels and topics anyone with a
credential may write. Printed as they are, ``ESC]0;…BEL`` retitles the terminal, ``ESC[2J`` clears
it, ``ESC[8m`` hides what follows, a carriage return overwrites a line and a right-to-left override
(U+202E) shows text other than what is there. The rule: **every character that is a C0 or C1 control
(but newline and tab), DEL, or a bidirectional control becomes its escape, written out** (``\\x1b``,
``\\u202e``), so a person sees that something was there and what, and nothing acts on the terminal.

One helper, :func:`terminal_safe`, applied at the edges: :class:`SafeStream` wraps the standard
streams of the ``faultline`` command (every ``print``, error and log line), the tables escape each cell
(:mod:`faultline.terminal`), and :func:`install_safe_log_records` makes every log record of a process
(the worker's, the sink's) safe before any handler formats it. ``--json`` output keeps the original
text, escaped the JSON way (``\\u001b``), which this leaves unchanged.
"""

from __future__ import annotations

import logging
import re
from typing import Any, TextIO

__all__ = ["SafeStream", "UNSAFE", "install_safe_log_records", "terminal_safe"]

#: C0 controls but tab and newline, DEL, C1 controls, and the bidirectional marks, embeddings, overrides,
#: isolates, plus the line and paragraph separators.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every unsafe character (:data:`UNSAFE`) written as its escape."""
    return UNSAFE.sub(_escape, text)


class SafeStream:
    """A text stream that writes everything through :func:`terminal_safe` (the rest is the wrapped one's)."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(terminal_safe(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer...
        return getattr(self.raw, name)


_installed = False


def install_safe_log_records() -> None:
    """Every log record of this process made terminal-safe when it is made (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    make = logging.getLogRecordFactory()

    def safe_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: the handler reports it as it always did
            return record
        # args () and not None: Faust's formatter (mode.utils.logging) wraps a non-tuple in a tuple, and
        # ``msg % (None,)`` then fails every worker log line
        record.msg, record.args = terminal_safe(message), ()
        return record

    logging.setLogRecordFactory(safe_record)
