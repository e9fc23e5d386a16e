"""Issue 27, item 6: the replay-only ``end_of_capture`` record ends a capture only in a replay namespace.

On a live events topic it would judge every pending decision at once (every debounce and settle window
closed early), from anyone with an agent's credential. Here: which namespaces are replay ones, the
worker's screen, and the live engine's own refusal (so a rebuild from the log decides alike); the
worker with a faked broker is in ``worker/test_record_judge.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from correlators.capture_end import end_refused, screen_ends
from correlators.engine import Correlator
from correlators.partitions import PartitionState
from correlators.policy import load_policy
from streams.events import EndOfCapture, Event, GpuInfo, GpuRef, Inventory, Xid
from streams.topics import is_replay_namespace, scratch_namespace

T = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _ev(n: int, body: object, seconds: float = 0) -> Event:
    return Event(id=f"e{n}", ts=T + timedelta(seconds=seconds), source="agent", node="n1", body=body)  # type: ignore[arg-type]


@pytest.mark.parametrize("namespace, replay", [
    ("faultline", False), ("prod", False), ("prod.east", False), ("replay-prod", False), ("prod.replay-", False),
    ("prod.replayed", False), ("faultline.replay-0123456789", True), ("faultline.demo-ab12cd34", True),
    ("faultline.bench-throughput-a1b2c3", True), ("t-x.replay-kill", True),
])
def test_a_replay_namespace_is_one_the_faultline_commands_make(namespace: str, replay: bool) -> None:
    assert is_replay_namespace(namespace) is replay
    assert (end_refused(namespace) is None) is replay


def test_the_commands_name_their_namespaces_so() -> None:
    for kind in ("replay", "demo", "bench"):
        assert is_replay_namespace(scratch_namespace("faultline", kind, "0123456789"))
    with pytest.raises(ValueError, match="unknown scratch namespace kind"):
        scratch_namespace("faultline", "live", "x")


def test_the_worker_sets_an_end_of_capture_aside_outside_a_replay_with_the_reason() -> None:
    end, xid = _ev(2, EndOfCapture(lines=1)), _ev(1, Xid(gpu=GpuRef(index=0), code=79))
    keep, refused = screen_ends([xid, end], "prod")
    assert keep == [xid]
    [(event, why)] = refused
    assert event is end and why.startswith("end_of_capture refused: a replay-only record, and 'prod' is not a "
                                           "replay namespace (<namespace>.replay-<id>")
    assert screen_ends([xid, end], "prod.replay-0123456789") == ([xid, end], [])


def _engine(replay: bool) -> Correlator:
    c = Correlator(load_policy(), replay=replay)
    c.process(_ev(0, Inventory(rack="r1", gpus=[GpuInfo(index=0, uuid="GPU-0", pci="18:00")])))
    return c


def test_a_live_engine_is_not_made_to_judge_early_by_an_end_of_capture() -> None:
    """An XID 79 waits out its debounce; a replay's end judges it now, a live engine's refuses to (no
    decision, no clock moved, no id taken, no end in the partition's outcome)."""
    replay, live = _engine(True), _engine(False)
    for c in (replay, live):
        assert c.process(_ev(1, Xid(gpu=GpuRef(index=0), code=79), seconds=1)) == []  # debounced: nothing yet
    assert replay.process(_ev(2, EndOfCapture(), seconds=1)) != []
    clock = live.clock
    assert live.process(_ev(2, EndOfCapture(), seconds=1)) == [] and live.clock == clock
    assert live.process(_ev(3, EndOfCapture(), seconds=1)) == []
    part = PartitionState(0, lambda: Correlator(load_policy(), replay=False), "default")
    assert part.judge(0, None, _ev(4, EndOfCapture())).end is False
