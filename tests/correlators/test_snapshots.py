"""Correlator snapshots without a broker: a restored state decides exactly as the uninterrupted one,
a snapshot that is altered, keyed otherwise or of another version or policy is refused unread, and
one whose body is not the engine's state -- a pickle above all -- is refused and runs nothing.

The broker-side proof (a worker SIGKILLed, another restoring the snapshot) is
tests/faultline/test_snapshot_takeover.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import field, make_dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_book import SCENARIOS as BOOK
from test_invariants import random_capture

import correlators.snapshots as snapshots
from correlators.engine import Correlator
from correlators.job_progress import JobProgress
from correlators.partitions import PartitionState
from correlators.policy import Policy, load_policy
from correlators.snapshots import (
    MAGIC,
    STATES,
    SnapshotRefused,
    SnapshotSchedule,
    capture_engines,
    check_retained,
    open_snapshot,
    policy_fingerprint,
    restore,
    seal,
)
from correlators.state import Decision, EngineState
from correlators.state_fields import Bounded, Instant
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
    return _events_of(path.read_bytes().splitlines())


def _events_of(lines: list[bytes]) -> list[Event]:
    events: list[Event] = []
    n = 0
    for verdict in CaptureScreen().screen(lines):
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
    position, cells, body = capture_engines(state)
    return seal(state.partition, position, cells, body, fingerprint, key)


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
    assert all(b.engines[c].state is not a.engines[c].state for c in b.engines)

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


def _book_events(source: str | int) -> list[Event]:
    """A scenario of our own (by name) or a random capture (by seed), screened, with its end marker."""
    if source not in _BOOK:
        lines = BOOK[source]()[0].lines() if isinstance(source, str) else random_capture(source)
        _BOOK[source] = _events_of([line.encode() for line in lines])
    return _BOOK[source]


_BOOK: dict[str | int, list[Event]] = {}


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_serialised_and_restored_after_any_prefixes_the_engine_decides_the_same(data: st.DataObject) -> None:
    """Our scenarios and random captures (every rule, late and duplicated lines), cut anywhere, as often as
    drawn: the engine that went through the snapshot path at each cut decides exactly as the one that did
    not -- same decisions, ids and order -- and ends in an equal state."""
    source = data.draw(st.sampled_from(sorted(BOOK)) | st.integers(0, 2**32 - 1), label="capture")
    events = _book_events(source)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(events)), min_size=1, max_size=3), label="cuts")))
    records = [(CELLS[1], e) for e in events]
    a, b = _state(), _state()
    got_a: list[Decision] = []
    got_b: list[Decision] = []
    done = 0
    for cut in cuts:
        got_a += [d for _, d in _judge(a, records[done:cut], done)]
        got_b += [d for _, d in _judge(b, records[done:cut], done)]
        done = cut
        if b.position >= 0:
            fresh = _state()
            restore(fresh, open_snapshot(_sealed(b), 0, FINGERPRINT, KEY))
            b = fresh
    got_a += [d for _, d in _judge(a, records[done:], done)]
    got_b += [d for _, d in _judge(b, records[done:], done)]
    assert [d.model_dump_json() for d in got_b] == [d.model_dump_json() for d in got_a]
    assert b.engines["cell-b"].state == a.engines["cell-b"].state


@pytest.fixture
def small() -> PartitionState:
    state = _state(3)
    t = datetime(2026, 1, 1, tzinfo=UTC)
    state.judge(0, CELLS[0], Event(id="e0", ts=t, source="replay", body=EndOfCapture(lines=1)))
    return state


@pytest.fixture
def no_decoding(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any decoding of a body in the snapshots module fails the test: refusals must come before it."""
    def forbidden(*_: object, **__: object) -> object:
        raise AssertionError("decoded the body of a snapshot that should have been refused first")

    monkeypatch.setattr(snapshots, "_decode", forbidden)
    yield


def test_a_sealed_snapshot_opens_with_the_same_key(small: PartitionState) -> None:
    snap = open_snapshot(_sealed(small), 3, FINGERPRINT, KEY)
    assert (snap.partition, snap.position, sorted(snap.states)) == (3, 0, ["cell-a"])
    snap = open_snapshot(_sealed(small, None), 3, FINGERPRINT, None)  # checksum only
    assert snap.position == 0


@pytest.mark.usefixtures("no_decoding")
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


