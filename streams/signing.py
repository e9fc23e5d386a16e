"""Signed records: anyone who can write to a topic must not be able to make an executor act.

Three kinds of record lead to an action, and each is signed by the one party
entitled to say it, with a key set of its own (HMAC-SHA256 under a key id):

==============  ====================  =========================  ==================================
record          signed by             key setting                verified by
==============  ====================  =========================  ==================================
Command         the correlator        FAULTLINE_SIGNING_KEYS     executors: on arrival, when held,
                                                                 and when an approval releases it
Approval        an operator           FAULTLINE_OPERATOR_KEYS    executors, before it releases a
                                                                 command; the key id is ``by``
CommandResult   an executor           FAULTLINE_EXECUTOR_KEYS    executors rebuilding their ledger
operator_action an operator           FAULTLINE_OPERATOR_KEYS    the correlator, before the ledger
(an Event)                                                       or a command follows; key id = ``by``
==============  ====================  =========================  ==================================

What is signed is the record's canonical JSON (RFC 8785, :mod:`streams.canonical`),
so an executor in any language can verify it. A command's signature covers
its ``namespace`` and ``cluster`` (a command signed for one never runs in
another that shares the keys) and its ``expires_at`` (wall clock). The
signature is ``hmac-sha256:<key id>:<64 lowercase hex digits>``.

Rotation: a key set is ``KEY_ID:SECRET,...``, the first the active one (it
signs), every one accepted; retire an old key (drop it from the verifiers'
setting) once nothing signed with it can still be in flight (``expires_at``
bounds that for commands). Verification never raises on a bad record: it
returns why it refuses (``malformed signature``, ``unknown signing key``,
``bad signature``, ``expired``, ...), which becomes a ``refused`` result.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TypeVar

from pydantic import BaseModel

from streams.canonical import canonical_json, check_schema, content_hash, record_bytes
from streams.decisions import Approval, Command, CommandResult
from streams.events import Event, OperatorAction

__all__ = [
    "KEY_ID",
    "SCHEME",
    "SigningKeys",
    "approval_for",
    "canonical_bytes",
    "seal",
    "sign",
    "sign_approval",
    "sign_operator_action",
    "sign_result",
    "signer",
    "verify",
    "verify_approval",
    "verify_operator_action",
    "verify_result",
]

SCHEME = "hmac-sha256"
KEY_ID = re.compile(r"[A-Za-z0-9._@-]{1,64}")
_MAC = re.compile(r"[0-9a-f]{64}")
_MIN_SECRET = 16

R = TypeVar("R", bound=BaseModel)


class SigningKeys:
    """Key id → secret; the first key is the one to sign with, every one verifies."""

    def __init__(self, keys: Iterable[tuple[str, bytes]]) -> None:
        pairs = list(keys)
        if not pairs:
            raise ValueError("no signing keys")
        self.active = pairs[0][0]
        self._keys = dict(pairs)

    @classmethod
    def parse(cls, text: str) -> SigningKeys:
        """``"k2:secret,k1:secret"`` (as the FAULTLINE_*_KEYS settings hold them)."""
        pairs = []
        for item in filter(None, (p.strip() for p in text.split(","))):
            kid, sep, secret = item.partition(":")
            if not sep or not KEY_ID.fullmatch(kid) or len(secret) < _MIN_SECRET:
                raise ValueError("keys look like 'KEY_ID:SECRET,...': key ids of 1-64 letters, digits, '.', '_', "
                                 f"'@', '-' and secrets of {_MIN_SECRET}+ characters")
            pairs.append((kid, secret.encode()))
        return cls(pairs)

    @property
    def ids(self) -> list[str]:
        return sorted(self._keys)

    def secret(self, kid: str) -> bytes | None:
        return self._keys.get(kid)

    def __repr__(self) -> str:  # never the secrets
        return f"SigningKeys(active={self.active!r}, ids={self.ids!r})"


def canonical_bytes(record: BaseModel) -> bytes:
    """What a signature covers: the record's RFC 8785 JSON without its signature."""
    return record_bytes(record)


def _mac(secret: bytes, record: BaseModel) -> str:
    return hmac.new(secret, canonical_bytes(record), hashlib.sha256).hexdigest()


def seal(record: R, keys: SigningKeys) -> R:
    """``record`` signed by the active key (any record with a ``signature`` field)."""
    unsigned = record.model_copy(update={"signature": None})
    secret = keys.secret(keys.active)
    assert secret is not None
    return unsigned.model_copy(update={"signature": f"{SCHEME}:{keys.active}:{_mac(secret, unsigned)}"})


def signer(record: BaseModel, keys: SigningKeys) -> tuple[str | None, str | None]:
    """(key id, None) when ``record``'s signature is good under ``keys``, else (None, why not).

    Never raises: whatever the signature holds (not ASCII, no key id, a MAC of the wrong length),
    the answer is a refusal with a reason.
    """
    return _check(getattr(record, "signature", None), keys, lambda: canonical_bytes(record))


