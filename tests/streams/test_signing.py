"""Signed commands: what verifies and what is refused, and why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streams.decisions import Command, Target
from streams.signing import SigningKeys, sign, verify

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
KEYS = SigningKeys.parse("k2:0123456789abcdef-new,k1:0123456789abcdef-old")
CMD = Command(id="cmd-1", incident="inc-1", type="cordon_node", target=Target(node="n03"), issued_at=NOW)


def test_a_signed_command_verifies_until_it_expires() -> None:
    signed = sign(CMD, KEYS, NOW, timedelta(hours=1))
    assert signed.signature and signed.signature.startswith("hmac-sha256:k2:")
    assert verify(signed, KEYS, NOW + timedelta(minutes=59)) is None
    assert verify(signed, KEYS, NOW + timedelta(hours=1)) == "expired"
    assert verify(Command.model_validate_json(signed.model_dump_json()), KEYS, NOW) is None  # survives the bus


def test_forgeries_are_refused_with_the_reason() -> None:
    signed = sign(CMD, KEYS, NOW, timedelta(hours=1))
    assert verify(CMD, KEYS, NOW) == "unsigned"
    tampered = signed.model_copy(update={"target": Target(node="n04")})
    assert verify(tampered, KEYS, NOW) == "bad signature (tampered with?)"
    longer = signed.model_copy(update={"expires_at": NOW + timedelta(days=30)})
    assert verify(longer, KEYS, NOW) == "bad signature (tampered with?)"
    other = sign(CMD, SigningKeys.parse("k9:someone-elses-secret-key"), NOW, timedelta(hours=1))
    assert verify(other, KEYS, NOW) == "unknown signing key 'k9'"
    assert verify(signed.model_copy(update={"signature": "md5:k2:abc"}), KEYS, NOW) == "malformed signature"


def test_rotation_old_key_still_verifies_while_configured() -> None:
    old = sign(CMD, SigningKeys.parse("k1:0123456789abcdef-old"), NOW, timedelta(hours=1))
    assert verify(old, KEYS, NOW) is None
    assert verify(old, SigningKeys.parse("k2:0123456789abcdef-new"), NOW) == "unknown signing key 'k1'"


def test_keys_are_validated_and_never_shown() -> None:
    assert "0123456789abcdef" not in repr(KEYS)
    with pytest.raises(ValueError):
        SigningKeys.parse("k1:short")
    with pytest.raises(ValueError):
        SigningKeys.parse("")


# --- issue 15, findings 2, 4 and 5 ------------------------------------------------------------------


def test_a_signature_covers_namespace_and_cluster() -> None:
    signed = sign(CMD, KEYS, NOW, timedelta(hours=1), namespace="faultline", cluster="east")
    assert verify(signed, KEYS, NOW, namespace="faultline", cluster="east") is None
    assert verify(signed, KEYS, NOW, namespace="faultline.replay-1", cluster="east") == (
        "signed for namespace 'faultline', not this executor's 'faultline.replay-1'")
    assert verify(signed, KEYS, NOW, namespace="faultline", cluster="west") == (
        "signed for cluster 'east', not this executor's 'west'")
    moved = signed.model_copy(update={"cluster": "west"})  # re-labelled for another cluster: the MAC breaks
    assert verify(moved, KEYS, NOW, namespace="faultline", cluster="west") == "bad signature (tampered with?)"


def test_what_is_signed_is_rfc8785_json_that_any_language_can_rebuild() -> None:
    import hashlib
    import hmac
    import json

    import rfc8785

    signed = sign(CMD, KEYS, NOW, timedelta(hours=1), namespace="faultline", cluster="east")
    wire = json.loads(signed.model_dump_json())  # what a Go or Java executor receives
    scheme, kid, mac = wire.pop("signature").split(":")
    document = {k: v for k, v in wire.items() if v is not None}
    document["target"] = {k: v for k, v in document["target"].items() if v is not None}
    want = hmac.new(b"0123456789abcdef-new", rfc8785.dumps(document), hashlib.sha256).hexdigest()
    assert (scheme, kid, mac) == ("hmac-sha256", "k2", want)


@pytest.mark.parametrize("signature", [
    "hmac-sha256:k2:" + "\u00e9" * 64,  # not ASCII: compare_digest raised TypeError (finding 4)
    "hmac-sha256:k2:\u2603",
    "hmac-sha256:\u00e9:" + "0" * 64,
    "hmac-sha256:k2:" + "0" * 63,
    "hmac-sha256:k2:" + "G" * 64,
    "hmac-sha256::" + "0" * 64,
    "hmac-sha256",
    ":::",
    "\x00",
])
def test_a_malformed_signature_is_a_refusal_never_an_exception(signature: str) -> None:
    assert verify(CMD.model_copy(update={"signature": signature}), KEYS, NOW) == "malformed signature"


def test_rotation_with_retirement() -> None:
    """New key signs, old key verifies until it is retired from the verifiers' setting."""
    before = SigningKeys.parse("k1:0123456789abcdef-old")
    during = SigningKeys.parse("k2:0123456789abcdef-new,k1:0123456789abcdef-old")
    after = SigningKeys.parse("k2:0123456789abcdef-new")
    from_old = sign(CMD, before, NOW, timedelta(hours=1))
    from_new = sign(CMD, during, NOW, timedelta(hours=1))
    assert from_new.signature and from_new.signature.startswith("hmac-sha256:k2:")
    assert verify(from_old, during, NOW) is None and verify(from_new, during, NOW) is None
    assert verify(from_old, after, NOW) == "unknown signing key 'k1'"
    assert verify(from_new, after, NOW) is None


