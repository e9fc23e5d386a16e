"""The one Kafka reader without a broker: where a read stops, how errors and backoff go, that waits are bounded.

A fake consumer (tests/common/fake_kafka.py) stands for confluent-kafka's. The real thing is
covered by every broker test that reads a topic (replays, takeovers, the executor).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException

from common.kafka_reader import Backoff, ReadErrors, TopicReader
from tests.common.fake_kafka import TOPIC, FakeConsumer, FakeMessage, error


def reader(consumer: FakeConsumer, stall_s: float = 10.0) -> tuple[TopicReader, list[float]]:
    """A reader on ``consumer`` whose clock moves only by its sleeps and the consumer's waits."""
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        consumer.clock[0] += s

    return TopicReader({}, TOPIC, "g", stall_s=stall_s, consumer=consumer, clock=lambda: consumer.clock[0],
                       sleep=sleep), sleeps


def offsets(batches: Iterable[list[Any]]) -> list[tuple[int, int]]:
    return [(m.partition(), m.offset()) for batch in batches for m in batch]


def test_a_read_stops_at_the_high_watermark_it_started_with() -> None:
    fake = FakeConsumer({0: {o: b"x" for o in range(5)}, 1: {o: b"y" for o in range(3)}, 2: {}})
    r, _ = reader(fake)
    ends = r.ends()
    assert ends == {0: 5, 1: 3}  # an empty partition has nothing to wait for
    r.assign({p: OFFSET_BEGINNING for p in ends})
    got = []
    for batch in r.batches(ends):
        got += [(m.partition(), m.offset()) for m in batch]
        fake.logs[0][len(fake.logs[0])] = b"later"  # written while reading: not waited for
    assert sorted(got)[:8] == [(0, o) for o in range(5)] + [(1, o) for o in range(3)]
    assert fake.positions[0] >= 5 and fake.positions[1] >= 3


def test_a_log_that_ends_in_offsets_without_records_ends_at_its_position() -> None:
    # Compaction (or a transaction marker) left no record at offsets 3-5 of a log whose end is 6.
    fake = FakeConsumer({0: {0: b"a", 1: b"b", 2: b"c"}}, highs={0: 6})
    r, _ = reader(fake)
    r.assign({0: OFFSET_BEGINNING})
    assert offsets(r.batches({0: 6})) == [(0, 0), (0, 1), (0, 2)]


def test_a_range_starts_where_it_is_assigned() -> None:
    fake = FakeConsumer({0: {o: b"x" for o in range(10)}})
    r, _ = reader(fake)
    r.assign({0: 6})
    assert offsets(r.batches({0: 8}))[:2] == [(0, 6), (0, 7)]


def test_a_fatal_error_raises_at_once() -> None:
    fake = FakeConsumer({0: {0: b"a"}})
    fake.script = [[error(KafkaError._FATAL, fatal=True)]]
    r, sleeps = reader(fake)
    r.assign({0: OFFSET_BEGINNING})
    with pytest.raises(KafkaException):
        list(r.batches({0: 1}))
    assert fake.consumed == 1 and not sleeps


def test_transient_errors_back_off_then_the_read_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeConsumer({0: {o: b"x" for o in range(4)}})
    fake.script = [[error(KafkaError._TRANSPORT)], [error(KafkaError._TRANSPORT)], [error(KafkaError._TRANSPORT)]]
    r, sleeps = reader(fake)
    r.assign({0: OFFSET_BEGINNING})
    with caplog.at_level(logging.DEBUG, logger="faultline.kafka"):
        assert offsets(r.batches({0: 4})) == [(0, o) for o in range(4)]
    # 0.2 s doubling, in slices no longer than one poll wait (0.5 s)
    assert sleeps == pytest.approx([0.2, 0.4, 0.5, 0.3])
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1 and "_TRANSPORT" in warnings[0].getMessage()  # once per episode, not per error
    assert r.errors.failures == 0  # a record ended the episode


def test_a_stalled_read_times_out_naming_the_partition() -> None:
    fake = FakeConsumer({0: {0: b"a"}, 1: {o: b"b" for o in range(5)}})
    fake.frozen = {1}
    r, _ = reader(fake, stall_s=10.0)
    r.assign({0: OFFSET_BEGINNING, 1: OFFSET_BEGINNING})
    with pytest.raises(TimeoutError, match=r"partitions \[1\] short of their end"):
        list(r.batches({0: 1, 1: 5}))
    assert 10.0 <= fake.clock[0] <= 10.5  # given up after stall_s without progress, not later


