"""librdkafka's log, as the spooling publisher hands it to Python logging: one reconnect failure a minute."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["KAFKA_LOG", "ReconnectLogThrottle"]


class ReconnectLogThrottle(logging.Filter):
    """Lets one librdkafka connection failure a minute through per connection.

    While a broker is away librdkafka logs every reconnect attempt (several a
    second, at error level); the publisher already says once that Kafka is
    unreachable and again when it answers, so the rest only buries that line.
    """

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every_s = every_s
        self._clock = clock
        self._last: dict[tuple[str, str], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not (isinstance(args, tuple) and len(args) == 3 and args[0] == "FAIL"):
            return True  # not a connection failure (confluent-kafka logs "%s [%s] %s": facility, client, text)
        key = (str(args[1]), str(args[2]).split("]", 1)[0])  # the client and its broker thread
        now = self._clock()
        if now - self._last.get(key, -self.every_s) < self.every_s:
            return False
        self._last[key] = now
        return True


KAFKA_LOG = logging.getLogger("faultline.producer.kafka")
KAFKA_LOG.addFilter(ReconnectLogThrottle())
