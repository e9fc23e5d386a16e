"""Issue 15's attacks on the executor, each reproduced and refused (findings 2, 3, 4 and 5).

The executor holds every key a production start requires: the correlator's command keys, the
operators' approval keys and the executors' result keys. Each test plays one attack as someone who
can write one topic would (a forged result, an unsigned command, an approval given in advance...)
and checks that nothing reaches the backend.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from sinks.executors.breaker import CircuitBreaker
from sinks.executors.core import Executor
from sinks.executors.ledger import ResultLedger
from sinks.executors.trust import Trust
from streams.canonical import content_hash
from streams.decisions import Approval, Command, CommandResult
from streams.signing import SigningKeys, approval_for, seal, sign, sign_approval, sign_result

from .commands import at, command
from .test_core import FakeBackend

CORRELATOR = SigningKeys.parse("corr-2:correlator-secret-new-0123,corr-1:correlator-secret-old-0123")
OPERATORS = SigningKeys.parse("alice:alice-secret-0123456789,bob:bob-secret-0123456789")
ALICE = SigningKeys.parse("alice:alice-secret-0123456789")
EXECUTORS = SigningKeys.parse("exec-1:executor-secret-0123456789")
ATTACKER = SigningKeys.parse("mallory:mallory-secret-0123456789")
NS, CLUSTER = "faultline", "east"
TTL = timedelta(hours=1)


def trusting(backend: FakeBackend, *, commands: SigningKeys = CORRELATOR, name: str = "fake") -> Executor:
    trust = Trust(commands=commands, operators=OPERATORS, executors=EXECUTORS, namespace=NS, cluster=CLUSTER)
    return Executor(backend, ResultLedger(None), breaker=CircuitBreaker(fleet_size=100), trust=trust, name=name)


def signed(cmd: Command, seconds: float = 0, keys: SigningKeys = CORRELATOR) -> Command:
    return sign(cmd, keys, at(seconds), TTL, namespace=NS, cluster=CLUSTER)


def decided(cmd: Command, decision: str = "approve", keys: SigningKeys = ALICE, seconds: float = 60) -> Approval:
    made = Approval(command=cmd.id, decision=decision, by="?", at=at(seconds))  # type: ignore[arg-type]
    return sign_approval(approval_for(cmd, made), keys)


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


# --- finding 2: the approval path -------------------------------------------------------------


def test_a_forged_hold_an_unsigned_reboot_and_an_approval_run_nothing(backend: FakeBackend) -> None:
    ex = trusting(backend)
    forged_hold = CommandResult(command="cmd-evil", status="waiting_approval", at=at(0), executor="fake")
    assert not ex.absorb(forged_hold)  # not signed by an executor key: teaches the ledger nothing
    reboot = command("cmd-evil", "reboot_node", node="gpu-node-07")
    assert ex.handle(reboot, at(1)).status == "refused"  # unsigned
    assert not ex.attach(reboot, at(1))
    assert ex.decide(decided(reboot), at(2)) is None
    assert ex.decide(Approval(command="cmd-evil", decision="approve", by="alice", at=at(2),
                              command_hash=content_hash(reboot)), at(2)) is None  # unsigned approval
    assert backend.executed == [] and ex.ledger.get("cmd-evil") is None


def test_an_approval_after_the_command_expired_runs_nothing(backend: FakeBackend) -> None:
    ex = trusting(backend)
    reboot = signed(command("c1", "reboot_node"))
    assert ex.handle(reboot, at(1)).status == "waiting_approval"
    late = ex.decide(decided(reboot, seconds=30 * 86400), at(30 * 86400))
    assert late is not None and late.status == "refused" and "expired" in late.detail
    assert backend.executed == []
    assert ex.handle(reboot, at(30 * 86400 + 1)).status == "refused"  # and a redelivery is refused too


def test_an_approval_given_in_advance_for_a_predictable_id_releases_nothing_else(backend: FakeBackend) -> None:
    ex = trusting(backend)
    guessed = signed(command("inc-9-reboot-1", "reboot_node", node="gpu-node-07"))
    assert ex.decide(decided(guessed.model_copy(update={"reason": "whatever"})), at(0)) is None
    real = signed(command("inc-9-reboot-1", "reboot_node", node="gpu-node-07"), seconds=5)
    assert ex.handle(real, at(6)).status == "waiting_approval"  # the advance approval names other content
    assert backend.executed == []
    done = ex.decide(decided(real), at(7))  # a decision on the content held does release it
    assert done is not None and done.status == "done" and done.detail.endswith("(approved by alice)")
    assert backend.executed == ["inc-9-reboot-1"]


def test_an_approval_that_names_no_content_or_lies_about_who_is_ignored(backend: FakeBackend) -> None:
    ex = trusting(backend)
    reboot = signed(command("c1", "reboot_node"))
    ex.handle(reboot, at(1))
    no_hash = sign_approval(Approval(command="c1", decision="approve", by="alice", at=at(2)), ALICE)
    assert ex.refuse_approval(no_hash) is not None and ex.decide(no_hash, at(2)) is None
    as_bob = seal(approval_for(reboot, Approval(command="c1", decision="approve", by="bob", at=at(2))), ALICE)
    assert "says it is by 'bob'" in (ex.refuse_approval(as_bob) or "")
    assert ex.decide(as_bob, at(2)) is None
    assert ex.decide(decided(reboot, keys=ATTACKER), at(2)) is None
    assert backend.executed == []
    by_bob = ex.decide(decided(reboot, keys=SigningKeys.parse("bob:bob-secret-0123456789")), at(3))
    assert by_bob is not None and by_bob.status == "done"


def test_a_forged_done_result_does_not_make_the_real_command_a_duplicate(backend: FakeBackend) -> None:
    ex = trusting(backend)
    assert not ex.absorb(CommandResult(command="c1", status="done", at=at(0), executor="fake"))
    assert not ex.absorb(sign_result(CommandResult(command="c1", status="done", at=at(0), executor="fake"),
                                     ATTACKER))
    assert ex.handle(signed(command("c1")), at(1)).status == "done"
    assert backend.executed == ["c1"]


def test_results_are_signed_and_a_second_executor_learns_from_them(backend: FakeBackend) -> None:
    first = trusting(backend)
    result = first.handle(signed(command("c1")), at(1))
    assert result.signature and result.signature.startswith("hmac-sha256:exec-1:")
    second = trusting(backend)
    assert second.absorb(result)
    assert second.handle(signed(command("c1")), at(2)).status == "skipped_duplicate"
    assert backend.executed == ["c1"]


# --- finding 3: identifiers and inventory ------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [
    ("node", "gpu-[001-999]"), ("node", "ALL"), ("node", "n01,n02"), ("node", "-h"), ("node", "n 1"),
    ("gpu", "GPU-1,GPU-2"), ("job", "1,2,3"), ("job", "all"),
])
def test_a_signed_command_naming_more_than_one_thing_is_refused(backend: FakeBackend, field: str,
                                                                 value: str) -> None:
    ex = trusting(backend)
    args = {"node": "gpu-node-07", "gpu": None, "job": None, field: value}
    cmd = signed(command("c1", "quarantine_gpu" if field == "gpu" else "cordon_node", **args))
    result = ex.handle(cmd, at(1))
    assert result.status == "refused" and f"target.{field}" in result.detail
    assert backend.executed == [] and ex.ledger.get("c1") is None


def test_excluded_nodes_of_a_restart_are_held_to_the_grammar_and_the_inventory(backend: FakeBackend) -> None:
    ex = trusting(backend)
    hostlist = signed(command("c1", "restart_job", node=None, job="llm", params={"exclude": {"nodes": ["n[1-9]"]}}))
    assert ex.handle(hostlist, at(1)).status == "refused"
    backend.unknown = frozenset({"n-elsewhere"})
    unknown = signed(command("c2", "restart_job", node=None, job="llm",
                             params={"exclude": {"nodes": ["n-elsewhere"]}}))
    assert ex.handle(unknown, at(1)).status == "refused"
    assert backend.executed == []


def test_only_nodes_the_backend_knows_are_acted_on(backend: FakeBackend) -> None:
    backend.unknown = frozenset({"gpu-node-99"})
    ex = trusting(backend)
    result = ex.handle(signed(command("c1", node="gpu-node-99")), at(1))
    assert result.status == "refused" and "unknown node 'gpu-node-99'" in result.detail
    assert ex.handle(signed(command("c2", node="gpu-node-07")), at(1)).status == "done"
    assert backend.executed == ["c2"]


def test_a_held_command_for_a_node_no_inventory_lists_is_refused_before_anyone_is_asked(backend: FakeBackend) -> None:
    """Issue 27 item 6: a flood of reboots for unknown nodes queued 20,000 approvals; now none is held."""
    backend.unknown = frozenset({"gpu-node-99"})
    ex = trusting(backend)
    result = ex.handle(signed(command("c1", node="gpu-node-99", requires_approval=True)), at(1))
    assert result.status == "refused" and "unknown node 'gpu-node-99'" in result.detail
    assert ex.ledger.get("c1") is None  # nothing held, nothing to approve
    assert ex.handle(signed(command("c2", requires_approval=True)), at(1)).status == "waiting_approval"


# --- findings 4 and 5: malformed signatures, scope, rotation -------------------------------------


@pytest.mark.parametrize("signature", ["hmac-sha256:corr-2:" + "\u00e9" * 64, "\u2603", "hmac-sha256:corr-2:"])
def test_a_malformed_signature_is_a_refused_result_not_an_exception(backend: FakeBackend, signature: str) -> None:
    result = trusting(backend).handle(signed(command("c1")).model_copy(update={"signature": signature}), at(1))
    assert result.status == "refused" and "malformed signature" in result.detail
    assert backend.executed == []


def test_a_command_signed_for_another_namespace_or_cluster_is_refused(backend: FakeBackend) -> None:
    ex = trusting(backend)
    replayed = sign(command("c1"), CORRELATOR, at(0), TTL, namespace="faultline.replay-1", cluster=CLUSTER)
    west = sign(command("c2"), CORRELATOR, at(0), TTL, namespace=NS, cluster="west")
    unscoped = sign(command("c3"), CORRELATOR, at(0), TTL)
    for cmd in (replayed, west, unscoped):
        assert ex.handle(cmd, at(1)).status == "refused"
    assert backend.executed == []


def test_key_rotation_old_key_accepted_until_retired(backend: FakeBackend) -> None:
    old = SigningKeys.parse("corr-1:correlator-secret-old-0123")
    during = trusting(backend)  # new key active, old one still configured
    assert during.handle(signed(command("c1"), keys=old), at(1)).status == "done"
    assert during.handle(signed(command("c2", node="n2")), at(1)).status == "done"
    after = trusting(backend, commands=SigningKeys.parse("corr-2:correlator-secret-new-0123"))
    retired = after.handle(signed(command("c3", node="n3"), keys=old), at(2))
    assert retired.status == "refused" and "unknown signing key 'corr-1'" in retired.detail
    assert after.handle(signed(command("c4", node="n4")), at(2)).status == "done"
    assert backend.executed == ["c1", "c2", "c4"]
