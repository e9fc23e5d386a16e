"""The executor core: one command in, one result out, each command id carried out at most once.

Pure apart from the backend it drives and the ledger it writes; time is
passed in. :meth:`Executor.handle` decides, in this order:

1. **duplicate** — the ledger knows the id (settled, being carried out, or
   held for approval): ``skipped_duplicate``, nothing runs.
2. **unsupported** — the backend does not carry out this type: ``failed``
   with the reason, and settled. Each executor reports on every command it
   consumes (results are per command *and* executor), so a type that no
   running executor supports is visible as such instead of silently ignored;
   the one that does support it reports ``done`` beside it.
3. **dry run** — ``dry_run``, with what *would* run (or why it would fail);
   nothing is executed and nothing recorded, so a later real executor is not
   misled. Repeats of an id in a dry run get ``dry_run`` again.
4. **approval** — a command that requires approval (and ``reset_gpu`` /
   ``reboot_node`` always, whatever the command says) with no decision yet
   is held: ``waiting_approval``. An approval runs it (:meth:`Executor.decide`),
   a denial settles it ``denied``.
5. **circuit breaker** — fencing past the breaker's share of the fleet:
   ``failed`` with ``circuit breaker open: ...``.
6. **execute** — the ledger notes the start *before* the backend is called,
   then the outcome: ``done`` with the backend's detail, or ``failed`` with
   the error. A failed command is not retried: at most once means a retry is
   a new decision (a new command id), by the correlator or a person.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Literal, Protocol

from prometheus_client import Counter

from sinks.executors.approvals import ApprovalBook
from sinks.executors.breaker import CircuitBreaker
from sinks.executors.ledger import Entry, ResultLedger
from streams.decisions import Approval, Command, CommandResult
from streams.signing import SigningKeys, verify

__all__ = ["ALWAYS_APPROVE", "Backend", "ExecutionError", "Executor", "Status", "excluded_nodes", "require"]

log = logging.getLogger(__name__)

# Irreversible: never run without a person's approval, even if a command arrives without the flag.
ALWAYS_APPROVE: frozenset[str] = frozenset({"reset_gpu", "reboot_node"})
_MAX_DETAIL = 2000

Status = Literal["done", "failed", "skipped_duplicate", "waiting_approval", "denied", "dry_run", "refused"]
REFUSED = Counter("faultline_executor_refused", "Commands refused: unsigned, tampered, unknown key or expired.",
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
    ) -> None:
        self.keys = keys  # when set, only commands signed by the correlator run (streams/signing.py)
        self.backend = backend
        self.ledger = ledger
        self.approvals = approvals if approvals is not None else ApprovalBook()
        self.breaker = breaker
        self.dry_run = dry_run
        self.name = name or backend.name

    # --- the decisions ------------------------------------------------------------------

    def handle(self, cmd: Command, now: datetime) -> CommandResult:
        """The result of one command arriving (see the module docstring for the order of checks)."""
        if self.keys is not None and (why := verify(cmd, self.keys, now)) is not None:
            REFUSED.labels(executor=self.name, reason=why.split(" ")[0]).inc()
            log.warning("executor %s: refused %s %s: %s", self.name, cmd.type, cmd.id, why)
            return self._result(cmd.id, "refused", now, f"refused: {why}; only commands signed by the "
                                "correlator run (check FAULTLINE_SIGNING_KEYS on both sides)")
        entry = self.ledger.get(cmd.id)
        if entry is not None:
            if entry.state == "pending" and entry.command is None:
                self.ledger.attach(cmd)  # held before (learnt from the results topic): now runnable
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
            decision = self.approvals.decision(cmd.id)
            if decision is None:
                result = self._result(cmd.id, "waiting_approval", now,
                                      f"{cmd.type} needs a person's approval: faultline approve {cmd.id} "
                                      f"(or faultline deny {cmd.id})")
                self.ledger.hold(cmd, result)
                return result
            if decision.decision == "deny":
                return self._settle(cmd, "denied", now, _denied(decision))
            return self._execute(cmd, now, decision)
        return self._execute(cmd, now, None)

    def decide(self, approval: Approval, now: datetime) -> CommandResult | None:
        """A person's decision arrived; the result when it settled a held command, else None.

        A decision on a command not seen yet is kept for when it arrives; one
        on a command already decided (or settled) changes nothing.
        """
        if not self.approvals.record(approval):
            return None
        entry = self.ledger.get(approval.command)
        if entry is None or entry.state != "pending" or entry.command is None:
            return None
        if approval.decision == "deny":
            return self._settle(entry.command, "denied", now, _denied(approval))
        return self._execute(entry.command, now, approval)

    # --- state from elsewhere -----------------------------------------------------------

    def absorb(self, result: CommandResult) -> bool:
        """Learn from a result on the topic (only this executor's own); True when it taught something."""
        return result.executor == self.name and self.ledger.absorb(result)

    def attach(self, cmd: Command) -> bool:
        """Give a held id learnt from the topic its command; True when it was missing."""
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
        node = cmd.target.node
        if self.breaker is not None and self.breaker.guards(cmd) and node is not None:
            why = self.breaker.check(node, now)
            if why is not None:
                return self._settle(cmd, "failed", now, f"circuit breaker open: {why}")
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

    def _settle(self, cmd: Command, status: Status, now: datetime, detail: str) -> CommandResult:
        result = self._result(cmd.id, status, now, detail)
        self.ledger.settle(result, cmd)
        return result

    def _result(self, command_id: str, status: Status, now: datetime, detail: str) -> CommandResult:
        return CommandResult(command=command_id, status=status, at=now, executor=self.name,
                             detail=detail[:_MAX_DETAIL])


def require(cmd: Command, field: Literal["job", "node", "gpu"]) -> str:
    """``cmd.target.<field>``, which this command type cannot run without."""
    value = getattr(cmd.target, field)
    if not value:
        raise ExecutionError(f"{cmd.type} without target.{field}")
    return str(value)


def excluded_nodes(cmd: Command) -> list[str]:
    """The nodes a ``restart_job`` must not land on (``params.exclude.nodes``)."""
    exclude = cmd.params.get("exclude") or {}
    return [str(n) for n in exclude.get("nodes") or []]


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
