"""librdkafka's own log lines, through Python's logging, with repeats collapsed.

Left alone, librdkafka writes straight to standard error (``%3|1796116654.334|FAIL|rdkafka#producer-1|
...``), bypassing logging: an unreachable broker prints a ``FAIL`` line per reconnect attempt, a
couple of hundred before the error that says what to do. Every confluent-kafka client that
``common`` and the producers create is given :data:`KAFKA_LOG` as its ``logger``
(:func:`with_logger`), so the lines become records of the ``faultline.kafka`` logger (levels
mapped by confluent-kafka from syslog's) that the process's logging configuration shows or not.

:class:`CollapseRepeats` (installed on that logger) lets the first of a kind of line through and
swallows the same line again for ``window_s`` seconds, counting; the first one after the window
says how many it stands for. "The same line" ignores numbers (timestamps, milliseconds, client
counters), so ``Connect to 127.0.0.1:1 failed ... (after 0ms ...)`` and ``(after 3ms ...)`` are one.

A client only hands its log lines over when it is polled; an admin client that only lists topics is
not, so :func:`common.kafka_admin.check_broker` polls it once before it reports the broker unreachable.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["KAFKA_LOG", "CollapseRepeats", "with_logger"]

_NUMBERS = re.compile(r"\d+")


class CollapseRepeats(logging.Filter):
    """Let one record of a kind through per ``window_s``; the next one after says how many it stood for."""

    def __init__(self, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._seen: dict[tuple[int, str], tuple[float, int]] = {}  # key -> (window start, swallowed)

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, _NUMBERS.sub("#", self._text(record)))
        now = self._clock()
        start, swallowed = self._seen.get(key, (None, 0))
        if start is not None and now - start < self.window_s:
            self._seen[key] = (start, swallowed + 1)
            return False
        self._seen[key] = (now, 0)
        if swallowed:
            record.msg = f"{record.getMessage()} (and {swallowed} more like it in {self.window_s:.0f} s)"
            record.args = None
        if len(self._seen) > 1000:  # a flood of distinct lines must not grow this without bound
            self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.window_s}
        return True

    @staticmethod
    def _text(record: logging.LogRecord) -> str:
        """The line without the client's name (``rdkafka#producer-7``): the same failure of two clients is one."""
        args = record.args
        if isinstance(args, tuple) and len(args) == 3:  # confluent-kafka logs ("%s [%s] %s", fac, client, message)
            return f"{args[0]} {args[2]}"
        return record.getMessage()


KAFKA_LOG = logging.getLogger("faultline.kafka")
"""The logger every confluent-kafka client of faultline hands librdkafka's lines to."""
KAFKA_LOG.addFilter(CollapseRepeats())


def with_logger(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with :data:`KAFKA_LOG` as the client's ``logger`` (unless it names one already)."""
    return dict(conf) if "logger" in conf else {**conf, "logger": KAFKA_LOG}
