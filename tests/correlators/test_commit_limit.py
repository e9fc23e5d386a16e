"""The committed offset never passes a record the worker did not judge, against the installed Faust (no broker).

Each commit round is ``Consumer._new_offset`` (what Faust would commit, capped) followed by what a
successful commit records (:func:`tests.correlators.faust_books.commit_rounds`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from faust.types import TP

from correlators.commit_limit import CommitLimit
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


class Judged:
    """What the worker has judged, by partition (None: no state held)."""

    def __init__(self) -> None:
        self.upto: dict[int, int | None] = {}

    def __call__(self, partition: int) -> int | None:
        return self.upto.get(partition)


def _capped(consumer: Any) -> Judged:
    judged = Judged()
    CommitLimit(TOPIC, judged).install(consumer)
    return judged


def test_records_faust_skipped_and_acknowledged_are_not_committed_until_judged(consumer: Any) -> None:
    """A rebalance began: Faust skipped 150-199 and acknowledged them; the worker judged up to 149."""
    judged = _capped(consumer)
    consumer._committed_offset[TP0] = 100
    for offset in range(100, 200):
        agent_finished(consumer, offset)  # 100-149 by the agent, 150-199 by Faust's skip
    judged.upto[0] = 149
    assert commit_rounds(consumer, 2) == [150, None]  # not past what was judged, however often asked
    judged.upto[0] = 199  # redelivered (or caught up from the log) and judged
    assert commit_rounds(consumer, 1) == [200]
    assert consumer._acked[TP0] == [] and not consumer._acked_index[TP0]


def test_faust_uncapped_commits_the_skipped_records(consumer: Any) -> None:
    # What the cap is for: the installed Faust commits records acknowledged by its skip. If it stops, this fails.
    consumer._committed_offset[TP0] = 100
    for offset in range(100, 200):
        agent_finished(consumer, offset)
    assert commit_rounds(consumer, 1) == [200]


def test_nothing_is_committed_for_a_partition_whose_state_is_not_held(consumer: Any) -> None:
    judged = _capped(consumer)
    consumer._committed_offset[TP0] = 10
    for offset in range(10, 20):
        agent_finished(consumer, offset)
    assert commit_rounds(consumer, 1) == [None]  # being taken over on a thread: the state is out of sight
    judged.upto[0] = 19
    assert commit_rounds(consumer, 1) == [20]  # and nothing was forgotten meanwhile


def test_the_gap_faust_fills_is_committed_no_further_than_judged(consumer: Any) -> None:
    """A lost fetch: Faust fills 983-1175 itself; a commit while the takeover is still at 1100 stops there."""
    judged = _capped(consumer)
    taken_over_at(consumer, 982, 1175)
    agent_finished(consumer, 982)
    agent_finished(consumer, 1175)
    judged.upto[0] = 1100
    assert commit_rounds(consumer, 1) == [1101]
    judged.upto[0] = 1175
    assert commit_rounds(consumer, 2) == [1176, None]


def test_other_topics_are_left_to_faust(consumer: Any) -> None:
    _capped(consumer)  # nothing judged anywhere
    changelog = TP("ns-emitted-changelog", 0)
    consumer.app.topics._acking_topics.add(changelog.topic)
    consumer._committed_offset[changelog] = 0
    for offset in range(0, 5):
        consumer.ack(type("M", (), {"acked": False, "tp": changelog, "offset": offset, "topic": changelog.topic})())
    assert consumer._new_offset(changelog) == 5


def test_installing_twice_caps_once(consumer: Any) -> None:
    judged = Judged()
    limit = CommitLimit(TOPIC, judged)
    limit.install(consumer)
    limit.install(consumer)
    consumer._committed_offset[TP0] = 0
    for offset in range(0, 10):
        agent_finished(consumer, offset)
    judged.upto[0] = 4
    assert commit_rounds(consumer, 1) == [5]
    assert sorted(consumer._acked[TP0]) == list(range(5, 10))  # put back once, not twice
