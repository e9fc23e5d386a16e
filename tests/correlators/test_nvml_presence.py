"""NVML presence: a node's sample cadence, when a GPU is overdue (in the node's own time), a node whose NVML
is quiet as a whole, a GPU back after it was declared gone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from correlators.nvml_presence import NvmlNode

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_cadence_overdue_and_siblings() -> None:
    nv = NvmlNode()
    for k in range(5):
        for g in range(4):
            if g != 2 or k < 3:
                nv.observe(g, at(30 * k + g))
    assert nv.cadence() == 30
    assert nv.overdue_at(2, 2.5) == at(60 + 2 + 75)
    assert nv.reporting_since(2, at(62 + 30)) == 3
    assert not nv.quiet(at(130), 2.5) and nv.quiet(at(123 + 76), 2.5)


def test_nothing_is_known_before_three_gaps_and_a_gone_gpu_can_come_back() -> None:
    nv = NvmlNode()
    nv.observe(0, at(0))
    nv.observe(0, at(30))
    assert nv.cadence() is None and nv.overdue_at(0, 2.5) is None
    nv.gone[0] = at(30)
    assert nv.observe(0, at(400)) is True and 0 not in nv.gone
    nv.observe(0, at(10))  # a late sample does not move the newest back
    assert nv.last[0] == at(400) and nv.newest == at(400)


def test_a_gpu_sampled_on_every_change_does_not_set_the_nodes_cadence() -> None:
    """Publish-on-change: GPU 0's ECC counter moves, so it is sampled every 4 s; GPUs 1-3 once per 300 s
    period. One vote per GPU: the node's pace is 300 s, and GPUs 1-3 are not overdue 10 s after a sample."""
    nv = NvmlNode()
    for g in range(4):
        nv.observe(g, at(g))
    for k in range(1, 80):
        nv.observe(0, at(4 * k))
    assert nv.cadence() is None  # GPUs 1-3 have shown no gap yet: no verdict on them from GPU 0's pace
    for g in range(1, 4):
        nv.observe(g, at(300 + g))
    nv.observe(0, at(324))
    assert nv.cadence() == 300
    assert nv.overdue_at(1, 2.5) == at(301 + 750)


def test_before_the_nodes_cadence_the_gate_waits_for_a_gpu_at_its_own_pace() -> None:
    """The restart gate's bound: a GPU that has shown its own gaps (sampled on every change) could still speak
    until its newest sample plus that many of its own gaps; one never seen twice cannot be waited for. The
    node's cadence, once known, decides instead (and only it declares a GPU gone)."""
    nv = NvmlNode()
    for g in range(4):
        nv.observe(g, at(g))
    for k in range(1, 4):
        nv.observe(1, at(60 * k + 1))
    assert nv.cadence() is None and nv.overdue_at(1, 2.5) is None
    assert nv.speaks_until(1, 2.5) == at(181 + 150) and nv.speaks_until(2, 2.5) is None
    for g in range(4):
        nv.observe(g, at(300 + g))
    assert nv.cadence() is not None and nv.speaks_until(2, 2.5) == nv.overdue_at(2, 2.5)


def test_a_node_whose_clock_stopped_keeps_the_cadence_its_samples_arrive_at() -> None:
    """The node's clock stands still (its samples stamped milliseconds apart) while the cell places them a
    cadence apart (:mod:`correlators.clock`): the cadence is the larger gap, never the stopped clock's
    milliseconds, which made every GPU overdue between two samples and a power domain "lost together"."""
    nv = NvmlNode()
    for k in range(6):
        for g in range(4):
            stamp = at(30 * min(k, 2) + g + 0.001 * k)  # the node's own clock stops at its third sample
            nv.observe(g, at(30 * k + g), own=stamp)
    assert nv.cadence() == 30
    assert nv.overdue_at(0, 2.5) == at(150 + 75)
