"""Acknowledging skipped offsets against the installed Faust's real consumer bookkeeping (no broker).

The situation a takeover meets after the consumer lost a fetch: the group had committed 982, the
consumer handed nothing over until offset 1175, so Faust filled 983-1175 itself (its gap tree);
the takeover then acknowledges 982-1174 and the agent finishes 1175. Each commit round is
``Consumer._new_offset`` (what Faust would commit) followed by what a successful commit records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from correlators.consumer_acks import ConsumerAcks
from tests.correlators.faust_books import (
    TOPIC,
    TP0,
    agent_finished,
    commit_rounds,
    taken_over_at,
    unstarted_consumer,
)


@pytest.fixture
def consumer() -> Iterator[Any]:
    yield from unstarted_consumer()


def test_offsets_faust_filled_itself_acknowledged_again_make_commits_crawl(consumer: Any) -> None:
    # The installed Faust's behaviour this module works around: if it ever stops, this fails.
    taken_over_at(consumer, 982, 1175)
    for offset in range(982, 1175):  # every skipped offset acknowledged, as the takeover used to
        agent_finished(consumer, offset)
    agent_finished(consumer, 1175)
    assert commit_rounds(consumer, 4) == [984, 985, 986, 987]  # one offset per round: 2.8 s each


def test_a_takeover_after_a_lost_fetch_lets_the_next_commit_reach_what_was_judged(consumer: Any) -> None:
    taken_over_at(consumer, 982, 1175)
    acks = ConsumerAcks(lambda: consumer, TOPIC)
    assert acks(0, range(982, 1175)) == 1  # 982 only: Faust fills 983-1175 itself
    agent_finished(consumer, 1175)
    assert commit_rounds(consumer, 1) == [1176]


def test_a_second_lost_fetch_later_in_the_partition_commits_as_far(consumer: Any) -> None:
    taken_over_at(consumer, 982, 1175)
    acks = ConsumerAcks(lambda: consumer, TOPIC)
    acks(0, range(982, 1175))
    agent_finished(consumer, 1175)
    consumer._read_offset[TP0] = 1175
    asyncio.get_event_loop().run_until_complete(consumer._add_gap(TP0, 1176, 1225))  # 1176-1224 lost
    assert acks(0, range(1176, 1225)) == 0
    agent_finished(consumer, 1225)
    assert [c for c in commit_rounds(consumer, 3) if c is not None][-1] == 1226


def test_offsets_the_agent_finished_and_not_yet_committed_are_not_acknowledged_again(consumer: Any) -> None:
    consumer._committed_offset[TP0] = 100
    consumer._read_offset[TP0] = 100
    for offset in range(100, 150):  # handed over and finished: nothing was lost
        agent_finished(consumer, offset)
    acks = ConsumerAcks(lambda: consumer, TOPIC)
    assert acks(0, range(100, 160)) == 10  # only 150-159
    assert commit_rounds(consumer, 1) == [160]


def test_offsets_below_the_consumers_committed_offset_are_passed_over(consumer: Any) -> None:
    consumer._committed_offset[TP0] = 50
    acks = ConsumerAcks(lambda: consumer, TOPIC)
    assert acks(0, range(40, 60)) == 10
    assert sorted(consumer._acked[TP0]) == list(range(50, 60))


def test_a_partition_never_committed_is_acknowledged_from_where_asked(consumer: Any) -> None:
    acks = ConsumerAcks(lambda: consumer, TOPIC)
    assert acks(0, range(0, 20)) == 20
    assert commit_rounds(consumer, 1) == [20]
