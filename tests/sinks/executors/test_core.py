"""The executor core with a recording backend: at most once per id, approvals, dry runs, the breaker,
and a ledger that survives restarts and is rebuilt from the results topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from sinks.executors.breaker import CircuitBreaker
from sinks.executors.core import ExecutionError, Executor
from sinks.executors.ledger import ResultLedger
from streams.decisions import Command

from .commands import approval, at, command, result


class FakeBackend:
    """Records what it was asked to do; fails the ids it is told to."""

    name = "fake"

    def __init__(self, types: tuple[str, ...] = ("cordon_node", "drain_node", "quarantine_gpu", "restart_job",
                                                   "notify", "reboot_node")) -> None:
        self.types = set(types)
        self.executed: list[str] = []
        self.fail: dict[str, Exception] = {}

    def supports(self, cmd_type: str) -> bool:
        return cmd_type in self.types

    def plan(self, cmd: Command) -> str:
        return f"fake {cmd.type} {cmd.target.node}"

    def execute(self, cmd: Command) -> str:
        self.executed.append(cmd.id)
        if cmd.id in self.fail:
            raise self.fail[cmd.id]
        return f"did {cmd.type}"

    def fleet_size(self) -> int | None:
        return 100

    def knows_node(self, node: str) -> bool:
        return node not in self.unknown

    unknown: frozenset[str] = frozenset()


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


def executor(backend: FakeBackend, path: Path | None = None, *, dry_run: bool = False,
             fleet: int = 100) -> Executor:
    return Executor(backend, ResultLedger(path), breaker=CircuitBreaker(fleet_size=fleet), dry_run=dry_run)


def test_a_command_runs_once_and_its_repeats_are_duplicates(backend: FakeBackend) -> None:
    ex = executor(backend)
    first = ex.handle(command("c1"), at(0))
    again = ex.handle(command("c1"), at(5))
    assert (first.status, first.executor, first.detail) == ("done", "fake", "did cordon_node")
    assert again.status == "skipped_duplicate" and "already done" in again.detail
    assert backend.executed == ["c1"]


def test_a_failed_command_is_not_retried(backend: FakeBackend) -> None:
    backend.fail["c1"] = ExecutionError("scontrol: exit 1: Invalid node name")
    ex = executor(backend)
    assert ex.handle(command("c1"), at(0)).status == "failed"
    again = ex.handle(command("c1"), at(1))
    assert again.status == "skipped_duplicate" and "Invalid node name" in again.detail
    assert backend.executed == ["c1"]


def test_a_backend_bug_fails_the_command_without_stopping_the_executor(backend: FakeBackend) -> None:
    backend.fail["c1"] = KeyError("oops")
    ex = executor(backend)
    res = ex.handle(command("c1"), at(0))
    assert res.status == "failed" and res.detail.startswith("unexpected KeyError")
    assert ex.handle(command("c2", node="other"), at(1)).status == "done"


def test_approval_required_waits_then_runs_when_approved(backend: FakeBackend) -> None:
    ex = executor(backend)
    c1 = command("c1", "restart_job", node=None, job="llm", requires_approval=True)
    held = ex.handle(c1, at(0))
    assert held.status == "waiting_approval" and "faultline approve c1" in held.detail
    assert ex.handle(command("c1", "restart_job", node=None, job="llm", requires_approval=True),
                     at(1)).status == "skipped_duplicate"
    assert backend.executed == []
    done = ex.decide(approval(c1, by="alice"), at(60))
    assert done is not None and done.status == "done" and "approved by alice" in done.detail
    assert backend.executed == ["c1"]
    assert ex.decide(approval(c1, "deny", by="bob"), at(61)) is None  # the first decision stands


def test_denied_commands_never_run(backend: FakeBackend) -> None:
    ex = executor(backend)
    c1 = command("c1", "reboot_node", requires_approval=True)
    ex.handle(c1, at(0))
    denied = ex.decide(approval(c1, "deny", by="bob", reason="node is fine"), at(60))
    assert denied is not None and denied.status == "denied"
    assert "bob" in denied.detail and "node is fine" in denied.detail
    assert ex.decide(approval(c1, "approve"), at(61)) is None
    assert ex.handle(command("c1", "reboot_node", requires_approval=True), at(62)).status == "skipped_duplicate"
    assert backend.executed == []


def test_a_decision_that_arrives_first_is_applied_when_the_command_does(backend: FakeBackend) -> None:
    ex = executor(backend)
    assert ex.decide(approval(command("c1", "drain_node", requires_approval=True)), at(0)) is None
    assert ex.decide(approval(command("c2", "drain_node", node="n2", requires_approval=True), "deny"), at(0)) is None
    assert ex.handle(command("c1", "drain_node", requires_approval=True), at(1)).status == "done"
    assert ex.handle(command("c2", "drain_node", node="n2", requires_approval=True), at(1)).status == "denied"
    assert backend.executed == ["c1"]


def test_reboot_needs_approval_even_when_the_command_forgot_to_say_so(backend: FakeBackend) -> None:
    ex = executor(backend)
    assert ex.handle(command("c1", "reboot_node", requires_approval=False), at(0)).status == "waiting_approval"
    assert backend.executed == []


def test_dry_run_says_what_would_run_and_records_nothing(backend: FakeBackend) -> None:
    ex = executor(backend, dry_run=True)
    res = ex.handle(command("c1", "cordon_node"), at(0))
    assert (res.status, res.detail) == ("dry_run", "would run: fake cordon_node gpu-node-07")
    held = ex.handle(command("c2", "reboot_node"), at(0))
    assert held.status == "dry_run" and "after a person's approval" in held.detail
    odd = ex.handle(command("c3", "open_ticket"), at(0))
    assert odd.status == "dry_run" and odd.detail.startswith("would fail: unsupported")
    assert ex.handle(command("c1", "cordon_node"), at(1)).status == "dry_run"
    assert backend.executed == [] and ex.ledger.get("c1") is None and ex.ledger.get("c3") is None


def test_unsupported_types_fail_with_the_reason(backend: FakeBackend) -> None:
    ex = executor(backend)
    res = ex.handle(command("c1", "open_ticket"), at(0))
    assert res.status == "failed" and res.detail == "unsupported: the fake backend does not carry out open_ticket"
    assert backend.executed == []


def test_the_breaker_stops_fencing_past_the_share_and_lets_it_through_later(backend: FakeBackend) -> None:
    ex = executor(backend, fleet=20)  # 10%: two nodes per 10 minutes
    assert ex.handle(command("c1", "cordon_node", node="n1"), at(0)).status == "done"
    assert ex.handle(command("c2", "quarantine_gpu", node="n2", gpu="GPU-2"), at(10)).status == "done"
    assert ex.handle(command("c3", "drain_node", node="n2"), at(20)).status == "done"  # n2 again: free
    blocked = ex.handle(command("c4", "cordon_node", node="n3"), at(30))
    assert blocked.status == "failed" and blocked.detail.startswith("circuit breaker open: 2 of 20 nodes")
    assert ex.handle(command("c5", "restart_job", node=None, job="llm"), at(31)).status == "done"  # not guarded
    assert ex.handle(command("c6", "cordon_node", node="n3"), at(601)).status == "done"  # n1 left the window
    assert backend.executed == ["c1", "c2", "c3", "c5", "c6"]


def test_the_ledger_survives_a_restart(tmp_path: Path, backend: FakeBackend) -> None:
    path = tmp_path / "fake.ledger.sqlite"
    first = executor(backend, path)
    first.handle(command("c1"), at(0))
    first.handle(command("c2", "drain_node", requires_approval=True), at(0))
    first.ledger.close()

    second = executor(backend, path)
    assert second.handle(command("c1"), at(10)).status == "skipped_duplicate"
    done = second.decide(approval(command("c2", "drain_node", requires_approval=True)), at(20))  # held before the restart, approved after it
    assert done is not None and done.status == "done"
    assert backend.executed == ["c1", "c2"]


def test_an_attempt_interrupted_by_a_crash_is_reported_not_repeated(tmp_path: Path, backend: FakeBackend) -> None:
    path = tmp_path / "fake.ledger.sqlite"
    crashed = ResultLedger(path)
    crashed.begin(command("c1"), at(0))  # the process died inside the backend call
    crashed.close()

    ex = executor(backend, path)
    owed = ex.recover(at(30))
    assert [(r.command, r.status) for r in owed] == [("c1", "failed")]
    assert owed[0].detail.startswith("interrupted:")
    assert ex.handle(command("c1"), at(31)).status == "skipped_duplicate"
    assert backend.executed == []


def test_results_not_yet_published_are_owed_until_marked(backend: FakeBackend) -> None:
    ex = executor(backend)
    done = ex.handle(command("c1"), at(0))
    held = ex.handle(command("c2", "reboot_node"), at(0))
    assert [r.command for r in ex.recover(at(1))] == ["c1", "c2"]
    ex.published(done)
    ex.published(held)
    assert ex.recover(at(2)) == []
    approved = ex.decide(approval(command("c2", "reboot_node")), at(3))
    assert approved is not None and [r.status for r in ex.recover(at(4))] == ["done"]


def test_the_breaker_remembers_fences_across_a_restart(tmp_path: Path, backend: FakeBackend) -> None:
    path = tmp_path / "fake.ledger.sqlite"
    first = executor(backend, path, fleet=10)  # one node per window
    first.handle(command("c1", node="n1"), at(0))
    first.ledger.close()
    second = executor(backend, path, fleet=10)
    second.recover(at(60))
    assert second.handle(command("c2", node="n2"), at(60)).status == "failed"


def test_a_fresh_executor_rebuilt_from_the_results_topic_never_repeats(backend: FakeBackend) -> None:
    ex = executor(backend)
    assert ex.absorb(result("c1", "done"))
    assert ex.absorb(result("c2", "denied"))
    assert not ex.absorb(result("c3", "done", executor="slurm"))  # someone else's result
    assert not ex.absorb(result("c1", "skipped_duplicate"))
    assert ex.absorb(result("c4", "waiting_approval"))
    assert ex.ledger.missing_commands() == ["c4"]

    assert ex.handle(command("c1"), at(1)).status == "skipped_duplicate"
    assert ex.handle(command("c2"), at(1)).status == "skipped_duplicate"
    assert ex.handle(command("c3", node="n3"), at(1)).status == "done"
    assert ex.attach(command("c4", "drain_node", node="n4", requires_approval=True), at(1))  # found on the topic
    done = ex.decide(approval(command("c4", "drain_node", node="n4", requires_approval=True)), at(2))
    assert done is not None and done.status == "done"

    assert ex.absorb(result("c5", "waiting_approval"))  # its command comes round again instead
    assert ex.handle(command("c5", "drain_node", node="n5", requires_approval=True), at(3)).status == (
        "skipped_duplicate")
    done = ex.decide(approval(command("c5", "drain_node", node="n5", requires_approval=True)), at(4))
    assert done is not None and done.status == "done"
    assert backend.executed == ["c3", "c4", "c5"]
    assert {r.command for r in ex.recover(at(5))} == {"c3", "c4", "c5"}  # c1, c2 were on the topic already


def test_with_keys_only_the_correlators_signed_commands_run(backend: FakeBackend) -> None:
    from datetime import timedelta

    from streams.signing import SigningKeys, sign

    keys = SigningKeys.parse("k1:a-secret-of-sixteen-plus")
    ex = Executor(backend, ResultLedger(None), breaker=CircuitBreaker(fleet_size=100), keys=keys)
    good = sign(command("c1"), keys, at(0), timedelta(hours=1))
    assert ex.handle(command("c2"), at(1)).status == "refused"  # unsigned
    forged = good.model_copy(update={"id": "c3"})  # a valid signature moved onto another command
    result = ex.handle(forged, at(1))
    assert (result.status, "tampered" in result.detail) == ("refused", True)
    assert ex.handle(sign(command("c4"), keys, at(0), timedelta(seconds=10)), at(20)).detail.startswith(
        "refused: expired")
    assert ex.handle(good, at(1)).status == "done"
    assert ex.handle(good, at(2)).status == "skipped_duplicate"  # replaying a signed command runs nothing
    assert backend.executed == ["c1"]
