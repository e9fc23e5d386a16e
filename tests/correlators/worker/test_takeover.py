"""The takeover without a broker: it publishes exactly the decisions past ``emitted`` and past the group's
committed offset, never twice; it restores a snapshot and replays only the tail; it acknowledges the offsets
the consumer skipped; a snapshot it cannot use means a full rebuild, with the reason in the log."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from worker_fakes import (
    POLICY,
    FakeEmitted,
    FakeProducer,
    decision_ids,
    inline,
    judged_all,
    log_rebuild,
    new_state,
    scenario_log,
)

from common import metrics as m
from correlators.partitions import PartitionState, WorkerState
from correlators.snapshots import (
    Snapshot,
    SnapshotRefused,
    capture_engines,
    open_snapshot,
    policy_fingerprint,
    seal,
)
from correlators.worker.publisher import Publisher
from correlators.worker.takeover import SnapshotLoader, Takeover
from streams.events import Event

LOG = scenario_log("xid95_two_gpus_two_nodes")
EVERY = judged_all(LOG)
SAYING = [j.offset for j in EVERY if j.says_anything]  # offsets whose records publish something


class Rig:
    """A takeover on LOG with a fake producer, table and consumer acknowledgements."""

    def __init__(self, *, committed: int = -1001, emitted: FakeEmitted | None = None,
                 snapshot: Snapshot | None = None, held: WorkerState | None = None,
                 run_blocking: Any = inline) -> None:
        self.producer = FakeProducer()
        self.emitted = emitted if emitted is not None else FakeEmitted()
        self.held = held if held is not None else WorkerState()
        self.acks: list[int] = []
        self.reads: list[int] = []
        publisher = Publisher(self.producer.send, self.emitted, namespace="ns", keys=None, ttl=timedelta(hours=1),
                              live_clock=False)
        self.takeover = Takeover(self.held, new_state, publisher, log_rebuild(LOG, committed, self.reads),
                                 self.ack,
                                 load_snapshot=(lambda part: snapshot) if snapshot is not None else None,
                                 committed=lambda parts: {p: committed for p in parts}, run_blocking=run_blocking)

    def ack(self, part: int, offsets: range) -> int:
        self.acks.extend(offsets)
        return len(offsets)

    def published(self) -> list[str]:
        return self.producer.keys("incidents", "commands")


def _expected(after: int, upto: int) -> list[str]:
    return decision_ids([j for j in EVERY if after < j.offset < upto])


def _snapshot_at(position: int) -> Snapshot:
    state = new_state()
    for offset, (key, value) in enumerate(LOG[:position + 1]):
        state.judge(offset, key, Event.model_validate_json(value))
    return Snapshot(0, position, {cell: engine.state for cell, engine in state.engines.items()})


def _judge_rest(state: PartitionState, start: int) -> list[str]:
    """The decisions of the records from ``start`` on, judged by ``state`` (the worker going on)."""
    return decision_ids([state.judge(o, k, Event.model_validate_json(v))
                         for o, (k, v) in enumerate(LOG) if o >= start])


@pytest.mark.parametrize("emitted_at, committed, upto, count", [
    (-1, -1001, len(LOG) - 1, 9),  # a new namespace: everything below the takeover is published
    (SAYING[1], SAYING[0] + 1, len(LOG) - 1, 2),  # emitted ahead of the committed offset
    (-1, SAYING[1] + 1, SAYING[-1], 2),  # the changelog lost: the committed offset still bounds it
    (SAYING[-2], SAYING[-2] + 1, len(LOG) - 1, 0),  # everything but the end published before
])
async def test_a_takeover_publishes_exactly_what_is_past_emitted_and_the_committed_offset(
        emitted_at: int, committed: int, upto: int, count: int) -> None:
    emitted = FakeEmitted()
    if emitted_at >= 0:
        emitted["0"] = emitted_at
    rig = Rig(committed=committed, emitted=emitted)
    state = await rig.takeover.catch_up(0, upto)
    after = max(emitted_at, committed - 1)
    assert rig.published() == _expected(after, upto) and len(rig.published()) == count
    assert state.position == upto - 1 and rig.held.get(0) is state
    # Another worker taking over next publishes none of it again; the rest comes from judging on.
    again = Rig(committed=committed, emitted=rig.emitted)
    state2 = await again.takeover.catch_up(0, upto)
    assert again.published() == []
    assert rig.published() + _judge_rest(state2, upto) == _expected(after, len(LOG))


async def test_the_offsets_the_consumer_skipped_are_acknowledged() -> None:
    rig = Rig(committed=40)
    await rig.takeover.catch_up(0, 100)
    assert rig.acks == list(range(40, 100))  # below the committed offset the consumer ignores them
    rig.acks.clear()
    await rig.takeover.catch_up(0, 130)  # a gap in a state it holds: from its position on
    assert rig.acks == list(range(100, 130))


async def test_a_snapshot_is_restored_and_only_the_tail_replayed(caplog: pytest.LogCaptureFixture) -> None:
    position, upto = SAYING[0], len(LOG) - 1
    rig = Rig(snapshot=_snapshot_at(position))
    with caplog.at_level(logging.WARNING, logger="faultline.correlator"):
        state = await rig.takeover.catch_up(0, upto)
    assert rig.reads == [position + 1]  # the log is read from right after the snapshot
    assert f"restored snapshot of partition 0 at offset {position} (1 cells); rebuilt {upto - 1 - position} " \
           "later events" in caplog.text
    assert "rebuilt state from" not in caplog.text
    assert rig.published() == _expected(position, upto) != []  # what the snapshot covers was published before it
    assert _judge_rest(state, upto) == _expected(upto - 1, len(LOG))  # and it decides on as the uninterrupted run


async def test_a_snapshot_past_the_takeover_point_reads_no_log() -> None:
    position = SAYING[-2]
    rig = Rig(snapshot=_snapshot_at(position), committed=10)
    state = await rig.takeover.catch_up(0, 50)
    assert state.position == position and rig.reads == [] and rig.published() == []
    assert rig.acks == list(range(10, 50))


async def test_a_gap_in_a_state_held_is_caught_up_from_its_position(caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig()
    await rig.takeover.catch_up(0, 200)
    with caplog.at_level(logging.WARNING, logger="faultline.correlator"):
        await rig.takeover.catch_up(0, 260)
    assert rig.reads == [0, 200]
    assert "caught up on offsets 200-259 of partition 0, which this worker had not seen (60 events" in caplog.text


async def test_the_state_is_out_of_sight_while_the_log_is_folded_into_it() -> None:
    rig = Rig()
    seen: list[list[int]] = []
    inner = rig.takeover._rebuild

    def watched(state: PartitionState, upto: int, after: int) -> Any:
        seen.append(rig.held.partitions)
        return inner(state, upto, after)

    rig.takeover._rebuild = watched
    rig.held.install(new_state())
    await rig.takeover.catch_up(0, 10)
    assert seen == [[]] and rig.held.partitions == [0]


async def test_a_failed_read_of_the_log_raises_and_publishes_nothing() -> None:
    rig = Rig()

    def broken(state: PartitionState, upto: int, after: int) -> Any:
        raise TimeoutError("reading events[0]: no progress for 60s")

    rig.takeover._rebuild = broken
    with pytest.raises(TimeoutError):
        await rig.takeover.catch_up(0, 10)
    assert rig.producer.sent == [] and rig.acks == []


def test_a_snapshot_that_cannot_be_used_means_none(caplog: pytest.LogCaptureFixture) -> None:
    snap = _snapshot_at(100)

    def opened(blob: bytes, part: int) -> Snapshot:
        if blob == b"forged":
            raise SnapshotRefused("authentication failed")
        return snap

    def unreadable(part: int) -> bytes | None:
        raise TimeoutError("no record in 30s")

    assert SnapshotLoader(lambda p: None, opened, lambda p: (0, 500), "snaps")(0) is None  # none written yet
    assert SnapshotLoader(lambda p: b"ok", opened, lambda p: (0, 500), "snaps")(0) is snap
    with caplog.at_level(logging.WARNING, logger="faultline.correlator"):
        assert SnapshotLoader(lambda p: b"forged", opened, lambda p: (0, 500), "snaps")(0) is None
        assert SnapshotLoader(lambda p: b"ok", opened, lambda p: (102, 500), "snaps")(0) is None  # 101 deleted
        assert SnapshotLoader(unreadable, opened, lambda p: (0, 500), "snaps")(0) is None
    assert SnapshotLoader(lambda p: b"ok", opened, lambda p: (101, 500), "snaps")(0) is snap  # 101 is still there
    text = caplog.text
    assert "refused: authentication failed; rebuilding it from the log start" in text
    assert "refused: taken at offset 100, but the events partition starts at 102" in text
    assert "could not read the snapshot of partition 0 from snaps (no record in 30s)" in text


def _refused(reason: str) -> float:
    return float(m.SNAPSHOTS_REFUSED.labels(reason)._value.get())


async def test_a_snapshot_sealed_with_the_real_key_claiming_a_position_past_the_log_end_is_refused(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 27, item 6: a snapshot may claim any position (10**12); restored, every record up to it looks
    judged and the worker is blind. Checked against the events log's end, it is refused (logged and
    counted) and the partition rebuilt from the log: everything is decided, as without a snapshot."""
    key, fingerprint = b"the-real-snapshot-key-0123456789", policy_fingerprint(POLICY)
    real = _snapshot_at(SAYING[0])
    state = new_state()
    state.restore({cell: state.new_engine().restored(st) for cell, st in real.states.items()}, real.position)
    _position, cells, body = capture_engines(state)
    forged = seal(0, 10**12, cells, body, fingerprint, key)  # the real key: the tag verifies
    assert open_snapshot(forged, 0, fingerprint, key).position == 10**12
    ends = (0, len(LOG))  # the events partition's watermarks
    loader = SnapshotLoader(lambda p: forged, lambda blob, p: open_snapshot(blob, p, fingerprint, key),
                            lambda p: ends, "snaps")
    before = _refused("beyond_log_end")
    with caplog.at_level(logging.WARNING, logger="faultline.correlator"):
        assert loader(0) is None
    assert _refused("beyond_log_end") == before + 1
    assert (f"snapshot of partition 0 refused: taken at offset {10**12}, but the events partition ends before "
            f"offset {len(LOG)}: it claims records the log never held; rebuilding it from the log start") in caplog.text
    rig = Rig()
    rig.takeover._load_snapshot = loader
    taken = await rig.takeover.catch_up(0, len(LOG) - 1)
    assert taken.position == len(LOG) - 2 and rig.reads == [0]  # rebuilt from the log start, not blind
    assert rig.published() + _judge_rest(taken, len(LOG) - 1) == _expected(-1, len(LOG)) != []
    honest = seal(0, SAYING[0], cells, body, fingerprint, key)  # the same state at its own position: restored
    assert SnapshotLoader(lambda p: honest, lambda blob, p: open_snapshot(blob, p, fingerprint, key),
                          lambda p: ends, "snaps")(0) is not None