def test_an_approval_is_signed_by_an_operator_key_whose_id_says_who() -> None:
    from streams.canonical import content_hash
    from streams.decisions import Approval
    from streams.signing import approval_for, seal, sign_approval, verify_approval

    operators = SigningKeys.parse("alice:alice-secret-0123456789,bob:bob-secret-0123456789")
    alice = SigningKeys.parse("alice:alice-secret-0123456789")
    cmd = sign(CMD, KEYS, NOW, timedelta(hours=1))
    decision = Approval(command="ignored", decision="approve", by="whoever", at=NOW)
    approved = sign_approval(approval_for(cmd, decision), alice)
    assert (approved.command, approved.command_hash, approved.by) == (cmd.id, content_hash(cmd), "alice")
    assert verify_approval(approved, operators) is None
    assert verify_approval(approved.model_copy(update={"by": "bob"}), operators) == "bad signature (tampered with?)"
    assert verify_approval(decision, operators) == "unsigned"
    mallory = sign_approval(approval_for(cmd, decision), SigningKeys.parse("mallory:mallory-secret-0123456"))
    assert verify_approval(mallory, operators) == "unknown signing key 'mallory'"
    liar = seal(approval_for(cmd, decision).model_copy(update={"by": "bob"}), alice)  # alice signs as bob
    assert verify_approval(liar, operators) == "signed with key 'alice' but says it is by 'bob'"


def test_a_result_is_signed_by_an_executor_key() -> None:
    from streams.decisions import CommandResult
    from streams.signing import sign_result, verify_result

    executors = SigningKeys.parse("exec-1:executor-secret-0123456789")
    result = CommandResult(command="cmd-1", status="done", at=NOW, executor="slurm")
    assert verify_result(sign_result(result, executors), executors) is None
    assert verify_result(result, executors) == "unsigned"
    forged = sign_result(result, executors).model_copy(update={"command": "cmd-2"})
    assert verify_result(forged, executors) == "bad signature (tampered with?)"


def test_an_operator_action_is_signed_over_the_whole_event_by_the_key_whose_id_is_who() -> None:
    """Issue 27: a quarantine or release on the events topic is a person's only when an operator key signed it."""
    from streams.batch import decode_record
    from streams.events import Event, GpuRef, OperatorAction
    from streams.signing import sign_operator_action, verify_operator_action

    alice = SigningKeys.parse("alice:alice-secret-0123456789")
    event = Event(id="operator-1", ts=NOW, source="operator", node="gpu-007",
                  body=OperatorAction(action="release_gpu", gpu=GpuRef(index=0), by="someone", validated_by="dcgmi"))
    signed = sign_operator_action(event, alice, namespace="prod", cluster="east")
    assert signed.body.by == "alice" and signed.body.signature.startswith("hmac-sha256:alice:")  # type: ignore[union-attr]
    wire = decode_record(signed.model_dump_json().encode()).events[0]  # as the correlator reads it
    assert verify_operator_action(wire, alice, namespace="prod", cluster="east") == ("alice", None)
    assert verify_operator_action(event, alice) == (None, "unsigned")
    for field, value in (("node", "gpu-008"), ("ts", NOW + timedelta(seconds=1)), ("id", "operator-2")):
        assert verify_operator_action(signed.model_copy(update={field: value}), alice) == \
            (None, "bad signature (tampered with?)"), field
    says_bob = signed.model_copy(update={"body": signed.body.model_copy(update={"by": "bob"})})
    assert verify_operator_action(says_bob, alice)[1] == "bad signature (tampered with?)"
    assert verify_operator_action(signed, alice, namespace="dev")[1] == \
        "signed for namespace 'prod', not this correlator's 'dev'"
    assert verify_operator_action(signed, SigningKeys.parse("bob:bob-secret-0123456789abc"))[1] == \
        "unknown operator key 'alice'"


def test_integer_fields_refuse_floats_so_8_and_8_0_cannot_both_be_read() -> None:
    """Issue 27 item 6: `8` and `8.0` have one canonical form; the schema takes only the integer."""
    from pydantic import ValidationError

    from streams.canonical import canonical_json
    from streams.events import Event

    good = '{"id":"e1","ts":"2026-11-29T12:00:00Z","source":"trainer","node":"n1","rank":8,' \
           '"body":{"kind":"train_step","step":8}}'
    assert Event.model_validate_json(good).rank == 8
    for bad in (good.replace('"rank":8', '"rank":8.0'), good.replace('"step":8', '"step":8.0')):
        with pytest.raises(ValidationError, match="integer"):
            Event.model_validate_json(bad)
    assert canonical_json({"n": 8}) == canonical_json({"n": 8.0})  # why the schema must decide


def test_a_signed_count_changed_to_a_float_is_refused_not_read_alike() -> None:
    """Issue 27, item 6: a signature over ``"gpus": 8`` does not cover ``"gpus": 8.0`` (which the Slurm backend
    read otherwise): on the bus the schema refuses it; a record changed past the schema fails verification."""
    from pydantic import ValidationError

    restart = Command(id="cmd-2", incident="inc-1", type="restart_job", target=Target(job="llm"), issued_at=NOW,
                      params={"gpus": 8, "gpu_class": "h100"})
    signed = sign(restart, KEYS, NOW, timedelta(hours=1))
    assert verify(signed, KEYS, NOW) is None
    wire = signed.model_dump_json().replace('"gpus":8,', '"gpus":8.0,')
    assert '"gpus":8.0' in wire
    with pytest.raises(ValidationError, match=r"params\.gpus must be an integer"):
        Command.model_validate_json(wire)
    changed = signed.model_copy(deep=True)
    changed.params["gpus"] = 8.0
    assert (verify(changed, KEYS, NOW) or "").startswith("bad signature: ")
    with pytest.raises(ValueError, match="must be an integer"):
        sign(changed, KEYS, NOW, timedelta(hours=1))
