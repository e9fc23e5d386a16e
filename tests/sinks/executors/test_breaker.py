"""The circuit breaker on a clock the test moves: opening past the share, closing as the window slides."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sinks.executors.breaker import CircuitBreaker

from .commands import at, command


def test_opens_past_the_share_of_the_fleet_and_names_what_was_fenced() -> None:
    breaker = CircuitBreaker(max_share=0.10, window=timedelta(minutes=10), fleet_size=40)  # 4 nodes per window
    for i in range(4):
        assert breaker.check(f"n{i}", at(i)) is None
        breaker.record(f"n{i}", at(i))
    why = breaker.check("n4", at(5))
    assert why is not None and "4 of 40 nodes" in why and "n0, n1, n2, n3" in why and "10%" in why


def test_a_node_already_fenced_in_the_window_costs_nothing_more() -> None:
    breaker = CircuitBreaker(max_share=0.10, fleet_size=10)  # 1 node per window
    breaker.record("n1", at(0))
    assert breaker.check("n1", at(30)) is None  # quarantine, then drain, of one node
    assert breaker.check("n2", at(30)) is not None


def test_closes_by_itself_once_the_window_slides_past() -> None:
    breaker = CircuitBreaker(max_share=0.10, window=timedelta(minutes=10), fleet_size=20)  # 2 per window
    breaker.record("n1", at(0))
    breaker.record("n2", at(300))
    assert breaker.check("n3", at(599)) is not None
    assert breaker.check("n3", at(600)) is None  # n1 left the window (10 min after it was fenced)
    breaker.record("n3", at(600))
    assert breaker.check("n4", at(899)) is not None
    assert breaker.fenced(at(900)) == ["n3"]  # n2 left at 900


def test_small_fleets_may_still_fence_min_nodes() -> None:
    breaker = CircuitBreaker(max_share=0.10, fleet_size=5, min_nodes=1)
    assert breaker.limit() == 1
    assert breaker.check("n1", at(0)) is None
    breaker.record("n1", at(0))
    assert breaker.check("n2", at(1)) is not None


def test_unknown_fleet_keeps_it_open() -> None:
    breaker = CircuitBreaker()
    why = breaker.check("n1", at(0))
    assert why is not None and "fleet size unknown" in why


def test_guards_only_capacity_removing_commands_with_a_node() -> None:
    breaker = CircuitBreaker(fleet_size=100)
    assert breaker.guards(command("c1", "drain_node"))
    assert breaker.guards(command("c2", "quarantine_gpu", gpu="GPU-1"))
    assert not breaker.guards(command("c3", "restart_job", node=None, job="j"))
    assert not breaker.guards(command("c4", "notify"))
    assert not breaker.guards(command("c5", "cordon_node", node=None))


@pytest.mark.parametrize("share", [0, -0.1, 1.5])
def test_rejects_a_meaningless_share(share: float) -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(max_share=share)
