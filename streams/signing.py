"""Signed commands: anyone who can write to the commands topic must not be able to drain the fleet.

The correlator signs every command with HMAC-SHA256 over its canonical JSON
(every field but the signature, keys sorted) under a key id; executors holding
the same keys verify it. Rotation: executors accept every configured key, the
correlator signs with the active one; retire an old key once no command signed
with it can still be in flight (``expires_at`` bounds that). A replayed command
(same id) is a duplicate to the executor's ledger and never runs twice.

Keys come from configuration as ``FAULTLINE_SIGNING_KEYS="k2:<secret>,k1:<secret>"``
(the first is the active one); secrets are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime, timedelta

from streams.decisions import Command

__all__ = ["SigningKeys", "canonical_bytes", "sign", "verify", "SCHEME"]

SCHEME = "hmac-sha256"


class SigningKeys:
    """Key id → secret; the first key is the one to sign with."""

    def __init__(self, keys: list[tuple[str, bytes]]) -> None:
        if not keys:
            raise ValueError("no signing keys")
        self.active = keys[0][0]
        self._keys = dict(keys)

    @classmethod
    def parse(cls, text: str) -> SigningKeys:
        """``"k2:secret,k1:secret"`` (as FAULTLINE_SIGNING_KEYS holds them)."""
        pairs = []
        for item in filter(None, (p.strip() for p in text.split(","))):
            kid, sep, secret = item.partition(":")
            if not sep or not kid or len(secret) < 16:
                raise ValueError("signing keys look like 'KEY_ID:SECRET,...' with secrets of 16+ characters")
            pairs.append((kid, secret.encode()))
        return cls(pairs)

    def secret(self, kid: str) -> bytes | None:
        return self._keys.get(kid)

    def __repr__(self) -> str:  # never the secrets
        return f"SigningKeys(active={self.active!r}, ids={sorted(self._keys)!r})"


def canonical_bytes(cmd: Command) -> bytes:
    data = cmd.model_dump(mode="json", exclude={"signature"})
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def sign(cmd: Command, keys: SigningKeys, now: datetime, ttl: timedelta) -> Command:
    """The command with an expiry (``now + ttl``, wall clock) and a signature by the active key."""
    dated = cmd.model_copy(update={"expires_at": now + ttl, "signature": None})
    secret = keys.secret(keys.active)
    assert secret is not None
    mac = hmac.new(secret, canonical_bytes(dated), hashlib.sha256).hexdigest()
    return dated.model_copy(update={"signature": f"{SCHEME}:{keys.active}:{mac}"})


def verify(cmd: Command, keys: SigningKeys, now: datetime) -> str | None:
    """None when the command may run; otherwise why not (said in its result and counted)."""
    if not cmd.signature:
        return "unsigned"
    scheme, _, rest = cmd.signature.partition(":")
    kid, _, mac = rest.partition(":")
    if scheme != SCHEME or not mac:
        return "malformed signature"
    secret = keys.secret(kid)
    if secret is None:
        return f"unknown signing key {kid!r}"
    want = hmac.new(secret, canonical_bytes(cmd), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, mac):
        return "bad signature (tampered with?)"
    if cmd.expires_at is None or cmd.expires_at <= now:
        return "expired"
    return None
