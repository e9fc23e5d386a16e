"""Delivery that survives broker outages, restarts and crashes: a disk spool in front of Kafka.

* :mod:`producers.spool.disk` -- the spool: checksummed records on disk before anyone is told
  they are spooled, a durable cursor, a torn tail cut off at the next start, a size bound;
* :mod:`producers.spool.publisher` -- :class:`SpoolingPublisher`: spool first, then hand the
  spool's head to an idempotent producer and move the cursor over what the broker acknowledged;
* :mod:`producers.spool.readback` -- after a crash, which records the previous process had
  delivered without recording it, so that none is sent twice;
* :mod:`producers.spool.kafka_log` -- librdkafka's log without its reconnect flood.

The spool is a directory of segments (``000000000001.jsonl``..., at most ``segment_bytes``
each, one record per line) and ``cursor.json`` (the first record not yet acknowledged).
"""

from producers.spool.disk import Spool, SpoolEntry
from producers.spool.kafka_log import ReconnectLogThrottle
from producers.spool.publisher import SpoolingPublisher

__all__ = ["ReconnectLogThrottle", "Spool", "SpoolEntry", "SpoolingPublisher"]
