"""The publisher when the broker refuses a record: for good (too large, invalid) it is replaced by a minimal
record of the same id, dead-lettered, counted, and the worker goes on; for now it is sent again, a bounded
number of times; of an unknown kind it raises as before (test_publisher.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from worker_fakes import FakeEmitted, FakeProducer, new_state, scenario_log

from common import metrics as m
from correlators.partitions import Judged, PartitionState
from correlators.worker.publisher import RETRIES, Publisher
from correlators.worker.refusals import classify
from streams.bounds import MAX_RECORD_BYTES
from streams.decisions import Command, DeadLetter, Incident
from streams.events import Event

NOW = datetime(2026, 4, 22, 3, 30, tzinfo=UTC)


class MessageSizeTooLargeError(Exception):
    """As aiokafka's: Kafka error code 10, not retriable."""

    errno = 10
    retriable = False


class NotLeaderForPartitionError(Exception):
    errno = 6
    retriable = True


class ProducerSendError(Exception):
    """As Faust's: wraps the client's error."""


def _too_large() -> Exception:
    try:
        raise MessageSizeTooLargeError("The message is 2124877 bytes when serialized")
    except MessageSizeTooLargeError as exc:
        try:
            raise ProducerSendError(f"Error while sending: {exc!r}") from exc
        except ProducerSendError as wrapped:
            return wrapped


class ScriptedProducer(FakeProducer):
    """Acknowledges every send but those ``refuse(suffix, key, attempt)`` answers with an exception."""

    def __init__(self, refuse: Callable[[str, str, int], Exception | None]) -> None:
        super().__init__(auto_ack=False)
        self.rule = refuse
        self.attempts: dict[bytes, int] = {}  # per record sent (its value): how many times

    async def send(self, suffix: str, key: bytes, value: bytes) -> asyncio.Future[None]:
        fut = await super().send(suffix, key, value)
        n = self.attempts[value] = self.attempts.get(value, 0) + 1
        exc = self.rule(suffix, key.decode(), n)
        if exc is None:
            self.acknowledge()
        else:
            fut.set_exception(exc)
        return fut


async def _no_sleep(_: float) -> None:
    return None


def _publisher(producer: FakeProducer, emitted: FakeEmitted) -> Publisher:
    return Publisher(producer.send, emitted, namespace="ns", keys=None, ttl=timedelta(hours=1), live_clock=False,
                     wall_clock=lambda: NOW, sleep=_no_sleep)


def _judged() -> tuple[PartitionState, Judged]:
    state = new_state()
    for offset, (key, value) in enumerate(scenario_log()):
        judged = state.judge(offset, key, Event.model_validate_json(value))
        if any(isinstance(d, Command) for d in judged.decisions):
            return state, judged
    raise AssertionError("the scenario decides nothing")


def _once(judged: Judged, kind: type[Incident | Command]) -> Incident | Command:
    """A decision of ``kind`` whose id no other decision of the record has (an incident may have two versions)."""
    ids = [d.id for d in judged.decisions]
    return next(d for d in judged.decisions if isinstance(d, kind) and ids.count(d.id) == 1)


def _refused(reason: str) -> float:
    return sum(m.RECORDS_REFUSED.labels("correlator", out, reason)._value.get() for out in ("incidents", "commands"))


def test_refusals_are_classified_by_kafka_error_code_along_the_chain() -> None:
    assert classify(_too_large()) == ("for_good", "too_large")
    assert classify(NotLeaderForPartitionError()) == ("transient", "NotLeaderForPartitionError")
    assert classify(RuntimeError("broker refused the record")) == ("unknown", "RuntimeError")


async def test_a_record_refused_for_good_is_replaced_dead_lettered_and_the_worker_goes_on() -> None:
    state, judged = _judged()
    victim = _once(judged, Command)
    producer = ScriptedProducer(lambda s, k, n: _too_large() if k == victim.id and n == 1 else None)
    emitted = FakeEmitted()
    before = _refused("too_large")
    await _publisher(producer, emitted).settle(state, judged)
    assert emitted["0"] == judged.offset  # went on: the next record is judged by this worker
    sent = [s for s in producer.sent if s.key.decode() == victim.id]
    assert len(sent) == 2  # the refused record, then its minimal record (same id, same type)
    small = Command.model_validate_json(sent[1].value)
    assert isinstance(victim, Command)
    assert (small.id, small.type, small.incident) == (victim.id, victim.type, victim.incident)
    assert small.requires_approval and "not published whole: too_large" in small.params["cut"]
    assert "faultline incident" in small.params["cut"] and set(small.params) == {"cut"}
    dls = [DeadLetter.model_validate_json(s.value) for s in producer.sent if s.suffix == "deadletters"]
    assert len(dls) == 1 and victim.id in dls[0].reason and "MessageSizeTooLarge" in dls[0].reason
    assert _refused("too_large") == before + 1
    assert all(producer.attempts[d.model_dump_json().encode()] == 1 for d in judged.decisions)  # none again


async def test_a_record_over_the_cap_is_never_sent_whole() -> None:
    state, judged = _judged()
    inc = next(d for d in judged.decisions if isinstance(d, Incident))
    huge = inc.model_copy(update={"summary": "x" * (MAX_RECORD_BYTES + 1)})
    producer, emitted = FakeProducer(), FakeEmitted()
    before = _refused("over_cap")
    await _publisher(producer, emitted).settle(state, Judged(judged.offset, judged.cell, [huge]))
    assert all(len(s.value) <= MAX_RECORD_BYTES for s in producer.sent)
    small = Incident.model_validate_json(next(s.value for s in producer.sent if s.suffix == "incidents"))
    assert small.id == inc.id and small.version == inc.version and "not published whole: over_cap" in small.cut
    assert [s.suffix for s in producer.sent] == ["incidents", "deadletters"]
    assert _refused("over_cap") == before + 1 and emitted["0"] == judged.offset


async def test_a_transient_refusal_is_sent_again_and_published() -> None:
    state, judged = _judged()
    first = _once(judged, Command)
    producer = ScriptedProducer(lambda s, k, n: NotLeaderForPartitionError() if k == first.id and n <= RETRIES else None)
    emitted = FakeEmitted()
    await _publisher(producer, emitted).settle(state, judged)
    assert emitted["0"] == judged.offset
    assert [s.value for s in producer.sent if s.key.decode() == first.id] == [first.model_dump_json().encode()] * (
        RETRIES + 1)  # the same record each time, never a replacement
    assert not [s for s in producer.sent if s.suffix == "deadletters"]


async def test_transient_refusals_past_the_bound_raise_and_emitted_stays() -> None:
    state, judged = _judged()
    first = _once(judged, Command)
    producer = ScriptedProducer(lambda s, k, n: NotLeaderForPartitionError() if k == first.id else None)
    emitted = FakeEmitted()
    emitted["0"] = 3
    with pytest.raises(NotLeaderForPartitionError):
        await _publisher(producer, emitted).settle(state, judged)
    assert producer.attempts[first.model_dump_json().encode()] == RETRIES + 1
    assert emitted["0"] == 3


async def test_a_replacement_refused_too_is_left_out_not_retried_forever() -> None:
    state, judged = _judged()
    victim = _once(judged, Command)
    producer = ScriptedProducer(lambda s, k, n: _too_large() if k == victim.id else None)
    emitted = FakeEmitted()
    await _publisher(producer, emitted).settle(state, judged)
    assert len([s for s in producer.sent if s.key.decode() == victim.id]) == 2 and emitted["0"] == judged.offset
    assert len([s for s in producer.sent if s.suffix == "deadletters"]) == 1