async def test_adoption_takes_a_partition_over_up_to_the_committed_offset_before_any_record() -> None:
    """The live clock's successor: the state exists (and what the log decided is published) with no record."""
    rig = Rig(committed=SAYING[1] + 1)
    state = await rig.takeover.adopt(0)
    assert state is not None and state.position == SAYING[1] and rig.held.get(0) is state
    assert rig.published() == []  # below the committed offset everything was published by whoever committed it
    assert _judge_rest(state, SAYING[1] + 1) == _expected(SAYING[1], len(LOG))  # and it decides on as one run
    assert await rig.takeover.adopt(0) is None  # held already: nothing read again
    assert rig.reads == [0]


async def test_adoption_of_a_partition_never_committed_starts_from_the_log_start() -> None:
    rig = Rig(committed=-1001)
    state = await rig.takeover.adopt(0)
    assert state is not None and state.position == -1 and rig.reads == [] and rig.published() == []


async def test_one_catch_up_at_a_time_and_the_second_finds_the_state_far_enough() -> None:
    """The agent's record arrives while adoption still reads the log: it waits, then judges on."""
    release = asyncio.Event()

    async def slow(fn: Any, /, *args: Any) -> Any:
        if fn.__name__ == "run":  # the rebuild's read of the log
            await release.wait()
        return fn(*args)

    rig = Rig(committed=100, run_blocking=slow)
    adopting = asyncio.ensure_future(rig.takeover.adopt(0))
    await asyncio.sleep(0)
    agents = asyncio.ensure_future(rig.takeover.catch_up(0, 100))  # the record at the committed offset
    await asyncio.sleep(0)
    assert not agents.done()
    release.set()
    adopted, caught = await adopting, await agents
    assert adopted is caught and caught.position == 99
    assert rig.reads == [0]  # the log was read once


async def test_a_failed_adoption_leaves_no_state_behind() -> None:
    rig = Rig(committed=50)

    def broken(state: PartitionState, upto: int, after: int) -> Any:
        raise TimeoutError("reading events[0]: no progress for 60s")

    rig.takeover._rebuild = broken
    with pytest.raises(TimeoutError):
        await rig.takeover.adopt(0)
    assert rig.held.partitions == []  # the next attempt starts again
