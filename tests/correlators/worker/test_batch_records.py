"""Records that hold several events (streams/batch.py), through the agent's body without a broker.

The record stays the unit: a batched log decides exactly what the same events one per record decide,
in the same order and with the same ids; ``emitted``, the snapshot point and a takeover's catch-up
are per record; a bad event inside a batch is dead-lettered alone while the rest are judged.
"""

from __future__ import annotations

import json

from worker_fakes import JudgeRig, decision_ids, judged_all, scenario_log

from common import metrics as m
from streams.batch import encode_batch
from streams.decisions import StreamEnd

LOG = scenario_log("xid95_two_gpus_two_nodes")
ALL = decision_ids(judged_all(LOG))
BAD = b'{"id":"bad","ts":"not a time","source":"nvml","node":"n1","body":{"kind":"agent_heartbeat"}}'


def batched(log: list[tuple[bytes, bytes]], size: int, bad_at: int | None = None) -> list[tuple[bytes, bytes]]:
    """``log``'s records packed ``size`` to a record (a last short one; one alone stays a plain event);
    with ``bad_at``, an undecodable event inserted before that event of the log."""
    values = [v for _, v in log]
    if bad_at is not None:
        values.insert(bad_at, BAD)
    key = log[0][0]
    out = []
    for i in range(0, len(values), size):
        chunk = values[i:i + size]
        out.append((key, chunk[0] if len(chunk) == 1 else encode_batch(chunk)))
    return out


async def test_a_batched_log_decides_what_the_same_events_decide_one_per_record() -> None:
    log = batched(LOG, 37)
    rig = JudgeRig(log)
    await rig.feed(range(len(log)))
    assert rig.published() == ALL, "the same decisions, ids and order"
    assert rig.emitted["0"] == len(log) - 1 and rig.held.get(0).position == len(log) - 1
    [end] = [StreamEnd.model_validate_json(s.value) for s in rig.producer.sent if s.suffix == "control"]
    assert end.events == len(log)  # records of the partition: the offset stays the unit


async def test_a_takeover_over_a_batched_log_publishes_exactly_what_was_not_published() -> None:
    log = batched(LOG, 50)
    first = JudgeRig(log)
    cut = len(log) // 2
    await first.feed(range(cut))
    successor = JudgeRig(log)
    successor.emitted.update(first.emitted)  # the changelog the successor finds
    await successor.feed(range(cut + 3, len(log)))  # it missed records too: caught up from the log
    published = first.published() + successor.published()
    assert published == ALL, "nothing twice, nothing skipped, in order"
    assert successor.held.get(0).position == len(log) - 1


async def test_a_bad_event_inside_a_batch_is_dead_lettered_alone_and_the_rest_judged() -> None:
    bad_at = len(LOG) // 3
    log = batched(LOG, 25, bad_at=bad_at)
    rig = JudgeRig(log)
    dead = m.DEAD_LETTERS.labels("correlator")._value.get()
    await rig.feed(range(len(log)))
    assert rig.published() == ALL, "the batch's good events were judged as if the bad one were not there"
    assert m.DEAD_LETTERS.labels("correlator")._value.get() == dead + 1
    [letter] = [json.loads(s.value) for s in rig.producer.sent if s.suffix == "deadletters"]
    assert json.loads(letter["raw"]) == json.loads(BAD), "only the bad event, not its batch"
    assert letter["reason"].startswith(f"undecodable event {bad_at % 25 + 1} of a batch of 25")


async def test_a_batch_of_nothing_but_bad_events_moves_the_position_and_decides_nothing() -> None:
    rig = JudgeRig([*LOG[:10], (LOG[0][0], encode_batch([BAD, BAD])), *LOG[10:]])
    await rig.feed(range(11))
    assert rig.held.get(0).position == 10
    assert len([s for s in rig.producer.sent if s.suffix == "deadletters"]) == 2


async def test_snapshots_are_counted_in_events_and_taken_at_record_boundaries() -> None:
    log = batched(LOG, 40)
    rig = JudgeRig(log, snapshot_every=100)
    await rig.feed(range(len(log)))
    # every third record of 40 events passes the next 100: a record boundary, never inside a batch
    assert [p for p, _ in rig.captures] == list(range(2, len(log), 3))
    assert all(unacked == 0 for _, unacked in rig.captures)
