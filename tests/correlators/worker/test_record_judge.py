"""The agent's body without a broker: a log judged record by record publishes every decision once and in
order; redelivered records are skipped, gaps caught up from the log, bad records dead-lettered; a snapshot
is taken only once the record's decisions are acknowledged; the live clock holds snapshots back."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from worker_fakes import JudgeRig, decision_ids, judged_all, new_state, scenario_log

from common import metrics as m
from streams.decisions import StreamEnd
from streams.events import EndOfCapture, Event

LOG = scenario_log("xid95_two_gpus_two_nodes")
ALL = decision_ids(judged_all(LOG))


async def test_a_log_judged_record_by_record_publishes_each_decision_once_in_order() -> None:
    rig = JudgeRig(LOG, snapshot_every=100)
    await rig.feed(range(len(LOG)))
    assert rig.published() == ALL and len(ALL) == 9
    ends = [StreamEnd.model_validate_json(s.value) for s in rig.producer.sent if s.suffix == "control"]
    assert [e.events for e in ends] == [len(LOG)]
    assert rig.emitted["0"] == len(LOG) - 1
    assert [p for p, _ in rig.captures] == list(range(99, len(LOG), 100))
    assert all(unacked == 0 for _, unacked in rig.captures)  # never with a decision off its topic


async def test_redelivered_records_are_skipped_and_gaps_caught_up_from_the_log() -> None:
    rig = JudgeRig(LOG, )
    await rig.feed(range(0, 1000))
    await rig.feed(range(900, 1000))  # redelivered after a rebalance: judged here before
    await rig.feed(range(1100, len(LOG)))  # the consumer dropped 1000-1099: read from the log
    assert rig.published() == ALL
    assert rig.acks == list(range(1000, 1100))


async def test_a_record_that_is_not_an_event_goes_to_the_dead_letters_and_the_rest_go_on() -> None:
    rig = JudgeRig(LOG, )
    dead = m.DEAD_LETTERS.labels("correlator")._value.get()
    await rig.feed(range(0, 10))
    await rig.judge.on_record(0, 10, None, b"{not json")
    assert rig.held.get(0).position == 10
    assert m.DEAD_LETTERS.labels("correlator")._value.get() == dead + 1
    [letter] = [s for s in rig.producer.sent if s.suffix == "deadletters"]
    assert b"undecodable event" in letter.value and b"not json" in letter.value


async def _acknowledging(rig: JudgeRig, task: asyncio.Task[None]) -> None:
    """Run ``task``, the broker acknowledging whatever it sends."""
    while not task.done():
        rig.producer.acknowledge()
        await asyncio.sleep(0)
    await task


async def test_no_snapshot_while_a_live_tick_is_unacknowledged() -> None:
    rig = JudgeRig(LOG, auto_ack=False, snapshot_every=1)
    await _acknowledging(rig, asyncio.create_task(rig.feed(range(0, 40))))
    assert rig.captures and all(unacked == 0 for _, unacked in rig.captures)
    await asyncio.sleep(0)  # the last write is over
    engine = rig.held.get(0).engine("default")
    assert engine.clock is not None
    later = engine.clock + timedelta(seconds=600)
    rig.live._wall_clock = lambda: later  # the wall clock is far past the last event: silences close
    ticking = asyncio.create_task(rig.live.tick())
    while not rig.producer.pending:
        await asyncio.sleep(0)
    assert rig.live.in_flight
    captured = len(rig.captures)
    await rig.feed([40, 41])  # records judged meanwhile (they decide nothing): due, but held back
    assert len(rig.captures) == captured
    rig.producer.acknowledge()
    await ticking
    assert not rig.live.in_flight
    await rig.feed([42])
    assert rig.captures[-1] == (42, 0)


async def test_idle_for_counts_from_the_last_record_finished() -> None:
    rig = JudgeRig(LOG, auto_ack=False)
    await rig.feed(range(0, 5))
    rig.clock.advance(7)
    assert rig.judge.idle_for() == 7
    first_deciding = next(j.offset for j in judged_all(LOG) if j.decisions)
    busy = asyncio.create_task(rig.feed(range(5, first_deciding + 1)))
    while not rig.producer.pending:
        await asyncio.sleep(0)
    assert rig.judge.idle_for() == 0  # judging (waiting for the broker) counts as busy
    rig.producer.acknowledge()
    await busy
    rig.clock.advance(2)
    assert rig.judge.idle_for() == 2


async def test_revoked_partitions_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    rig = JudgeRig(LOG, )
    rig.held.install(new_state(0))
    rig.held.install(new_state(3))
    with caplog.at_level(logging.WARNING, logger="faultline.correlator"):
        assert rig.judge.on_assigned({0, 1}) == [3]
    assert rig.held.partitions == [0]
    assert "assigned events partitions [0, 1] of events; dropped the state of [3]" in caplog.text


def _with_forged_end(log: list[tuple[bytes, bytes]], at: int) -> list[tuple[bytes, bytes]]:
    """``log`` with an ``end_of_capture`` an agent's credential wrote in the middle of it."""
    key, value = log[at - 1]
    ts = Event.model_validate_json(value).ts
    forged = Event(id="forged-end", ts=ts, source="agent", body=EndOfCapture(lines=1))
    return log[:at] + [(key, forged.model_dump_json().encode())] + log[at:]


