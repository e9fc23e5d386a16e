"""The worker's Kafka consumer: Faust's aiokafka consumer, with a fetch wait short enough to keep up.

Faust builds its aiokafka consumer with ``fetch_max_wait_ms=1500`` (a literal, no setting). aiokafka
sends one fetch request per broker at a time, and leaves a partition out of it while records of
that partition are still buffered. A worker's consumer always holds partitions with nothing to
read (Faust's ``__assignor-__leader`` topic, the ``emitted`` changelog), so the request sent while
the events partition's last fetch is being judged holds only empty partitions, and the broker
keeps it for the whole wait. Whatever arrives on the events partition meanwhile waits behind it.
Measured on a replay-sized backlog (README "Benchmarks"): the worker sat idle 1.0-1.4 s after every
few fetches, three quarters of its wall time, and judged ~14,000 events/s while its CPU did
~90,000; a new XID could likewise wait up to 1.5 s before the worker saw it.

:class:`Consumer` is Faust's with one change: the aiokafka consumer it creates waits at most
``fetch_wait_ms`` (``FAULTLINE_WORKER_FETCH_WAIT_MS``) for data. It is set on the consumer before
its start, when aiokafka builds its fetcher from it. faust-streaming and aiokafka are pinned
together (pyproject.toml): ``tests/correlators/test_faust_consumer.py`` checks the value reaches the
fetcher, so an upgrade that moves it fails there, not silently in production.
"""

from __future__ import annotations

from typing import Any

import aiokafka
import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

__all__ = ["Consumer", "use_fetch_wait"]


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    fetch_wait_ms: int = 50

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = self.fetch_wait_ms  # read by start(), which builds the fetcher
        return consumer


class Consumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer whose fetches wait at most ``fetch_wait_ms`` (module docstring)."""

    fetch_wait_ms: int = 50

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        thread = _ConsumerThread(self, loop=self.loop, beacon=self.beacon)
        thread.fetch_wait_ms = self.fetch_wait_ms
        return thread


def use_fetch_wait(app: faust.App, fetch_wait_ms: int) -> None:
    """Make ``app``'s consumer (not created yet) one whose fetches wait at most ``fetch_wait_ms``."""
    consumer = type("Consumer", (Consumer,), {"fetch_wait_ms": fetch_wait_ms})
    app.transport.Consumer = consumer  # type: ignore[misc]  # the transport's class attribute, per app
