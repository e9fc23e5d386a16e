"""Event-time timers: due order, re-arming, cancelling; nothing fires before its time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from correlators.timers import TimerQueue

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def drain(q: TimerQueue, now: datetime) -> list[tuple[str, tuple]]:
    out = []
    while (t := q.pop_due(now)) is not None:
        out.append((t.name, t.key))
    return out


def test_nothing_fires_early_and_due_ones_fire_in_time_order() -> None:
    q = TimerQueue()
    q.arm("b", ("x",), at(20))
    q.arm("a", ("x",), at(10))
    q.arm_after("c", ("y",), at(0), 15)
    assert drain(q, at(9.999)) == []
    assert drain(q, at(15)) == [("a", ("x",)), ("c", ("y",))]
    assert drain(q, at(100)) == [("b", ("x",))]
    assert drain(q, at(1000)) == []


def test_same_due_time_fires_in_arming_order() -> None:
    q = TimerQueue()
    for name in ("z", "m", "a"):
        q.arm(name, (), at(5))
    assert [n for n, _ in drain(q, at(5))] == ["z", "m", "a"]


def test_rearming_replaces_the_earlier_due_time() -> None:
    q = TimerQueue()
    q.arm("settle", ("i1",), at(30))
    q.arm("settle", ("i1",), at(60))
    assert q.due("settle", ("i1",)) == at(60)
    assert drain(q, at(45)) == []
    assert drain(q, at(60)) == [("settle", ("i1",))]
    q.arm("settle", ("i2",), at(90))
    q.arm("settle", ("i2",), at(70))  # earlier also works
    assert drain(q, at(75)) == [("settle", ("i2",))]
    assert drain(q, at(100)) == []


def test_cancel_and_armed() -> None:
    q = TimerQueue()
    q.arm("silence", ("n1",), at(60))
    assert q.armed("silence", ("n1",)) and not q.armed("silence", ("n2",))
    q.cancel("silence", ("n1",))
    q.cancel("silence", ("n9",))  # cancelling what is not armed is fine
    assert not q.armed("silence", ("n1",)) and q.due("silence", ("n1",)) is None
    assert drain(q, at(1000)) == []


def test_keys_distinguish_timers_of_one_name() -> None:
    q = TimerQueue()
    q.arm("judge", ("n1",), at(10))
    q.arm("judge", ("n2",), at(10))
    q.cancel("judge", ("n1",))
    assert drain(q, at(10)) == [("judge", ("n2",))]


def test_a_fired_timer_is_no_longer_armed_and_can_be_armed_again() -> None:
    q = TimerQueue()
    q.arm("fence", ("n1",), at(1))
    assert drain(q, at(1)) == [("fence", ("n1",))]
    assert not q.armed("fence", ("n1",))
    q.arm("fence", ("n1",), at(2))
    assert drain(q, at(2)) == [("fence", ("n1",))]
