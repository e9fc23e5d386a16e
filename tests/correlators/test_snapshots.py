"""Correlator snapshots without a broker: a restored state decides exactly as the uninterrupted one,
and a snapshot that is altered, keyed otherwise or of another version or policy is refused unread.

The broker-side proof (a worker SIGKILLed, another restoring the snapshot) is
tests/faultline/test_snapshot_takeover.py.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import correlators.snapshots as snapshots
from correlators.engine import Correlator
from correlators.partitions import PartitionState
from correlators.policy import Policy, load_policy
from correlators.snapshots import (
    MAGIC,
    SnapshotRefused,
    SnapshotSchedule,
    check_retained,
    open_snapshot,
    pickle_engines,
    policy_fingerprint,
    restore,
    seal,
)
from correlators.state import Decision
from faultline.outcome import collate, decide_offline
from producers.capture.screen import Accepted, CaptureScreen
from streams.cells import cell_key
from streams.decisions import Command, Incident
from streams.events import EndOfCapture, Event
from tests.harness.shared import needs_shared, scenario_files

PUBLIC = scenario_files()
POLICY = load_policy(None)
FINGERPRINT = policy_fingerprint(POLICY)
KEY = b"k" * 32
CELLS = (cell_key("cell-a"), cell_key("cell-b"))


def _events(path: Path) -> list[Event]:
    """The capture's events as replay publishes them (screened), and its end marker."""
    events: list[Event] = []
    n = 0
    for verdict in CaptureScreen().screen(path.read_bytes().splitlines()):
        n = verdict.line
        if isinstance(verdict, Accepted):
            events.extend(verdict.events)
    return events + [Event(id=f"end-{n}", ts=events[-1].ts, source="replay", body=EndOfCapture(lines=n))]


def _log(events: list[Event]) -> list[tuple[bytes, Event]]:
    """One partition holding the capture twice, under two cells, interleaved record by record."""
    return [(key, e) for e in events for key in CELLS]


def _state(partition: int = 0) -> PartitionState:
    return PartitionState(partition, lambda: Correlator(POLICY), "default")


def _judge(state: PartitionState, records: list[tuple[bytes, Event]], first: int) -> list[tuple[str, Decision]]:
    """Judge ``records`` from offset ``first``: (cell, decision) in order."""
    out: list[tuple[str, Decision]] = []
    for i, (key, event) in enumerate(records):
        judged = state.judge(first + i, key, event)
        out += [(judged.cell, d) for d in judged.decisions]
    return out


def _as_json(decided: list[tuple[str, Decision]]) -> list[tuple[str, str]]:
    return [(cell, d.model_dump_json()) for cell, d in decided]


def _sealed(state: PartitionState, key: bytes | None = KEY, fingerprint: str = FINGERPRINT) -> bytes:
    position, cells, pickled = pickle_engines(state)
    return seal(state.partition, position, cells, pickled, fingerprint, key)


@needs_shared()
@pytest.mark.parametrize("capture", PUBLIC, ids=lambda p: p.stem)
def test_restored_half_way_decides_exactly_as_the_uninterrupted_run(capture: Path) -> None:
    events = _events(capture)
    records = _log(events)
    half = len(records) // 2
    a = _state()
    first_half = _judge(a, records[:half], 0)
    blob = _sealed(a)

    b = _state()
    restore(b, open_snapshot(blob, 0, FINGERPRINT, KEY))
    assert b.position == half - 1 and sorted(b.engines) == ["cell-a", "cell-b"]
    assert all(b.engines[c] is not a.engines[c] for c in b.engines)  # a copy, not the same objects

    second_a = _judge(a, records[half:], half)
    second_b = _judge(b, records[half:], half)
    assert _as_json(second_b) == _as_json(second_a)  # ids and contents, in order
    # And the uninterrupted run is the offline truth, in each cell.
    want = decide_offline(capture.read_bytes().splitlines())
    for cell in ("cell-a", "cell-b"):
        decided = [d for c, d in first_half + second_a if c == cell]
        got = collate([d for d in decided if isinstance(d, Incident)], [d for d in decided if isinstance(d, Command)])
        assert [i["id"] for i in got["incidents"]] == [i["id"] for i in want["incidents"]]
        assert [c["id"] for c in got["commands"]] == [c["id"] for c in want["commands"]]


