"""The executor core: one command in, one result out, each command id carried out at most once.

Pure apart from the backend it drives and the ledger it writes; time is
passed in. :meth:`Executor.handle` decides, in this order:

1. **trust** — a command that is unsigned, tampered with, signed by an
   unknown key, for another namespace or cluster, expired, or whose targets
   break the identifier grammar (a hostlist, ``ALL``, an option):
   ``refused`` with the reason (:mod:`sinks.executors.trust`). Nothing is
   recorded, so a forgery reusing a real command's id never makes the real one
   a duplicate.
2. **duplicate** — the ledger knows the id (settled, being carried out, or
   held for approval): ``skipped_duplicate``, nothing runs. A held id learnt
   from the results topic gets this (verified) command as its content.
3. **unsupported** — the backend does not carry out this type: ``failed``
   with the reason, and settled. Each executor reports on every command it
   consumes (results are per command *and* executor), so a type that no
   running executor supports is visible as such instead of silently ignored;
   the one that does support it reports ``done`` beside it.
4. **dry run** — ``dry_run``, with what *would* run (or why it would fail);
   nothing is executed and nothing recorded, so a later real executor is not
   misled. Repeats of an id in a dry run get ``dry_run`` again.
5. **approval** — a command that requires approval (and ``reset_gpu`` /
   ``reboot_node`` always, whatever the command says) with no decision on
   its exact content yet is held: ``waiting_approval``. A signed approval
   naming its id and content hash runs it (:meth:`Executor.decide`), a
   denial settles it ``denied``.
6. **execute** — at the moment of acting, whether released by an approval
   or not: the command is verified again (signature, scope, expiry: a
   command that expired while held never runs); the **circuit breaker**
   refuses fencing past its share of the fleet (``failed``); the backend
   must **know the hardware** (``refused`` otherwise: an executor acts only
   on nodes its inventory lists). Then the ledger notes the start *before*
   the backend is called, then the outcome: ``done`` with the backend's
   detail, or ``failed`` with the error. A failed command is not retried: at
   most once means a retry is a new decision (a new command id), by the
   correlator or a person.

Every result is signed with the executor key (when configured), and results
read back from the topic teach the ledger only when an executor key signed
them (:meth:`Executor.absorb`).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Literal, Protocol

from prometheus_client import Counter

from sinks.executors.approvals import HELD, ApprovalBook
from sinks.executors.breaker import CircuitBreaker
from sinks.executors.ledger import Entry, ResultLedger
from sinks.executors.trust import Trust
from streams.canonical import content_hash
from streams.decisions import Approval, Command, CommandResult
from streams.signing import SigningKeys

__all__ = ["ALWAYS_APPROVE", "Backend", "ExecutionError", "Executor", "Status", "excluded_gpus", "excluded_nodes",
           "require"]

log = logging.getLogger(__name__)

# Irreversible: never run without a person's approval, even if a command arrives without the flag.
ALWAYS_APPROVE: frozenset[str] = frozenset({"reset_gpu", "reboot_node"})
_MAX_DETAIL = 2000
_SIGNED_HINT = ("only commands signed by the correlator for this namespace and cluster, with identifiers that name "
                "one node, GPU or job each, run (check FAULTLINE_SIGNING_KEYS, FAULTLINE_NAMESPACE and "
                "FAULTLINE_CLUSTER on both sides)")

Status = Literal["done", "failed", "skipped_duplicate", "waiting_approval", "denied", "dry_run", "refused"]
REFUSED = Counter("faultline_executor_refused", "Records refused: commands unsigned, tampered, unknown key, "
                  "expired, out of scope or with bad identifiers; approvals and results not signed by their keys.",
                  ["executor", "reason"])


class ExecutionError(RuntimeError):
    """A backend could not carry out a command; the message says why (it becomes the result's detail)."""


class Backend(Protocol):
    """Where commands are carried out: a scheduler, an orchestrator, a ticketing system."""

    name: str

    def supports(self, cmd_type: str) -> bool:
        """Whether this backend carries out commands of ``cmd_type``."""
        ...

    def plan(self, cmd: Command) -> str:
        """What :meth:`execute` would do, in words a person checks (dry runs)."""
        ...

    def execute(self, cmd: Command) -> str:
        """Carry out ``cmd``; return a detail of what was done, or raise :class:`ExecutionError`."""
        ...

    def fleet_size(self) -> int | None:
        """How many nodes the backend manages, or None when it cannot tell (the circuit breaker's base)."""
        ...

    def knows_node(self, node: str) -> bool:
        """Whether ``node`` is hardware this backend manages (its inventory); an executor acts on no other.

        A backend that acts on no hardware (tickets, notifications) answers True. Raises
        :class:`ExecutionError` when it cannot tell (the command then fails, nothing is done).
        """
        ...


class Executor:
    """Carries commands out through one backend, at most once per id, safely."""

    def __init__(
        self,
        backend: Backend,
        ledger: ResultLedger,
        approvals: ApprovalBook | None = None,
        breaker: CircuitBreaker | None = None,
        *,
        dry_run: bool = False,
        name: str | None = None,
        keys: SigningKeys | None = None,
        trust: Trust | None = None,
    ) -> None:
        # What is verified (sinks/executors/trust.py); ``keys`` alone: the correlator's command keys.
        self.trust = trust if trust is not None else Trust(commands=keys)
        self.backend = backend
        self.ledger = ledger
        self.approvals = approvals if approvals is not None else ApprovalBook()
        self.breaker = breaker
        self.dry_run = dry_run
        self.name = name or backend.name

    # --- the decisions ------------------------------------------------------------------

    def handle(self, cmd: Command, now: datetime) -> CommandResult:
        """The result of one command arriving (see the module docstring for the order of checks)."""
        if (why := self.trust.check_command(cmd, now)) is not None:
            return self._refuse(cmd, now, why)
        entry = self.ledger.get(cmd.id)
        if entry is not None:
            if entry.state == "pending" and entry.command is None:
                self.ledger.attach(cmd)  # held before (learnt from the results topic): verified, now runnable
            return self._result(cmd.id, "skipped_duplicate", now, _already(entry))
        if not self.backend.supports(cmd.type):
            why = f"unsupported: the {self.backend.name} backend does not carry out {cmd.type}"
            if self.dry_run:
                return self._result(cmd.id, "dry_run", now, f"would fail: {why}")
            return self._settle(cmd, "failed", now, why)
        if self.dry_run:
            approval = " after a person's approval" if self._needs_approval(cmd) else ""
            return self._result(cmd.id, "dry_run", now, f"would run{approval}: {self.backend.plan(cmd)}")
        if self._needs_approval(cmd):
            if (unknown := self._unknown_before_hold(cmd)) is not None:  # nobody is asked about no hardware
                return self._refuse(cmd, now, f"unknown node {unknown!r}: not in the {self.backend.name} inventory",
                                    "an executor holds and acts on only hardware it manages")
            decision = self.approvals.decision(cmd.id, content_hash(cmd))
            if decision is None:
                result = self._result(cmd.id, "waiting_approval", now,
                                      f"{cmd.type} needs a person's approval: faultline approve {cmd.id} "
                                      f"(or faultline deny {cmd.id}); {HELD}{content_hash(cmd)}")
                self.ledger.hold(cmd, result)
                return result
            if decision.decision == "deny":
                return self._settle(cmd, "denied", now, _denied(decision))
            return self._execute(cmd, now, decision)
        return self._execute(cmd, now, None)

    def refuse_approval(self, approval: Approval) -> str | None:
        """Why ``approval`` must be ignored (not signed by an operator key, names no content), or None."""
        why = self.trust.check_approval(approval)
        if why is not None:
            REFUSED.labels(executor=self.name, reason="approval").inc()
            log.warning("executor %s: ignored a %s of %s: %s", self.name, approval.decision, approval.command, why)
        return why

    def decide(self, approval: Approval, now: datetime) -> CommandResult | None:
        """A person's decision arrived; the result when it settled a held command, else None.

        A decision that is not an operator's, or that names other content than the held
        command's, changes nothing. A decision on a command not seen yet is kept for when it
        arrives (it applies only if that command has the content it names); one on a command
        already decided (or settled) changes nothing.
        """
        if self.refuse_approval(approval) is not None or not self.approvals.record(approval):
            return None
        entry = self.ledger.get(approval.command)
        if entry is None or entry.state != "pending" or entry.command is None:
            return None
        if not self.trust.approves(approval, entry.command):
            REFUSED.labels(executor=self.name, reason="approval").inc()
            log.warning("executor %s: a %s of %s names other content (%s) than the command held: ignored",
                        self.name, approval.decision, approval.command, approval.command_hash)
            return None
        if approval.decision == "deny":
            return self._settle(entry.command, "denied", now, _denied(approval))
        return self._execute(entry.command, now, approval)

    # --- state from elsewhere -----------------------------------------------------------

    def absorb(self, result: CommandResult) -> bool:
        """Learn from a result on the topic (only this executor's own, signed by an executor key).

        True when it taught something. An unsigned or forged result teaches nothing: it could
        otherwise make a real command a duplicate, or hold an id for a forged command.
        """
        if result.executor != self.name:
            return False
        if (why := self.trust.check_result(result)) is not None:
            REFUSED.labels(executor=self.name, reason="result").inc()
            log.warning("executor %s: ignored a %s result for %s: %s", self.name, result.status, result.command, why)
            return False
        return self.ledger.absorb(result)

    def attach(self, cmd: Command, now: datetime) -> bool:
        """Give a held id learnt from the topic its command, if it verifies; True when it was attached."""
        if (why := self.trust.check_command(cmd, now)) is not None:
            log.warning("executor %s: not holding %s %s for approval: %s", self.name, cmd.type, cmd.id, why)
            return False
        return self.ledger.attach(cmd)

    def recover(self, now: datetime) -> list[CommandResult]:
        """At start: settle interrupted attempts, refill the breaker, and return results still to publish."""
        for entry in self.ledger.started():
            if entry.command is not None:
                began = entry.attempted_at.isoformat() if entry.attempted_at else "?"
                self._settle(entry.command, "failed", now,
                             f"interrupted: the executor stopped while carrying this out (began {began}); "
                             "outcome unknown, not retried: check by hand")
        if self.breaker is not None:
            for cmd, at in self.ledger.attempted_since(now - self.breaker.window):
                if self.breaker.guards(cmd) and cmd.target.node is not None:
                    self.breaker.record(cmd.target.node, at)
        return self.ledger.unpublished()

    def published(self, result: CommandResult) -> None:
        """``result`` reached the results topic: the ledger stops offering it for (re)publishing."""
        self.ledger.mark_published(result)

    # --- steps --------------------------------------------------------------------------

    def _needs_approval(self, cmd: Command) -> bool:
        return cmd.requires_approval or cmd.type in ALWAYS_APPROVE

    def _execute(self, cmd: Command, now: datetime, approval: Approval | None) -> CommandResult:
        if (why := self.trust.check_command(cmd, now)) is not None:  # again: it may have expired while held
            return self._refuse(cmd, now, why)
        node = cmd.target.node
        if self.breaker is not None and self.breaker.guards(cmd) and node is not None:
            why = self.breaker.check(node, now)
            if why is not None:
                return self._settle(cmd, "failed", now, f"circuit breaker open: {why}")
        try:
            if (unknown := self._unknown_node(cmd)) is not None:
                return self._refuse(cmd, now, f"unknown node {unknown!r}: not in the {self.backend.name} inventory",
                                    "an executor acts only on hardware it manages")
        except Exception as exc:  # whatever the backend raised: nothing was done, and the runner goes on
            return self._settle(cmd, "failed", now, f"could not check the {self.backend.name} inventory: "
                                f"{type(exc).__name__}: {exc}")
        if self.breaker is not None and self.breaker.guards(cmd) and node is not None:
            self.breaker.record(node, now)  # on the attempt: a failed fence may still have half-applied
        self.ledger.begin(cmd, now)
        try:
            detail = self.backend.execute(cmd)
        except ExecutionError as exc:
            return self._settle(cmd, "failed", now, str(exc))
        except Exception as exc:  # a backend bug must not leave the id half-recorded or stop the runner
            log.exception("executor %s: %s %s raised", self.name, cmd.type, cmd.id)
            return self._settle(cmd, "failed", now, f"unexpected {type(exc).__name__}: {exc}")
        if approval is not None:
            detail = f"{detail} (approved by {approval.by})"
        return self._settle(cmd, "done", now, detail)

    def _unknown_before_hold(self, cmd: Command) -> str | None:
        """:meth:`_unknown_node` before a command is held; a backend that cannot tell now is asked again at the run."""
        try:
            return self._unknown_node(cmd)
        except Exception:
            return None

    def _unknown_node(self, cmd: Command) -> str | None:
        """The first node the command names (target, exclusions) that the backend does not manage, or None."""
        for node in ([cmd.target.node] if cmd.target.node else []) + excluded_nodes(cmd):
            if not self.backend.knows_node(node):
                return node
        return None

    def _refuse(self, cmd: Command, now: datetime, why: str, hint: str = _SIGNED_HINT) -> CommandResult:
        """A ``refused`` result: nothing ran, nothing is recorded (a forgery cannot settle a real id)."""
        REFUSED.labels(executor=self.name, reason=why.split(" ")[0].rstrip(":")).inc()
        log.warning("executor %s: refused %s %s: %s", self.name, cmd.type, cmd.id, why)
        return self._result(cmd.id, "refused", now, f"refused: {why}; {hint}")

    def _settle(self, cmd: Command, status: Status, now: datetime, detail: str) -> CommandResult:
        result = self._result(cmd.id, status, now, detail)
        self.ledger.settle(result, cmd)
        return result

    def _result(self, command_id: str, status: Status, now: datetime, detail: str) -> CommandResult:
        return self.trust.sign(CommandResult(command=command_id, status=status, at=now, executor=self.name,
                                             detail=detail[:_MAX_DETAIL]))


def require(cmd: Command, field: Literal["job", "node", "gpu"]) -> str:
    """``cmd.target.<field>``, which this command type cannot run without."""
    value = getattr(cmd.target, field)
    if not value:
        raise ExecutionError(f"{cmd.type} without target.{field}")
    return str(value)


def excluded_nodes(cmd: Command) -> list[str]:
    """The nodes a ``restart_job`` must not land on (``params.exclude.nodes``, a list of names)."""
    exclude = cmd.params.get("exclude") or {}
    nodes = (exclude.get("nodes") or []) if isinstance(exclude, dict) else None
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise ExecutionError("params.exclude.nodes must be a list of node names")
    return nodes


def excluded_gpus(cmd: Command) -> list[str]:
    """The GPUs a ``restart_job`` must not land on (``params.exclude.gpus``)."""
    exclude = cmd.params.get("exclude") or {}
    return [str(g) for g in exclude.get("gpus") or []]


def _already(entry: Entry) -> str:
    """Why a repeated id is a duplicate, from what the ledger holds."""
    if entry.state == "pending":
        return "already waiting for a person's approval"
    if entry.state == "started":
        began = entry.attempted_at.isoformat() if entry.attempted_at else "?"
        return f"already being carried out (began {began})"
    if entry.result is None:
        return "already settled"
    r = entry.result
    return f"already {r.status} at {r.at.isoformat()} by {r.executor}: {r.detail}"


def _denied(approval: Approval) -> str:
    reason = f": {approval.reason}" if approval.reason else ""
    return f"denied by {approval.by} at {approval.at.isoformat()}{reason}"