@pytest.mark.usefixtures("no_decoding")
def test_another_key_or_no_key_is_refused_unread(small: PartitionState) -> None:
    with pytest.raises(SnapshotRefused, match="another key"):
        open_snapshot(_sealed(small), 3, FINGERPRINT, b"x" * 32)
    with pytest.raises(SnapshotRefused, match="another key"):
        open_snapshot(_sealed(small), 3, FINGERPRINT, None)  # keyed snapshot, reader without a key
    with pytest.raises(SnapshotRefused, match="another key"):
        open_snapshot(_sealed(small, None), 3, FINGERPRINT, KEY)  # a checksum is no MAC


@pytest.mark.usefixtures("no_decoding")
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


@pytest.mark.usefixtures("no_decoding")
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


_SMALL_BLOB = seal(0, 0, ["x"], STATES.dump_json({"x": EngineState()}), FINGERPRINT, KEY)


def test_a_snapshot_older_than_the_retained_log_is_refused() -> None:
    check_retained(99, 0, 500)
    check_retained(99, 100, 500)  # the next record is the first retained one: usable
    with pytest.raises(SnapshotRefused, match="retention deleted offsets 100-100"):
        check_retained(99, 101, 500)


def test_a_snapshot_of_records_the_log_never_held_is_refused() -> None:
    """Issue 27, item 6: the position is checked against the log's end, not trusted because the tag is."""
    check_retained(99, 0, 100)  # the log's last record: usable
    for claimed in (100, 10**12):
        with pytest.raises(SnapshotRefused, match="claims records the log never held") as refused:
            check_retained(claimed, 0, 100)
        assert refused.value.kind == "beyond_log_end"


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


# --- the body is data: anything but the engine's own state is refused, and nothing in it runs ------------


