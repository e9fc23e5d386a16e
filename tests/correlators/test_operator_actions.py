"""People's quarantines and releases: honoured like the correlator's own, and releases need a validation."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from correlators.engine import Correlator
from correlators.operator_trust import MAX_ACTION_AGE, OperatorTrust, screen
from correlators.policy import load_policy
from streams.decisions import Command
from streams.events import Event, GpuInfo, GpuRef, Inventory, OperatorAction, Xid
from streams.signing import SigningKeys, sign_operator_action

T = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _ev(n: int, body: object, node: str = "n1", seconds: float = 0) -> Event:
    return Event(id=f"e{n}", ts=T + timedelta(seconds=seconds), source="test", node=node, body=body)  # type: ignore[arg-type]


def _engine() -> Correlator:
    c = Correlator(load_policy())
    c.process(_ev(0, Inventory(rack="r1", gpus=[GpuInfo(index=i, uuid=f"GPU-{i}", pci=f"{0x18 + i:02x}:00")
                                                for i in range(2)])))
    return c


def _commands(decisions: Sequence[object]) -> list[Command]:
    return [d for d in decisions if isinstance(d, Command)]


def test_manual_quarantine_issues_a_command_once() -> None:
    c = _engine()
    act = OperatorAction(action="quarantine_gpu", gpu=GpuRef(index=1), by="alice", reason="flaky in burn-in")
    cmds = _commands(c.process(_ev(1, act, seconds=1)))
    assert [(k.type, k.target.gpu, k.params["by"]) for k in cmds] == [("quarantine_gpu", "GPU-1", "alice")]
    assert _commands(c.process(_ev(2, act, seconds=2))) == []  # already quarantined
    assert c.ledger.is_fenced("n1", 1)


def test_release_needs_a_validation_and_answers_the_fencing_incident() -> None:
    c = _engine()
    c.process(_ev(1, Xid(code=79, gpu=GpuRef(pci="18:00")), seconds=1))
    c.process(_ev(2, Inventory(rack="r1", gpus=[GpuInfo(index=0, uuid="GPU-0", pci="18:00")]), seconds=5))
    assert c.ledger.is_fenced("n1", 0)
    fenced_by = c.ledger.fenced_by("n1", 0)
    refused = OperatorAction(action="release_gpu", gpu=GpuRef(uuid="GPU-0"), by="bob")
    assert _commands(c.process(_ev(3, refused, seconds=10))) == []
    assert c.ledger.is_fenced("n1", 0)
    ok = OperatorAction(action="release_gpu", gpu=GpuRef(uuid="GPU-0"), by="bob", validated_by="dcgmi diag -r 3")
    cmds = _commands(c.process(_ev(4, ok, seconds=20)))
    assert [(k.type, k.target.gpu, k.incident, k.params["validated_by"]) for k in cmds] == \
           [("release_gpu", "GPU-0", fenced_by, "dcgmi diag -r 3")]
    assert not c.ledger.is_fenced("n1", 0)


def test_releasing_a_node_lifts_its_cordon_and_its_gpus() -> None:
    c = _engine()
    c.process(_ev(1, OperatorAction(action="cordon_node", by="alice", reason="PSU swap"), seconds=1))
    c.process(_ev(2, OperatorAction(action="quarantine_gpu", gpu=GpuRef(index=0), by="alice"), seconds=2))
    assert c.ledger.is_fenced("n1")
    cmds = _commands(c.process(_ev(3, OperatorAction(action="release_gpu", by="alice", validated_by="burn-in"),
                                   seconds=3)))
    assert [k.type for k in cmds] == ["release_gpu"]
    assert not c.ledger.is_fenced("n1") and not c.ledger.gpus


# --- issue 27: an operator action is a person's only when an operator key signed it ----------------------------

OPERATORS = SigningKeys.parse("alice:alice-secret-0123456789")


def _signed_engine() -> Correlator:
    c = Correlator(load_policy(), operators=OperatorTrust(OPERATORS, "prod", "east"))
    c.process(_ev(0, Inventory(rack="r1", gpus=[GpuInfo(index=0, uuid="GPU-0", pci="18:00")])))
    c.process(_ev(1, Xid(code=79, gpu=GpuRef(pci="18:00")), seconds=1))
    c.process(_ev(2, Inventory(rack="r1", gpus=[GpuInfo(index=0, uuid="GPU-0", pci="18:00")]), seconds=5))
    assert c.ledger.is_fenced("n1", 0)
    return c


def _release(n: int, seconds: float, by: str = "alice") -> Event:
    return _ev(n, OperatorAction(action="release_gpu", gpu=GpuRef(uuid="GPU-0"), by=by,
                                 validated_by="dcgmi diag -r 3 passed"), seconds=seconds)


def test_a_forged_release_from_an_agent_credential_puts_nothing_back_in_service() -> None:
    """The attack of issue 27 item 1: an unsigned `release_gpu` saying `by: alice`, with a validation, after an
    XID 79 fenced the GPU. Refused (it stays fenced, no command); the same action signed by alice's key runs, and
    the command says the key id as who acted."""
    c = _signed_engine()
    assert _commands(c.process(_release(3, 10))) == []
    assert c.ledger.is_fenced("n1", 0)
    other = SigningKeys.parse("mallory:mallory-secret-0123456789")
    for forged in (sign_operator_action(_release(4, 11), other, namespace="prod", cluster="east"),  # unknown key
                   sign_operator_action(_release(5, 12), OPERATORS, namespace="dev", cluster="east"),  # other ns
                   sign_operator_action(_release(6, 13), OPERATORS, namespace="prod", cluster="west")):  # cluster
        assert _commands(c.process(forged)) == [], forged.body
    signed = sign_operator_action(_release(7, 14), OPERATORS, namespace="prod", cluster="east")
    tampered = signed.model_copy(update={"node": "n2"})  # under the real one's id: it must not take it
    assert _commands(c.process(tampered)) == [] and c.ledger.is_fenced("n1", 0)
    cmds = _commands(c.process(signed))
    assert [(k.type, k.params["by"], k.reason) for k in cmds] == [("release_gpu", "alice", "alice")]
    assert not c.ledger.is_fenced("n1", 0)


def test_a_signed_action_replayed_long_after_is_refused_as_stale() -> None:
    c = _signed_engine()
    old = sign_operator_action(_release(3, 10), OPERATORS, namespace="prod", cluster="east")
    c.process(_ev(4, Inventory(rack="r1", gpus=[GpuInfo(index=0, uuid="GPU-0", pci="18:00")]),
                  seconds=10 + MAX_ACTION_AGE.total_seconds() + 60))
    assert _commands(c.process(old)) == [] and c.ledger.is_fenced("n1", 0)


def test_the_worker_sets_unsigned_actions_aside_with_the_reason() -> None:
    trust = OperatorTrust(OPERATORS, "prod", "east")
    signed = sign_operator_action(_release(3, 10), OPERATORS, namespace="prod", cluster="east")
    heartbeat = _ev(9, Inventory(rack="r1"))
    keep, refused = screen([_release(2, 9), heartbeat, signed], trust)
    assert keep == [heartbeat, signed]
    assert [(e.id, why) for e, why in refused] == [("e2", "operator action refused: unsigned")]
    assert screen([_release(2, 9)], OperatorTrust())[1] == []  # development: no keys, taken as it says


def test_a_fence_of_hardware_nothing_names_is_refused() -> None:
    """Issue 28 item 2: `quarantine gpu-node-01:99` and `nosuchnode:1` were fenced and listed as fenced. A GPU
    no inventory lists and a node no inventory or job names are refused: nothing is fenced, no command."""
    c = _engine()  # n1 has GPUs 0 and 1
    for n, (node, act) in enumerate([
            ("n1", OperatorAction(action="quarantine_gpu", gpu=GpuRef(index=99), by="alice", reason="bad index")),
            ("n1", OperatorAction(action="quarantine_gpu", gpu=GpuRef(uuid="GPU-typo"), by="alice")),
            ("nosuchnode", OperatorAction(action="quarantine_gpu", gpu=GpuRef(index=1), by="alice")),
            ("nosuchnode", OperatorAction(action="cordon_node", by="alice", reason="typo"))]):
        assert _commands(c.process(_ev(10 + n, act, node=node, seconds=1 + n))) == [], (node, act)
    assert not c.ledger.is_fenced("n1", 99) and not c.ledger.is_fenced("nosuchnode", 1)
    assert "nosuchnode" not in c.ledger.nodes
    ok = OperatorAction(action="quarantine_gpu", gpu=GpuRef(index=1), by="alice", reason="flaky")
    assert [k.type for k in _commands(c.process(_ev(20, ok, seconds=30)))] == ["quarantine_gpu"]
