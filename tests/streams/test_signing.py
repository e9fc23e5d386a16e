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
