"""People's actions on hardware: manual quarantine or cordon, and release after validation.

They arrive as ``operator_action`` events (from ``faultline quarantine`` and
``faultline release``) and are honoured like the correlator's own decisions:
the ledger is updated and a command carries the action out. A release without
a recorded validation is refused: hardware stays out until it is validated.
Only a signed action is acted on (:mod:`correlators.operator_trust`): the
operator key's id is who acted, in the command's ``by`` and reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from correlators.incident_state import stable_id
from correlators.operator_trust import OperatorTrust
from correlators.quarantine_ledger import Fence, QuarantineLedger
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.timers import TimerName
from correlators.topology import Topology
from streams.decisions import Command, Target
from streams.events import Event, OperatorAction

__all__ = ["OperatorRules", "operator_commands"]

log = logging.getLogger("faultline.correlator")


def _command(ctype: str, incident: str, now: datetime, target: Target, a: OperatorAction, event_id: str,
             by: str) -> Command:
    return Command(id=stable_id("cmd", incident, ctype, target.node, target.gpu, event_id), incident=incident,
                   type=ctype, target=target, issued_at=now,  # type: ignore[arg-type]
                   params={"by": by, "reason": a.reason, "validated_by": a.validated_by},
                   reason=f"{by}: {a.reason}".strip(": "))


def operator_commands(e: Event, a: OperatorAction, topo: Topology, ledger: QuarantineLedger,
                      by: str | None = None) -> list[Command]:
    """The commands one operator action calls for (none when it changes nothing or is refused).

    ``by``: who acted, as verified (the operator key's id); ``a.by`` when not given.
    """
    who = by or a.by
    node = e.node
    if node is None:
        return []
    idx = topo.resolve(node, a.gpu) if a.gpu else None
    if a.action in ("quarantine_gpu", "cordon_node") and not topo.knows(node, idx if a.gpu else None):
        log.warning("%s of %s%s by %s refused: no inventory or job names it (a typo? `faultline status` lists "
                    "the nodes)", a.action, node, f" GPU {a.gpu.index if a.gpu.index is not None else a.gpu.uuid}"
                    if a.gpu else "", who)
        return []
    gpu_id = topo.gpu_id(node, idx) if idx is not None else None
    manual = stable_id("manual", e.id)
    if a.action == "quarantine_gpu" and idx is not None:
        if not ledger.quarantine(node, idx, Fence(e.ts, manual, f"manual: {a.reason}")):
            return []
        return [_command("quarantine_gpu", manual, e.ts, Target(node=node, gpu=gpu_id), a, e.id, who)]
    if a.action == "cordon_node":
        if not ledger.cordon(node, Fence(e.ts, manual, f"manual: {a.reason}")):
            return []
        return [_command("cordon_node", manual, e.ts, Target(node=node), a, e.id, who)]
    if a.action == "release_gpu":
        if not a.validated_by:
            log.warning("release of %s %s refused: no validation recorded", node, gpu_id or "")
            return []
        fenced_by = ledger.fenced_by(node, idx)
        if fenced_by is None:
            return []
        if idx is None:
            for n, i in ledger.quarantined(node):
                ledger.release(n, i)
        ledger.release(node, idx)
        return [_command("release_gpu", fenced_by, e.ts, Target(node=node, gpu=gpu_id), a, e.id, who)]
    return []


class OperatorRules:
    """``operator_action`` events: the ledger follows the person, a command carries it out."""

    def __init__(self, ctx: RuleContext, trust: OperatorTrust | None = None) -> None:
        self.state = ctx.state
        self.out = ctx.out
        self.trust = trust if trust is not None else OperatorTrust()

    def event_handlers(self) -> Mapping[str, EventHandler]:
        return {"operator_action": self._on_operator_action}

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        return {}

    def _on_operator_action(self, e: Event, b: OperatorAction) -> None:
        who, why = self.trust.check(e, self.state.clock)
        if who is None:
            log.warning("%s %s on %s ignored: %s", b.action, e.id, e.node, why)
            return
        self.out.extend(operator_commands(e, b, self.state.topology, self.state.ledger, who))
