"""What an executor believes: which keys sign commands, approvals and results, and what a target may name.

The executor core (:mod:`sinks.executors.core`) asks this module before it
acts, on every path to an action: when a command arrives, when a command held
for approval gets its content, when an approval releases it, and when it
learns from a result on the topic. Every check returns ``None`` (go on) or a
reason (refuse); none raises on a bad record.

* **commands** — signed by the correlator (``FAULTLINE_SIGNING_KEYS``), for
  this executor's namespace and cluster, not expired; and their targets
  follow the identifier grammar (:mod:`streams.identifiers`), so no hostlist,
  ``ALL`` or option reaches a command line.
* **approvals** — signed by an operator key (``FAULTLINE_OPERATOR_KEYS``)
  whose id is who decided, and naming the exact command content (its hash):
  an approval of a predictable future id cannot release whatever arrives
  under it.
* **results** — signed by an executor key (``FAULTLINE_EXECUTOR_KEYS``): a
  forged ``done`` cannot make a real command a duplicate.

Keys that are not configured are not checked (development only: production
starts refuse to run without them, :meth:`common.settings.Settings.require_keys`);
the content hash and the identifier grammar are checked always.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from streams.canonical import content_hash
from streams.decisions import Approval, Command, CommandResult
from streams.identifiers import why_not_gpu, why_not_job, why_not_node
from streams.signing import SigningKeys, sign_result, verify, verify_approval, verify_result

__all__ = ["Trust"]


@dataclass(frozen=True)
class Trust:
    """The keys an executor verifies with (None: not checked) and the scope it acts in."""

    commands: SigningKeys | None = None
    operators: SigningKeys | None = None
    executors: SigningKeys | None = None
    namespace: str | None = None
    cluster: str | None = None

    def __repr__(self) -> str:  # key ids only, never secrets
        return (f"Trust(commands={self.commands!r}, operators={self.operators!r}, executors={self.executors!r}, "
                f"namespace={self.namespace!r}, cluster={self.cluster!r})")

    # --- commands ---------------------------------------------------------------------

    def check_command(self, cmd: Command, now: datetime) -> str | None:
        """Why ``cmd`` may not run here now (signature, scope, expiry, identifiers), or None."""
        if self.commands is not None:
            why = verify(cmd, self.commands, now, namespace=self.namespace, cluster=self.cluster)
            if why is not None:
                return why
        return target_problem(cmd)

    # --- approvals --------------------------------------------------------------------

    def check_approval(self, approval: Approval) -> str | None:
        """Why ``approval`` is not a person's decision, or None (the content it names is checked later)."""
        if self.operators is not None:
            why = verify_approval(approval, self.operators)
            if why is not None:
                return f"approval {why}"
        if not approval.command_hash:
            return "approval names no command content (command_hash): decide with `faultline approve ID`"
        return None

    @staticmethod
    def approves(approval: Approval, cmd: Command) -> bool:
        """Whether ``approval`` names exactly ``cmd`` (id and content)."""
        return approval.command == cmd.id and approval.command_hash == content_hash(cmd)

    # --- results ----------------------------------------------------------------------

    def sign(self, result: CommandResult) -> CommandResult:
        return sign_result(result, self.executors) if self.executors is not None else result

    def check_result(self, result: CommandResult) -> str | None:
        """Why ``result`` is not an executor's, or None."""
        return verify_result(result, self.executors) if self.executors is not None else None


def target_problem(cmd: Command) -> str | None:
    """Why the command's identifiers could not safely reach a command line, or None."""
    checks = [(why_not_node, cmd.target.node, "target.node"), (why_not_gpu, cmd.target.gpu, "target.gpu"),
              (why_not_job, cmd.target.job, "target.job")]
    exclude = cmd.params.get("exclude")
    if exclude is not None:
        if not isinstance(exclude, dict):
            return "params.exclude must be an object"
        for key, why_not in (("nodes", why_not_node), ("gpus", why_not_gpu)):
            items = exclude.get(key) or []
            if not isinstance(items, list):
                return f"params.exclude.{key} must be a list"
            checks += [(why_not, item, f"params.exclude.{key}") for item in items]
    for why_not, value, where in checks:
        if value is not None and (why := why_not(value)) is not None:
            return f"{where}: {why}"
    return None
