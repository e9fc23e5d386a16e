"""Whose word an ``operator_action`` is: the correlator acts on a person's quarantine or release only if signed.

An ``operator_action`` on the events topic fences or releases hardware, and the correlator turns it
into a *signed* command; anyone who may write the events topic (every node agent) could otherwise
put a broken GPU back in service. So the rule is: **an operator action is acted on only when an
operator key (``FAULTLINE_OPERATOR_KEYS``) signed the whole event, for this namespace and cluster,
not longer ago than** :data:`MAX_ACTION_AGE` **of event time; the key id is who acted** (``by``
must say it, and the command names it). Everything else is refused with its reason: the worker
dead-letters it before the engine (:func:`screen`) and the engine refuses it again
(:meth:`OperatorTrust.check`), so a rebuild from the log, which has no dead letters, decides alike.

Without keys (``keys=None``: development only, a production worker does not start without them,
:meth:`common.settings.Settings.require_keys`) actions are taken as they say, and said so in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from streams.events import Event, OperatorAction
from streams.signing import SigningKeys, verify_operator_action

__all__ = ["MAX_ACTION_AGE", "OperatorTrust", "screen"]

log = logging.getLogger("faultline.correlator")

#: A signed action older than this (event time, behind the engine's clock) is a replay, not a person now.
MAX_ACTION_AGE = timedelta(hours=1)


@dataclass(frozen=True)
class OperatorTrust:
    """The operator keys the correlator verifies with (None: development, not checked) and its scope."""

    keys: SigningKeys | None = None
    namespace: str | None = None
    cluster: str | None = None
    max_age: timedelta = MAX_ACTION_AGE

    def __repr__(self) -> str:  # key ids only
        return f"OperatorTrust(keys={self.keys!r}, namespace={self.namespace!r}, cluster={self.cluster!r})"

    def signed_by(self, e: Event) -> tuple[str | None, str | None]:
        """(who acted, None), or (None, why the action is refused); the time is not judged here."""
        body = e.body
        if not isinstance(body, OperatorAction):
            return None, f"not an operator action ({body.kind})"
        if self.keys is None:
            return body.by, None
        kid, why = verify_operator_action(e, self.keys, namespace=self.namespace, cluster=self.cluster)
        return (kid, None) if kid is not None else (None, f"operator action refused: {why}")

    def check(self, e: Event, now: datetime | None) -> tuple[str | None, str | None]:
        """:meth:`signed_by`, and not older than ``max_age`` behind ``now`` (the engine's clock)."""
        who, why = self.signed_by(e)
        if who is None:
            return None, why
        if self.keys is not None and now is not None and e.ts < now - self.max_age:
            return None, (f"operator action refused: stale (signed for {e.ts.isoformat()}, more than "
                          f"{self.max_age} behind the correlator's clock {now.isoformat()})")
        return who, None


def screen(events: Iterable[Event], trust: OperatorTrust) -> tuple[list[Event], list[tuple[Event, str]]]:
    """``events`` split into those to judge and the operator actions refused, each with its reason."""
    keep: list[Event] = []
    refused: list[tuple[Event, str]] = []
    for e in events:
        if isinstance(e.body, OperatorAction):
            _who, why = trust.signed_by(e)
            if why is not None:
                refused.append((e, why))
                continue
        keep.append(e)
    return keep, refused
