"""Partition state across takeovers, without a broker: revoked and assigned back, gaps, redelivery.

A simulated events partition holds two cells whose nodes have the same names;
simulated workers hand it back and forth the way Kafka rebalances do (resuming
from a committed offset behind what was judged), with the ``emitted`` gate of
:mod:`correlators.app`. Every cell must end with exactly the decisions the
offline correlator makes for it alone: none lost, none published twice.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from scenario_book import SCENARIOS

from correlators.engine import Correlator
from correlators.partitions import Folded, Judged, PartitionState, Step, WorkerState, fold
from correlators.policy import load_policy
from correlators.state import Decision
from faultline.outcome import collate, decide_offline
from producers.capture import BadInput, parse_capture_line
from streams.cells import cell_key, cell_of_key, check_cell
from streams.decisions import Command, Incident
from streams.events import EndOfCapture, Event

POLICY = load_policy(None)
CELLS = {"cell-a": "xid79_fixed_job", "cell-b": "xid48_double_bit_ecc"}  # both on nodes n1, n2, n3


def _lines(scenario: str) -> list[str]:
    capture, _ = SCENARIOS[scenario]()
    return capture.lines()


def _partition_log(cells: dict[str, list[str]]) -> list[tuple[bytes, bytes]]:
    """The cells' events interleaved line by line, as producers of each cell would write them, markers last."""
    per_cell: dict[str, list[Event]] = {}
    for cell, lines in cells.items():
        evs = []
        for raw in lines:
            try:
                evs.extend(parse_capture_line(raw))
            except BadInput:
                continue
        evs.append(Event(id=f"end-{cell}", ts=evs[-1].ts, source="replay", body=EndOfCapture(lines=len(lines))))
        per_cell[cell] = evs
    log: list[tuple[bytes, bytes]] = []
    for i in range(max(len(v) for v in per_cell.values())):
        for cell, evs in per_cell.items():
            if i < len(evs):
                log.append((cell_key(cell), evs[i].model_dump_json().encode()))
    return log


class Worker:
    """The agent loop of correlators.app over a list standing for one partition."""

    def __init__(self, log: list[tuple[bytes, bytes]], emitted: list[int],
                 out: dict[str, list[Decision]]) -> None:
        self.log, self.emitted, self.out = log, emitted, out
        self.held = WorkerState()
        self.rebuilds = self.catch_ups = 0

    def settle(self, judged: Judged) -> None:
        if judged.says_anything and judged.offset > self.emitted[0]:
            self.out[judged.cell].extend(judged.decisions)
            self.emitted[0] = judged.offset

    def consume(self, start: int, stop: int) -> None:
        for offset in range(start, min(stop, len(self.log))):
            step = self.held.step(0, offset)
            if step is Step.SEEN:
                continue
            if step is Step.CATCH_UP:
                state = self.held.release(0)
                if offset > 0:
                    self.rebuilds += state is None  # from an earlier record: a takeover
                    self.catch_ups += state is not None  # records this worker never saw
                state = state or PartitionState(0, lambda: Correlator(POLICY), "default")
                folded = fold(state, ((o, k, v) for o, (k, v) in enumerate(self.log[:offset])), offset,
                              Event.model_validate_json, after=self.emitted[0])
                state.fast_forward(offset)
                self.held.install(state)
                for judged in folded.unpublished:
                    self.settle(judged)
            key, value = self.log[offset]
            self.settle(self.held.get(0).judge(offset, key, Event.model_validate_json(value)))


def _expected(lines: list[str]) -> tuple[dict[str, Any], int]:
    raw: list[Decision] = []
    return decide_offline(lines, on_decisions=raw.extend), len(raw)


def _published(decisions: list[Decision]) -> dict[str, Any]:
    return collate([d for d in decisions if isinstance(d, Incident)], [d for d in decisions if isinstance(d, Command)])