def _decisions_after_restore(events: list[Event], cut: int) -> tuple[list[Decision], list[Decision]]:
    """Decisions of the events after ``cut`` in an uninterrupted engine and in one restored at ``cut``."""
    a = _state()
    records = [(CELLS[0], e) for e in events]
    _judge(a, records[:cut], 0)
    b = _state()
    restore(b, open_snapshot(_sealed(a, None), 0, FINGERPRINT, None))
    got_a: list[Decision] = []
    got_b: list[Decision] = []
    for i, (key, e) in enumerate(records[cut:], cut):
        got_a += a.judge(i, key, e).decisions
        got_b += b.judge(i, key, e).decisions
    return got_a, got_b


@needs_shared(*PUBLIC)
@settings(max_examples=15, deadline=None)
@given(st.data())
def test_a_snapshot_at_any_record_boundary_changes_nothing(data: st.DataObject) -> None:
    capture = data.draw(st.sampled_from(PUBLIC))
    events = _EVENTS.setdefault(capture, _events(capture))
    cut = data.draw(st.integers(1, len(events)))
    got_a, got_b = _decisions_after_restore(events, cut)
    assert [d.model_dump_json() for d in got_b] == [d.model_dump_json() for d in got_a]


_EVENTS: dict[Path, list[Event]] = {}


@pytest.fixture
def small() -> PartitionState:
    state = _state(3)
    t = datetime(2026, 1, 1, tzinfo=UTC)
    state.judge(0, CELLS[0], Event(id="e0", ts=t, source="replay", body=EndOfCapture(lines=1)))
    return state