class _RunsCommand:
    """Unpickling this runs a shell command: what a forged pickle snapshot would carry."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (self.command,)


def _forged(body: bytes, key: bytes | None, cells: list[str] | None = None) -> bytes:
    """A snapshot an attacker made: the current header (its versions are public) around ``body``."""
    return seal(0, 7, ["x"] if cells is None else cells, body, FINGERPRINT, key)


@pytest.mark.parametrize("key", [KEY, None], ids=["attacker-has-the-key", "no-key-configured"])
def test_a_forged_pickle_snapshot_is_refused_and_runs_nothing(key: bytes | None, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    payload = pickle.dumps({"x": _RunsCommand(f"touch {marker}")})
    # the payload is live: unpickled, it runs the command (here, in a scratch place, to prove it)
    live = tmp_path / "live"
    pickle.loads(pickle.dumps(_RunsCommand(f"touch {live}")))  # noqa: S301 -- the point of the test
    assert live.exists()
    for forged in (_forged(payload, key), seal(0, 7, ["x"], payload, FINGERPRINT, key, level=0)):
        with pytest.raises(SnapshotRefused, match="not the engine's state"):
            open_snapshot(forged, 0, FINGERPRINT, key)
    assert not marker.exists(), "reading a forged snapshot ran its payload"


def _body_of(state: PartitionState) -> dict[str, object]:
    return json.loads(capture_engines(state)[2])


def test_a_body_that_is_not_exactly_the_state_is_refused(small: PartitionState) -> None:
    good = _body_of(small)
    assert open_snapshot(_forged(json.dumps(good).encode(), KEY, ["cell-a"]), 0, FINGERPRINT, KEY)

    def forged(change: Callable[[dict[str, Any]], object]) -> bytes:
        body = json.loads(json.dumps(good))
        change(body["cell-a"])
        return _forged(json.dumps(body).encode(), KEY, ["cell-a"])

    bad = {
        "a field too many": lambda s: s.update(run="os.system"),
        "a naive datetime": lambda s: s.update(clock="2026-01-01T00:00:00"),
        "an unknown timer": lambda s: s["timers"]["armed"].append(
            {"due": "2026-01-01T00:00:00Z", "seq": 1, "name": "exec", "key": []}) or s["timers"].update(seq=1),
        "a window over its bound": lambda s: s.update(heartbeat={"n1": {
            "last": "2026-01-01T00:00:00Z", "gaps": [1.0] * 21}}),
        "a dangling incident": lambda s: s.update(failure={"job": 99}),
        "a timer armed twice": lambda s: s["timers"].update(seq=2, armed=[
            {"due": "2026-01-01T00:00:00Z", "seq": k, "name": "fence", "key": ["n1"]} for k in (1, 2)]),
        "a type confusion": lambda s: s.update(seen={"__class__": "os.system"}),
    }
    for why, change in bad.items():
        with pytest.raises(SnapshotRefused, match="not the engine's state|inconsistent"):
            open_snapshot(forged(change), 0, FINGERPRINT, KEY)
            pytest.fail(f"{why}: accepted")
    with pytest.raises(SnapshotRefused, match="header names"):
        open_snapshot(_forged(json.dumps(good).encode(), KEY, ["cell-b"]), 0, FINGERPRINT, KEY)


def test_a_body_that_inflates_past_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshots, "MAX_STATE_BYTES", 10_000)
    body = STATES.dump_json({"x": EngineState()}) + b" " * 20_000  # valid JSON, too big once inflated
    with pytest.raises(SnapshotRefused, match="more than 10000 bytes"):
        open_snapshot(_forged(body, KEY), 0, FINGERPRINT, KEY)
    truncated = bytearray(_forged(STATES.dump_json({"x": EngineState()}), None))
    del truncated[-40:-32]  # the end of the zlib stream, the tag recomputed below
    data = bytes(truncated[:-32])
    with pytest.raises(SnapshotRefused, match="complete zlib stream|decompress"):
        open_snapshot(data + hashlib.sha256(data).digest(), 0, FINGERPRINT, None)


# --- the state version follows the state's shape by itself ------------------------------------------------


def _variant(base: type, **changed: tuple[Any, Any]) -> type:
    """``base`` with fields added or retyped (name: (type, field)), under the same class name: only the
    shape differs, as after an edit of the module."""
    return make_dataclass(base.__name__, [(n, t, f) for n, (t, f) in changed.items()], bases=(base,))


_WithAnotherStepBound = _variant(JobProgress, step_gaps=(Annotated[deque[float], Bounded(51)],
                                                         field(default_factory=lambda: deque(maxlen=51))))
SHAPES = {
    "a new field": _variant(EngineState, lemon_scores=(dict[str, float], field(default_factory=dict))),
    "another bound": _variant(EngineState, restart_log=(Annotated[deque[Instant], Bounded(100)],
                                                        field(default_factory=lambda: deque(maxlen=100)))),
    "another key type": _variant(EngineState, restarts=(dict[int, int], field(default_factory=dict))),
    "a tuple for a list": _variant(EngineState, psu_sel=(dict[str, tuple[Instant, ...]], field(default_factory=dict))),
    "a nested bound": _variant(EngineState, progress=(dict[str, _WithAnotherStepBound],
                                                      field(default_factory=dict))),
}


def test_the_state_version_is_derived_from_the_schema() -> None:
    assert snapshots.state_version() == snapshots.STATE_VERSION
    assert snapshots.state_version(_variant(EngineState)) == snapshots.STATE_VERSION  # same shape, same version
    versions = {why: snapshots.state_version(shape) for why, shape in SHAPES.items()}
    same = [why for why, v in versions.items() if v == snapshots.STATE_VERSION]
    assert not same, f"a state of another shape gets this code's version: {same}"
    assert len(set(versions.values())) == len(versions)


@pytest.mark.usefixtures("no_decoding")
def test_a_snapshot_of_a_changed_shape_is_refused_unread(small: PartitionState,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for shape in SHAPES.values():
        with monkeypatch.context() as patch:  # a writer whose state had another shape
            patch.setattr(snapshots, "STATE_VERSION", snapshots.state_version(shape))
            blob = _sealed(small)
        with pytest.raises(SnapshotRefused, match="state version .* changed shape"):
            open_snapshot(blob, 3, FINGERPRINT, KEY)


def test_the_state_version_is_the_same_in_every_process() -> None:
    """Derived from the schema, not from anything hash-seeded: every worker computes the same one."""
    code = "import correlators.snapshots as s; print(s.STATE_VERSION)"
    root = Path(__file__).resolve().parents[2]
    seen = set()
    for seed in ("0", "4242"):
        run = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert run.returncode == 0, run.stderr[-2000:]
        seen.add(int(run.stdout))
    assert seen == {snapshots.STATE_VERSION}
