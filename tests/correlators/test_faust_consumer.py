"""The worker's consumer waits at most the configured fetch wait, not Faust's 1.5 s (no broker needed)."""

from __future__ import annotations

import asyncio

import faust

from correlators.faust_consumer import use_fetch_wait


def _fetch_wait_of_a_started_fetcher(app: faust.App) -> int:
    async def build() -> int:
        thread = app.consumer._thread  # type: ignore[attr-defined]  # the consumer thread Faust would run
        consumer = thread._create_worker_consumer(app.transport)

        async def nothing() -> None:
            return None

        # start() without a broker: no bootstrap, no topics to wait for; it builds the fetcher
        consumer._client.bootstrap = nothing
        consumer._wait_topics = nothing
        await consumer.start()
        try:
            return int(consumer._fetcher._fetch_max_wait_ms)  # what every fetch request carries
        finally:
            await consumer.stop()

    return asyncio.run(build())


def test_the_worker_consumer_fetches_with_the_configured_wait() -> None:
    app = faust.App("fetch-wait-test", broker="kafka://127.0.0.1:9", store="memory://", web_enabled=False)
    use_fetch_wait(app, 40)
    assert _fetch_wait_of_a_started_fetcher(app) == 40


def test_faust_alone_would_wait_a_second_and_a_half() -> None:
    """What the override is for: if Faust ever stops hard-coding the wait, this tells us to revisit it."""
    app = faust.App("fetch-wait-default", broker="kafka://127.0.0.1:9", store="memory://", web_enabled=False)
    assert _fetch_wait_of_a_started_fetcher(app) == 1500