@pytest.fixture
def no_unpickling(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any unpickling in the snapshots module fails the test: refusals must come before it."""
    def forbidden(*_: object, **__: object) -> object:
        raise AssertionError("unpickled a snapshot that should have been refused first")

    monkeypatch.setattr(snapshots.pickle, "loads", forbidden)
    yield


def test_a_sealed_snapshot_opens_with_the_same_key(small: PartitionState) -> None:
    snap = open_snapshot(_sealed(small), 3, FINGERPRINT, KEY)
    assert (snap.partition, snap.position, sorted(snap.engines)) == (3, 0, ["cell-a"])
    snap = open_snapshot(_sealed(small, None), 3, FINGERPRINT, None)  # checksum only
    assert snap.position == 0


@pytest.mark.usefixtures("no_unpickling")
def test_altered_bytes_are_refused_unread(small: PartitionState) -> None:
    blob = bytearray(_sealed(small))
    for i in (len(MAGIC) + 10, len(blob) // 2, len(blob) - 40, len(blob) - 1):
        bad = bytearray(blob)
        bad[i] ^= 0x01
        with pytest.raises(SnapshotRefused, match="authentication failed"):
            open_snapshot(bytes(bad), 3, FINGERPRINT, KEY)
    with pytest.raises(SnapshotRefused, match="truncated|authentication"):
        open_snapshot(bytes(blob[:-1]), 3, FINGERPRINT, KEY)
    with pytest.raises(SnapshotRefused, match="bad magic"):
        open_snapshot(b"\x80\x05" + bytes(blob[2:]), 3, FINGERPRINT, KEY)
    with pytest.raises(SnapshotRefused, match="truncated"):
        open_snapshot(b"", 3, FINGERPRINT, KEY)


@pytest.mark.usefixtures("no_unpickling")
def test_another_key_or_no_key_is_refused_unread(small: PartitionState) -> None:
    with pytest.raises(SnapshotRefused, match="another key"):
        open_snapshot(_sealed(small), 3, FINGERPRINT, b"x" * 32)
    with pytest.raises(SnapshotRefused, match="another key"):
        open_snapshot(_sealed(small), 3, FINGERPRINT, None)  # keyed snapshot, reader without a key
    with pytest.raises(SnapshotRefused, match="another key"):
        open_snapshot(_sealed(small, None), 3, FINGERPRINT, KEY)  # a checksum is no MAC


@pytest.mark.usefixtures("no_unpickling")
def test_another_state_or_format_version_is_refused_unread(small: PartitionState,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(snapshots, "STATE_VERSION", snapshots.STATE_VERSION + 1)
        blob = _sealed(small)
    with pytest.raises(SnapshotRefused, match="state version"):
        open_snapshot(blob, 3, FINGERPRINT, KEY)
    with monkeypatch.context() as patch:
        patch.setattr(snapshots, "FORMAT_VERSION", snapshots.FORMAT_VERSION + 1)
        blob = _sealed(small)
    with pytest.raises(SnapshotRefused, match="format version"):
        open_snapshot(blob, 3, FINGERPRINT, KEY)


@pytest.mark.usefixtures("no_unpickling")
def test_another_policy_or_partition_is_refused_unread(small: PartitionState) -> None:
    other = Policy.model_validate({**POLICY.model_dump(), "timing": {**POLICY.timing.model_dump(), "settle_s": 31}})
    assert policy_fingerprint(other) != FINGERPRINT
    assert policy_fingerprint(load_policy(None)) == FINGERPRINT  # stable for the same policy
    with pytest.raises(SnapshotRefused, match="another policy"):
        open_snapshot(_sealed(small), 3, policy_fingerprint(other), KEY)
    with pytest.raises(SnapshotRefused, match="of partition 3, not 4"):
        open_snapshot(_sealed(small), 4, FINGERPRINT, KEY)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_single_byte_change_is_refused(data: st.DataObject) -> None:
    blob = _SMALL_BLOB
    i = data.draw(st.integers(0, len(blob) - 1))
    flip = data.draw(st.integers(1, 255))
    bad = bytearray(blob)
    bad[i] ^= flip
    with pytest.raises(SnapshotRefused):
        open_snapshot(bytes(bad), 0, FINGERPRINT, KEY)


_SMALL_BLOB = seal(0, 0, ["x"], pickle.dumps({}), FINGERPRINT, KEY)


def test_a_snapshot_older_than_the_retained_log_is_refused() -> None:
    check_retained(99, 0)
    check_retained(99, 100)  # the next record is the first retained one: usable
    with pytest.raises(SnapshotRefused, match="retention deleted offsets 100-100"):
        check_retained(99, 101)


def test_restore_only_into_a_fresh_state_of_the_same_partition(small: PartitionState) -> None:
    snap = open_snapshot(_sealed(small), 3, FINGERPRINT, KEY)
    with pytest.raises(ValueError, match="fresh"):
        restore(small, snap)
    with pytest.raises(ValueError, match="partition 3 cannot go into partition 4"):
        restore(_state(4), snap)


def test_schedule_by_events_or_seconds_whichever_first() -> None:
    s = SnapshotSchedule(every_events=3, every_s=10.0)
    assert [s.due(0, 0.0), s.due(0, 1.0), s.due(0, 2.0)] == [False, False, True]
    s.taken(0, 2.0)
    assert not s.due(0, 3.0) and s.due(0, 12.5)  # ten seconds since the last one
    s.taken(0, 12.5)
    assert not s.due(1, 0.0)  # partitions count apart
    s.forget([0])
    assert not s.due(0, 100.0)  # forgotten: counts afresh from now
    never = SnapshotSchedule(every_events=0, every_s=0.0)
    assert not any(never.due(0, float(t)) for t in range(100))


# The attribute names of the engine's state when STATE_VERSION was last bumped. When this fails,
# the state changed shape: bump correlators.snapshots.STATE_VERSION, then update this list.
STATE_ATTRIBUTES_V1 = [
    "_out", "_seen", "awaiting_remap", "bmc", "clock", "conditions", "failure", "health", "heartbeat",
    "host_oom", "incidents", "job_history", "judge_from", "ledger", "lost", "p", "pending_fence", "plan",
    "progress", "psu_sel", "restart_log", "restarts", "silent", "timers", "topo", "unknown_restarts",
]


def test_state_version_is_bumped_when_the_state_changes_shape() -> None:
    assert snapshots.STATE_VERSION == 1, "update STATE_ATTRIBUTES_V1 to the new version's attributes"
    assert sorted(vars(Correlator(POLICY))) == STATE_ATTRIBUTES_V1, \
        "the engine's state changed shape: bump correlators.snapshots.STATE_VERSION and update this list"
