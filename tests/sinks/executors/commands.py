"""Commands and a clock for the executor tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from streams.decisions import Approval, Command, CommandResult, Target
from streams.signing import approval_for

__all__ = ["T0", "at", "command", "approval", "result"]

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """The test clock: ``seconds`` after T0."""
    return T0 + timedelta(seconds=seconds)


def command(cid: str, ctype: str = "cordon_node", *, node: str | None = "gpu-node-07", gpu: str | None = None,
            job: str | None = None, requires_approval: bool = False, incident: str = "inc-1",
            params: dict[str, Any] | None = None) -> Command:
    return Command(id=cid, incident=incident, type=ctype, target=Target(job=job, node=node, gpu=gpu),  # type: ignore[arg-type]
                   issued_at=T0, requires_approval=requires_approval,
                   params=params if params is not None else {"reason": "gpu_off_bus"},
                   reason="gpu_off_bus: GPU fell off the bus")


def approval(cmd: Command | str, decision: str = "approve", by: str = "alice", reason: str = "") -> Approval:
    """A decision on ``cmd``: bound to its exact content (id and hash), or naming an id only (a string)."""
    made = Approval(command=cmd if isinstance(cmd, str) else cmd.id, decision=decision, by=by,  # type: ignore[arg-type]
                    at=at(60), reason=reason)
    return made if isinstance(cmd, str) else approval_for(cmd, made)


def result(cid: str, status: str, executor: str = "fake", seconds: float = 0) -> CommandResult:
    return CommandResult(command=cid, status=status, at=at(seconds), executor=executor)  # type: ignore[arg-type]
