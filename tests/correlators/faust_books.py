"""An unstarted Faust consumer (it never connects) and the commit rounds its bookkeeping would make.

Shared by the tests that pin what faultline relies on in Faust's private consumer bookkeeping
(:mod:`correlators.consumer_acks`, :mod:`correlators.commit_limit`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import faust
from faust.types import TP, Message

__all__ = ["TOPIC", "TP0", "agent_finished", "commit_rounds", "taken_over_at", "unstarted_consumer"]

TOPIC = "ns.events"
TP0 = TP(TOPIC, 0)


def taken_over_at(consumer: Any, committed: int, first_handed: int) -> None:
    """The consumer sought to ``committed`` (assignment), then received ``first_handed`` as its next record."""
    consumer._committed_offset[TP0] = committed
    consumer._read_offset[TP0] = committed
    asyncio.get_event_loop().run_until_complete(consumer._add_gap(TP0, committed + 1, first_handed))


def agent_finished(consumer: Any, offset: int) -> None:
    consumer.ack(Message(TOPIC, 0, offset, 0.0, 0, None, None, None, None))


def commit_rounds(consumer: Any, rounds: int) -> list[int | None]:
    """What each of ``rounds`` commit rounds commits (None: nothing)."""
    out: list[int | None] = []
    for _ in range(rounds):
        offset = consumer._new_offset(TP0)
        if offset is not None and consumer._should_commit(TP0, offset):
            consumer._committed_offset[TP0] = offset
            out.append(offset)
        else:
            out.append(None)
    return out


def unstarted_consumer() -> Iterator[Any]:
    """An unstarted Faust consumer (it never connects) that counts acknowledgements for TOPIC."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        app = faust.App("consumer-acks-test", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
        app.topics._acking_topics.add(TOPIC)  # what subscribing an agent to the topic does
        yield app.consumer
    finally:
        asyncio.set_event_loop(None)
        loop.close()
