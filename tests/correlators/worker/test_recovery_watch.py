"""The recovery watch: a worker whose table recovery stopped moving gives up, one that moves never does."""

from __future__ import annotations

from correlators.worker.recovery_watch import STALL_S, RecoveryWatch


class Rig:
    def __init__(self) -> None:
        self.now = 0.0
        self.left: int | None = None
        self.reasons: list[str] = []
        self.watch = RecoveryWatch(lambda: self.left, self.reasons.append, clock=lambda: self.now)

    def at(self, t: float, left: int | None) -> bool:
        self.now, self.left = t, left
        return self.watch.check()


def test_a_recovery_that_reads_nothing_for_the_stall_time_gives_up_once_saying_why() -> None:
    """The CI case: one changelog partition, records left, none read for minutes."""
    rig = Rig()
    assert not rig.at(0, 3)
    assert not rig.at(STALL_S - 1, 3)
    assert rig.at(STALL_S, 3)
    assert rig.reasons == [f"table recovery has had 3 changelog records left to read for {STALL_S:.0f}s without "
                           "reading one"]


def test_a_recovery_that_moves_is_never_given_up_however_long_it_takes() -> None:
    rig = Rig()
    left = 10_000
    for t in range(0, 3600, 5):  # an hour of slow, steady progress
        assert not rig.at(t, left)
        left -= 1
    assert rig.reasons == []


def test_each_recovery_is_timed_from_its_own_start() -> None:
    """Out of recovery the watch forgets; a new rebalance's recovery (more left) starts its own timer."""
    rig = Rig()
    assert not rig.at(0, 2)
    assert not rig.at(50, None)  # recovered
    assert not rig.at(70, 2)  # recovering again: not 70 s stalled, just started
    assert not rig.at(70 + STALL_S - 1, 2)
    assert not rig.at(80 + STALL_S, 5)  # a rebalance in the middle: more to read, a new start
    assert not rig.at(80 + 2 * STALL_S - 1, 5)
    assert rig.at(80 + 2 * STALL_S, 5)


def test_nothing_left_to_read_is_not_a_stall() -> None:
    """Faust stays 'in recovery' for a moment after the last record; zero left is done, not stuck."""
    rig = Rig()
    for t in range(0, 600, 5):
        assert not rig.at(t, 0)
    assert rig.reasons == []