def test_a_partition_moved_away_and_back_is_rebuilt_and_decides_as_one_worker() -> None:
    lines = {cell: _lines(name) for cell, name in CELLS.items()}
    log = _partition_log(lines)
    n = len(log)
    emitted: list[int] = [-1]
    out: dict[str, list[Decision]] = defaultdict(list)
    a, b = Worker(log, emitted, out), Worker(log, emitted, out)

    a.consume(0, n // 4)                   # A judges the first quarter, has committed up to n//8 only
    a.held.keep_only([])                   # rebalance: revoked from A ...
    b.consume(n // 8, n // 2)              # ... B resumes at A's committed offset: rebuild, then judge
    a.held.keep_only([0])                  # assigned back to A (B committed up to 3n//8):
    a.consume(3 * n // 8, 5 * n // 8)      # A's state was dropped, so it rebuilds instead of going on stale
    b.consume(5 * n // 8, 3 * n // 4)      # B never heard it lost the partition: the gap makes it rebuild
    b.consume(5 * n // 8 + 1, n)           # a rebalance that leaves B the partition: redelivered, skipped

    _assert_as_offline(lines, out)
    assert (a.rebuilds, a.catch_ups, b.rebuilds, b.catch_ups) == (1, 0, 1, 1)


def test_records_the_consumer_dropped_are_judged_from_the_log_and_their_decisions_published() -> None:
    lines = {cell: _lines(name) for cell, name in CELLS.items()}
    log = _partition_log(lines)
    first = _first_decision(log)
    emitted: list[int] = [-1]
    out: dict[str, list[Decision]] = defaultdict(list)
    a = Worker(log, emitted, out)
    a.consume(0, first - 3)
    a.consume(first + 3, len(log))  # the records around the first decision never reached the agent
    _assert_as_offline(lines, out)
    assert (a.rebuilds, a.catch_ups) == (0, 1)


def _first_decision(log: list[tuple[bytes, bytes]]) -> int:
    state = PartitionState(0, lambda: Correlator(POLICY), "default")
    return next(o for o, (k, v) in enumerate(log) if state.judge(o, k, Event.model_validate_json(v)).decisions)


def _assert_as_offline(lines: dict[str, list[str]], out: dict[str, list[Decision]]) -> None:
    for cell, cell_lines in lines.items():
        want, count = _expected(cell_lines)
        assert want["incidents"] and want["commands"], f"{cell}: the scenario decides nothing to compare"
        assert _published(out[cell]) == want, cell
        assert len(out[cell]) == count, f"{cell}: a decision was published twice or not at all"


def test_redelivered_records_are_skipped_and_a_gap_asks_for_a_catch_up() -> None:
    held = WorkerState()
    assert held.step(3, 0) is Step.CATCH_UP  # nothing held
    st = PartitionState(3, lambda: Correlator(POLICY), "default")
    st.fast_forward(10)
    held.install(st)
    assert [held.step(3, o) for o in (8, 9, 10, 11)] == [Step.SEEN, Step.SEEN, Step.JUDGE, Step.CATCH_UP]
    with pytest.raises(ValueError, match="already judged"):
        st.skip(9)
    assert held.keep_only([1, 2]) == [3] and held.partitions == []


def test_a_rebuild_read_in_batches_folds_every_record_below_the_takeover_once() -> None:
    log = _partition_log({"x": _lines("xid79_fixed_job")})
    upto = len(log) - 5
    records: list[tuple[int, bytes | None, bytes | None]] = [(o, k, v) for o, (k, v) in enumerate(log)]
    records[upto - 10] = (upto - 10, cell_key("x"), b"not json")  # went to the dead letters: skipped
    whole = PartitionState(0, lambda: Correlator(POLICY), "d")
    all_at_once = fold(whole, records, upto, Event.model_validate_json, after=-1)
    assert all_at_once.events == upto - 1 and all_at_once.unpublished
    batched = PartitionState(0, lambda: Correlator(POLICY), "d")
    folded = Folded()
    for i in range(0, len(records), 100):
        fold(batched, records[i:i + 100], upto, Event.model_validate_json, after=-1, into=folded)
    assert folded == all_at_once and batched.position == whole.position == upto - 1
    assert batched.engines["x"].incidents.keys() == whole.engines["x"].incidents.keys()
    published_before = all_at_once.unpublished[0].offset  # a worker published up to there already
    again = fold(PartitionState(0, lambda: Correlator(POLICY), "d"), records, upto, Event.model_validate_json,
                 after=published_before)
    assert again.unpublished == all_at_once.unpublished[1:]


def test_cells_of_one_partition_have_engines_of_their_own() -> None:
    st = PartitionState(0, lambda: Correlator(POLICY), "home")
    ev = Event.model_validate_json(_partition_log({"x": _lines("xid79_fixed_job")[:1]})[0][1])
    st.judge(0, cell_key("x"), ev)
    st.judge(1, b"n1", ev.model_copy(update={"id": "other"}))  # a key from before cells: the worker's own cell
    st.judge(2, None, ev.model_copy(update={"id": "third"}))
    assert sorted(st.engines) == ["home", "x"] and st.position == 2


def test_cell_names_and_keys() -> None:
    assert cell_of_key(cell_key("rack-row.7_b"), "d") == "rack-row.7_b"
    assert cell_of_key(b"cell:", "d") == "d"
    for bad in ("", "a b", "x/y", "é", "a" * 129):
        with pytest.raises(ValueError, match="cell name"):
            check_cell(bad)