def _check(signature: object, keys: SigningKeys, covered: Callable[[], bytes],
           unknown: str = "signing key") -> tuple[str | None, str | None]:
    """(key id, None) when ``signature`` is a good MAC of ``covered()`` under ``keys``, else (None, why not)."""
    if not signature:
        return None, "unsigned"
    if not isinstance(signature, str) or not signature.isascii():
        return None, "malformed signature"
    scheme, _, rest = signature.partition(":")
    kid, _, mac = rest.partition(":")
    if scheme != SCHEME or not KEY_ID.fullmatch(kid) or not _MAC.fullmatch(mac):
        return None, "malformed signature"  # the form is hmac-sha256:<key id>:<64 lowercase hex digits>
    secret = keys.secret(kid)
    if secret is None:
        return None, f"unknown {unknown} {kid!r}"
    try:
        want = hmac.new(secret, covered(), hashlib.sha256).hexdigest()
    except ValueError as exc:  # content that has no canonical form cannot carry a valid signature
        return None, f"bad signature: {exc}"
    if not hmac.compare_digest(want.encode(), mac.encode()):
        return None, "bad signature (tampered with?)"
    return kid, None


# --- commands (the correlator's) ------------------------------------------------------


def sign(cmd: Command, keys: SigningKeys, now: datetime, ttl: timedelta, *, namespace: str | None = None,
         cluster: str | None = None) -> Command:
    """The command for ``namespace`` and ``cluster``, expiring at ``now + ttl`` (wall clock), signed."""
    dated = cmd.model_copy(update={"expires_at": now + ttl, "namespace": namespace, "cluster": cluster,
                                   "signature": None})
    return seal(dated, keys)


def verify(cmd: Command, keys: SigningKeys, now: datetime, *, namespace: str | None = None,
           cluster: str | None = None) -> str | None:
    """None when the command may run here; otherwise why not (said in its result and counted).

    ``namespace`` and ``cluster`` are the verifier's own: when given, the command must have been
    signed for them.
    """
    _kid, why = signer(cmd, keys)
    if why is not None:
        return why
    if namespace is not None and cmd.namespace != namespace:
        return f"signed for namespace {cmd.namespace!r}, not this executor's {namespace!r}"
    if cluster is not None and cmd.cluster != cluster:
        return f"signed for cluster {cmd.cluster!r}, not this executor's {cluster!r}"
    if cmd.expires_at is None or cmd.expires_at <= now:
        return "expired"
    return None


# --- approvals (an operator's) --------------------------------------------------------


def approval_for(cmd: Command, approval: Approval) -> Approval:
    """``approval`` bound to ``cmd``: its id and the hash of its exact content."""
    return approval.model_copy(update={"command": cmd.id, "command_hash": content_hash(cmd), "signature": None})


def sign_approval(approval: Approval, keys: SigningKeys) -> Approval:
    """``approval`` signed by the operator's active key; ``by`` becomes that key id (who decided)."""
    return seal(approval.model_copy(update={"by": keys.active}), keys)


def verify_approval(approval: Approval, keys: SigningKeys) -> str | None:
    """None when a holder of an operator key made this decision; ``by`` must be that key's id."""
    kid, why = signer(approval, keys)
    if why is not None:
        return why
    if approval.by != kid:
        return f"signed with key {kid!r} but says it is by {approval.by!r}"
    return None


# --- results (an executor's) ----------------------------------------------------------


def sign_result(result: CommandResult, keys: SigningKeys) -> CommandResult:
    return seal(result, keys)


def verify_result(result: CommandResult, keys: SigningKeys) -> str | None:
    """None when an executor key signed this result."""
    return signer(result, keys)[1]


# --- operator actions (an operator's, on the events topic) --------------------------------


def _action_bytes(event: Event) -> bytes:
    """What an operator action's signature covers: the whole event (id, time, node, body) but the signature."""
    check_schema(event)
    return canonical_json(event.model_dump(mode="json", exclude={"body": {"signature"}}))


def sign_operator_action(event: Event, keys: SigningKeys, *, namespace: str, cluster: str) -> Event:
    """``event`` (an ``operator_action``) for ``namespace`` and ``cluster``, by the active key's id, signed."""
    body = event.body
    if not isinstance(body, OperatorAction):
        raise TypeError(f"only operator actions are signed this way, not {body.kind!r}")
    dated = event.model_copy(update={"body": body.model_copy(update={
        "by": keys.active, "namespace": namespace, "cluster": cluster, "signature": None})})
    secret = keys.secret(keys.active)
    assert secret is not None
    mac = hmac.new(secret, _action_bytes(dated), hashlib.sha256).hexdigest()
    return dated.model_copy(update={"body": dated.body.model_copy(
        update={"signature": f"{SCHEME}:{keys.active}:{mac}"})})


def verify_operator_action(event: Event, keys: SigningKeys, *, namespace: str | None = None,
                           cluster: str | None = None) -> tuple[str | None, str | None]:
    """(key id, None) when a holder of an operator key sent this action here; else (None, why not).

    The key id is who acted: ``by`` must say it. ``namespace``/``cluster`` (the verifier's own, when
    given) must be the ones signed. Never raises.
    """
    body = event.body
    if not isinstance(body, OperatorAction):
        return None, f"not an operator action ({body.kind})"
    kid, why = _check(body.signature, keys, lambda: _action_bytes(event), "operator key")
    if kid is None:
        return None, why
    if body.by != kid:
        return None, f"signed with key {kid!r} but says it is by {body.by!r}"
    if namespace is not None and body.namespace != namespace:
        return None, f"signed for namespace {body.namespace!r}, not this correlator's {namespace!r}"
    if cluster is not None and body.cluster != cluster:
        return None, f"signed for cluster {body.cluster!r}, not this correlator's {cluster!r}"
    return kid, None