@pytest.mark.parametrize("fed_from", [0, "takeover"])
async def test_an_end_of_capture_on_a_live_topic_is_dead_lettered_and_ends_nothing(fed_from: object) -> None:
    """Issue 27, item 6: in a live namespace an ``end_of_capture`` (the middle of the log, and the capture's
    own at its end) is dead-lettered with the reason; no end reaches ``control`` and the decisions are
    those of the log without it -- judged record by record, or folded from the log by a takeover (no
    screen there: the live engine refuses it itself)."""
    at = len(LOG) // 2
    log = _with_forged_end(LOG, at)
    rig = JudgeRig(log, namespace="prod")
    await rig.feed(range(len(log)) if fed_from == 0 else range(len(log) - 3, len(log)))
    assert rig.published() == decision_ids(judged_all(LOG[:-1])) != []
    assert [s for s in rig.producer.sent if s.suffix == "control"] == []
    letters = [s.value for s in rig.producer.sent if s.suffix == "deadletters"]
    if fed_from == 0:
        assert len(letters) == 2 and all(b"end_of_capture refused: a replay-only record, and 'prod' is not a "
                                         b"replay namespace" in v for v in letters)
        assert b"forged-end" in letters[0]
    replay = JudgeRig(log, namespace="prod.replay-0123456789")  # where a capture does end
    await replay.feed(range(len(log)))
    assert [s for s in replay.producer.sent if s.suffix == "control"] != []


def _xid(log: list[tuple[bytes, bytes]]) -> int:
    return next(i for i, (_, v) in enumerate(log) if Event.model_validate_json(v).body.kind == "xid")


async def test_a_record_over_the_cap_is_dead_lettered_and_never_judged() -> None:
    """Issue 27, item 6: an XID whose kernel line was padded to 10 MB (a compressible record the broker
    takes) went into the engine and the archive whole. Now it is dead-lettered with the reason and counted,
    and the decisions are those of the log without it; the same XID at its own size is judged as ever."""
    from streams.bounds import MAX_EVENT_BYTES, MAX_RECORD_BYTES

    at = _xid(LOG)
    key, value = LOG[at]
    xid = Event.model_validate_json(value)
    padded = xid.model_copy(update={"body": xid.body.model_copy(update={"message": "A" * 10 * 1024 * 1024})})
    huge = padded.model_dump_json().encode()
    log = LOG[:at] + [(key, huge)] + LOG[at + 1:]
    without = decision_ids(judged_all(LOG[:at] + LOG[at + 1:]))
    assert without != ALL  # the XID decides something: judged, it would show
    dead = m.DEAD_LETTERS.labels("correlator")._value.get()
    rig = JudgeRig(log)
    await rig.feed(range(len(log)))
    assert rig.published() == without
    assert m.DEAD_LETTERS.labels("correlator")._value.get() == dead + 1
    [letter] = [s.value for s in rig.producer.sent if s.suffix == "deadletters"]
    assert len(letter) <= MAX_RECORD_BYTES
    assert (f"over the cap: a record of {len(huge):,} bytes, more than the {MAX_EVENT_BYTES:,} a reader "
            "takes").encode() in letter
    assert rig.held.get(0).position == len(log) - 1  # and the partition went on past it