def test_a_slow_read_that_progresses_does_not_time_out() -> None:
    fake = FakeConsumer({0: {o: b"x" for o in range(30)}})
    original = fake.consume

    def slow(num_messages: int = 1, timeout: float = -1) -> list[FakeMessage]:
        fake.clock[0] += 4.0  # every poll takes 4 s and brings one record: 120 s in all, with stall_s 10
        return original(1, timeout)

    fake.consume = slow  # type: ignore[method-assign]
    r, _ = reader(fake, stall_s=10.0)
    r.assign({0: OFFSET_BEGINNING})
    assert len(offsets(r.batches({0: 30}))) == 30


def test_errors_forever_time_out_too() -> None:
    fake = FakeConsumer({0: {0: b"a"}})

    def failing(num_messages: int = 1, timeout: float = -1) -> list[FakeMessage]:
        return [error(KafkaError._TRANSPORT)]

    fake.consume = failing  # type: ignore[method-assign]
    r, sleeps = reader(fake, stall_s=10.0)
    r.assign({0: OFFSET_BEGINNING})
    with pytest.raises(TimeoutError):
        list(r.batches({0: 1}))
    assert max(sleeps) <= 5.0 and sum(sleeps) <= 10.5


def test_following_never_sleeps_for_its_backoff() -> None:
    fake = FakeConsumer({0: {0: b"a", 1: b"b"}})
    fake.script = [[error(KafkaError._TRANSPORT)]]
    r, sleeps = reader(fake)
    r.assign({0: OFFSET_BEGINNING})
    seen: list[int] = []
    assert r.follow(lambda m: seen.append(m.offset())) == 0  # the error
    assert r.follow(lambda m: seen.append(m.offset())) == 0  # backing off: returns at once, polls nothing
    assert fake.consumed == 1 and not sleeps
    fake.clock[0] += 0.2
    assert r.follow(lambda m: seen.append(m.offset())) == 2
    assert seen == [0, 1]


def test_catch_up_hands_every_record_to_the_current_end_of_what_is_assigned() -> None:
    fake = FakeConsumer({0: {0: b"a", 1: b"b"}, 1: {0: b"c"}})
    r, _ = reader(fake)
    r.assign({0: OFFSET_BEGINNING, 1: OFFSET_BEGINNING})
    seen: list[tuple[int, int]] = []
    assert r.catch_up(lambda m: seen.append((m.partition(), m.offset()))) == 3
    assert sorted(seen) == [(0, 0), (0, 1), (1, 0)]
    fake.logs[1][1] = b"d"
    assert r.follow(lambda m: seen.append((m.partition(), m.offset()))) == 1  # following goes on from there


def test_broker_calls_are_bounded() -> None:
    fake = FakeConsumer({0: {0: b"a"}})
    fake.watermarks_answer = False
    r, _ = reader(fake, stall_s=3.0)
    with pytest.raises(TimeoutError, match="no watermarks"):
        r.watermarks(0)
    fake.committed_at[0] = 7
    assert r.committed(0) == 7 and r.committed_offsets([0]) == {0: 7}


def test_closing_is_idempotent_and_a_with_block_closes() -> None:
    fake = FakeConsumer({0: {}})
    with reader(fake)[0] as r:
        assert r.partitions() == [0]
    assert fake.closed
    r.close()


def test_backoff_doubles_to_its_ceiling() -> None:
    assert [Backoff().after(n) for n in range(1, 8)] == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    assert Backoff(first_s=1.0, max_s=2.0).after(5) == 2.0


def test_quiet_codes_and_new_episodes(caplog: pytest.LogCaptureFixture) -> None:
    errors = ReadErrors("reading x", quiet=frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART}))
    with caplog.at_level(logging.DEBUG, logger="faultline.kafka"):
        errors.handle(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "no topic"))
        errors.handle(KafkaError(KafkaError._TRANSPORT, "down"))
        errors.handle(KafkaError(KafkaError._TRANSPORT, "down"))
        errors.recovered()
        errors.handle(KafkaError(KafkaError._TRANSPORT, "down again"))
    levels = [rec.levelno for rec in caplog.records]
    assert levels == [logging.DEBUG, logging.WARNING, logging.DEBUG, logging.WARNING]
    with pytest.raises(KafkaException):
        errors.handle(KafkaError(KafkaError._FATAL, "gone", fatal=True))
