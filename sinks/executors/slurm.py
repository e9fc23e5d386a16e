"""The Slurm backend: node and job commands as ``scontrol`` calls.

Every call goes through one seam, ``run(args) -> stdout`` (by default
:class:`CommandLine`: the real binaries, a timeout, a non-zero exit as
:class:`ExecutionError`), so the backend is tested both against a real
``slurmctld`` and, where a real one cannot do it, against a recording seam.

What each command does:

* ``cordon_node``, ``drain_node`` — ``scontrol update NodeName=X State=DRAIN
  Reason="faultline: <incident> <category>"``. Slurm's DRAIN is both: no new
  jobs, running ones finish (moving them off is ``restart_job``'s work).
* ``quarantine_gpu`` — **drains the node**, with ``gpu=<id>`` in the reason.
  Slurm cannot take one GPU of a node out of scheduling at run time: a node's
  GPU count may only be set to zero by ``scontrol`` (changing it otherwise
  needs gres.conf/slurm.conf edits and a daemon restart), and a node feature
  marking the bad card does not stop jobs that do not ask for it (constraints
  cannot be negated). Draining loses the node's healthy GPUs for a while, but
  it is the only fence that really holds ("a restart never lands on
  hardware under quarantine"); the reason names the GPU for the repair.
* ``release_gpu`` — takes our entry for that GPU (or, without a GPU, every
  faultline entry) out of the reason; the node is resumed (``State=RESUME``)
  when no faultline entry is left, and stays drained for the others.
* ``restart_job`` — ``scontrol requeue <jobid>``; with excluded nodes or a
  GPU class, ``requeuehold``, ``update JobId=<id> ExcNodeList=<nodes>
  TresPerJob=gres/gpu:<class>:<count>``, ``release``, so the job cannot start
  again before the exclusion and the request for compatible replacements
  (``--gpus=<class>:<count>``: the job's GRES type, as many as its elasticity
  allows) are in place (a failed update leaves it held, and says so). A GPU
  count that is not a positive integer (``8.0``) is refused before anything
  runs, with the reason, never dropped (issue 27). Excluded
  single GPUs need no job change: their nodes are drained by ``quarantine_gpu``.
  The batch script resumes from its newest checkpoint itself, as Slurm requeues
  restart it.
* ``checkpoint_now`` — ``scancel --batch --signal=USR1 <jobid>``, only where the
  site says its batch scripts handle it (``checkpoint_signal``, off by default).
  Why that: Slurm's own way to warn a job is a signal (``sbatch
  --signal=B:USR1@120`` before the time limit), and job templates already trap
  ``USR1`` there to checkpoint, so a real site's scripts need nothing new;
  ``--batch`` signals only the batch shell, whose trap turns it into the
  job's control file (``trap 'touch "$FAULTLINE_CHECKPOINT_NOW"' USR1``, which
  :class:`producers.jobs.reporter.CheckpointRequests` watches), never the
  training processes themselves: a rank or a torchrun agent without a handler
  would be *killed* by ``USR1`` (its default action), and so would a batch
  shell without the trap -- hence opt-in, and refused (saying why) otherwise.
* ``reboot_node`` — ``scontrol reboot ASAP nextstate=DOWN`` (drain, reboot
  when idle, stay down until validated and released); the executor core
  runs it only after a person's approval.

A node already drained for a reason that is not ours is left as it is, and
never resumed by us: someone else took it out for their own reasons.

Identifiers are checked again here, before any argument is built
(:mod:`streams.identifiers`): ``scontrol`` reads ``NodeName=`` and
``ExcNodeList=`` as hostlists, so ``gpu-[001-999]``, ``a,b`` or ``ALL`` would
act on many nodes. The executor core also asks :meth:`SlurmBackend.knows_node`
(``sinfo``) before acting: only nodes of this cluster are touched. The
``scontrol`` processes get a minimal environment (``PATH``, the locale and
Slurm's own ``SLURM_*`` variables), not the executor's with its keys.
Several faultline fences of one node share its reason:
``faultline: <incident> <category> gpu=<gpu>; <incident> <category>``.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence

from common.child_env import minimal_env
from sinks.executors.core import ExecutionError, excluded_nodes, require
from streams.decisions import Command
from streams.identifiers import why_not_gpu, why_not_job, why_not_node

__all__ = ["SlurmBackend", "CommandLine", "Run", "SUPPORTED_TYPES", "REASON_PREFIX"]

Run = Callable[[Sequence[str]], str]

SUPPORTED_TYPES: frozenset[str] = frozenset(
    {"cordon_node", "drain_node", "quarantine_gpu", "release_gpu", "restart_job", "reboot_node", "checkpoint_now"})
_SIGNAL = re.compile(r"USR[12]|HUP|INT|TERM|CONT|URG|WINCH")
REASON_PREFIX = "faultline:"

_FIELD = re.compile(r"(?:^|\s)(\w+)=(\S*)")
_GPU_CLASS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_REASON = re.compile(r"\sReason=(.*?)(?:\s+\[[^\]@]*@[^\]]*\])?\s*$")


class CommandLine:
    """Runs a command line with a timeout and a minimal environment; its standard output, or
    :class:`ExecutionError`."""

    def __init__(self, timeout_s: float = 30.0, env: Mapping[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.env = dict(env) if env is not None else None

    def __call__(self, args: Sequence[str]) -> str:
        shown = shlex.join(args)
        try:
            done = subprocess.run(list(args), capture_output=True, text=True, timeout=self.timeout_s,
                                  env=minimal_env(("SLURM_",), self.env), check=False)
        except subprocess.TimeoutExpired as exc:
            raise ExecutionError(f"{shown}: no answer within {self.timeout_s:g}s") from exc
        except OSError as exc:
            raise ExecutionError(f"{shown}: {exc}") from exc
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip() or "no message"
            raise ExecutionError(f"{shown}: exit {done.returncode}: {said}")
        return done.stdout


class SlurmBackend:
    """Carries node and job commands out through ``scontrol`` (and ``squeue``/``sinfo`` to look)."""

    name = "slurm"

    def __init__(self, run: Run | None = None, *, timeout_s: float = 30.0,
                 checkpoint_signal: str | None = None) -> None:
        self.run: Run = run if run is not None else CommandLine(timeout_s)
        if checkpoint_signal is not None and not _SIGNAL.fullmatch(checkpoint_signal):
            raise ValueError(f"checkpoint_signal must be a signal name such as USR1, not {checkpoint_signal!r}")
        self.checkpoint_signal = checkpoint_signal  # what the site's batch scripts trap to checkpoint (opt-in)

    # --- Backend ------------------------------------------------------------------------

    def supports(self, cmd_type: str) -> bool:
        return cmd_type in SUPPORTED_TYPES

    def fleet_size(self) -> int | None:
        try:
            return len(self.nodes()) or None
        except ExecutionError:
            return None

    def nodes(self) -> set[str]:
        """The node names of this cluster, as ``sinfo`` lists them (asked each time: fleets change)."""
        out = self.run(["sinfo", "--noheader", "--Node", "--format=%N"])
        return {line.strip() for line in out.splitlines() if line.strip()}

    def knows_node(self, node: str) -> bool:
        return node in self.nodes()

    def plan(self, cmd: Command) -> str:
        _check_identifiers(cmd)
        node, job = cmd.target.node, cmd.target.job
        if cmd.type in ("cordon_node", "drain_node", "quarantine_gpu"):
            reason = f"{REASON_PREFIX} {_entry(cmd)}"
            return shlex.join(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])
        if cmd.type == "release_gpu":
            return (f"remove the faultline entry for {cmd.target.gpu or 'the node'} from {node}'s drain reason; "
                    f"{shlex.join(['scontrol', 'update', f'NodeName={node}', 'State=RESUME'])} when none is left")
        if cmd.type == "reboot_node":
            return shlex.join(self._reboot_args(cmd))
        if cmd.type == "checkpoint_now":
            return f"scancel --batch --signal={self.checkpoint_signal or '(not configured)'} {job}"
        updates = _job_updates(cmd)
        if updates:
            return (f"scontrol requeuehold {job}; scontrol update JobId={job} {' '.join(updates)}; "
                    f"scontrol release {job}")
        return f"scontrol requeue {job}"

    def execute(self, cmd: Command) -> str:
        _check_identifiers(cmd)
        if cmd.type == "restart_job":
            return self._restart(require(cmd, "job"), _job_updates(cmd))
        if cmd.type == "checkpoint_now":
            return self._checkpoint_now(require(cmd, "job"))
        node = require(cmd, "node")
        if cmd.type in ("cordon_node", "drain_node"):
            return self._drain(node, _entry(cmd))
        if cmd.type == "quarantine_gpu":
            require(cmd, "gpu")
            return self._drain(node, _entry(cmd))
        if cmd.type == "release_gpu":
            return self._release(node, cmd.target.gpu)
        if cmd.type == "reboot_node":
            self.run(self._reboot_args(cmd))
            return f"node {node} reboots when idle (ASAP), then stays DOWN until released"
        raise ExecutionError(f"unsupported: the slurm backend does not carry out {cmd.type}")

    # --- nodes --------------------------------------------------------------------------

    def node_state(self, node: str) -> tuple[str, str]:
        """(State, Reason) of a node as ``scontrol show node`` reports them (Reason "" when none)."""
        out = self.run(["scontrol", "--oneliner", "show", "node", node]).strip()
        fields = dict(_FIELD.findall(out))
        if "State" not in fields:
            raise ExecutionError(f"scontrol show node {node}: no State in {out[:200]!r}")
        match = _REASON.search(out)
        reason = match.group(1).strip() if match else ""
        return fields["State"], "" if reason == "(null)" else reason

    def _drain(self, node: str, entry: str) -> str:
        state, reason = self.node_state(node)
        entries = _entries(reason)
        if "DRAIN" in state and entries is None:
            return f"node {node} was already drained by someone else (reason: {reason}): left as it is"
        entries = entries if "DRAIN" in state and entries is not None else []
        if entry in entries:
            return f"node {node} was already drained for this: {reason}"
        new_reason = _reason(entries + [entry])
        self.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={new_reason}"])
        return f"drained node {node} (reason: {new_reason})"

    def _release(self, node: str, gpu: str | None) -> str:
        state, reason = self.node_state(node)
        if "DRAIN" not in state:
            return f"node {node} is not drained ({state}): nothing to release"
        entries = _entries(reason)
        if entries is None:
            raise ExecutionError(f"node {node} is drained by someone else (reason: {reason}): not resuming it")
        left = [e for e in entries if gpu is not None and not e.endswith(f" gpu={gpu}")]
        if left == entries:
            return f"node {node} holds no faultline entry for GPU {gpu}: unchanged (reason: {reason})"
        if left:
            self.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={_reason(left)}"])
            return f"released GPU {gpu} on {node}; the node stays drained for: {'; '.join(left)}"
        self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
        return f"resumed node {node}"

    def _reboot_args(self, cmd: Command) -> list[str]:
        return ["scontrol", "reboot", "ASAP", "nextstate=DOWN", f"reason={REASON_PREFIX} {_entry(cmd)}",
                str(cmd.target.node)]

    # --- jobs ---------------------------------------------------------------------------

    def _restart(self, job: str, updates: list[str]) -> str:
        job_id = self._job_id(job)
        if not updates:
            self.run(["scontrol", "requeue", job_id])
            return f"requeued job {job_id}"
        what = ", ".join(_describe(u) for u in updates)
        self.run(["scontrol", "requeuehold", job_id])
        try:
            self.run(["scontrol", "update", f"JobId={job_id}", *updates])
        except ExecutionError as exc:
            raise ExecutionError(f"job {job_id} requeued and HELD: {what} failed ({exc}); "
                                 f"fix the job, then `scontrol release {job_id}`") from exc
        self.run(["scontrol", "release", job_id])
        return f"requeued job {job_id} {what}"

    def _checkpoint_now(self, job: str) -> str:
        if self.checkpoint_signal is None:
            raise ExecutionError("checkpoint_now is not configured for this Slurm cluster: a batch script that does "
                                 "not trap the signal would die of it; set checkpoint_signal once its job template "
                                 "traps it (OPERATIONS.md)")
        job_id = self._job_id(job)
        self.run(["scancel", "--batch", f"--signal={self.checkpoint_signal}", job_id])
        return f"asked job {job_id} to checkpoint now (SIG{self.checkpoint_signal} to its batch script)"

    def _job_id(self, job: str) -> str:
        """A job id as given, or the one active job of that name."""
        if job.isdigit():
            return job
        out = self.run(["squeue", "--noheader", "--format=%i", f"--name={job}"])
        ids = sorted({line.strip() for line in out.splitlines() if line.strip()})
        if len(ids) != 1:
            raise ExecutionError(f"job name {job!r} matches {len(ids)} active jobs ({', '.join(ids) or 'none'}): "
                                 "not guessing")
        return ids[0]


def _check_identifiers(cmd: Command) -> None:
    """Refuse, before any argument is built, identifiers that scontrol would read as more than one thing."""
    checks = [(why_not_node, cmd.target.node), (why_not_gpu, cmd.target.gpu), (why_not_job, cmd.target.job)]
    checks += [(why_not_node, node) for node in excluded_nodes(cmd)]
    for why_not, value in checks:
        if value is not None and (why := why_not(value)) is not None:
            raise ExecutionError(f"not passed to scontrol: {why}")


def _job_updates(cmd: Command) -> list[str]:
    """The held job's changes a restart asks for: the nodes to avoid, the GPUs to ask for (class and count)."""
    updates = []
    excluded = excluded_nodes(cmd)
    if excluded:
        updates.append(f"ExcNodeList={','.join(excluded)}")
    cls, count = cmd.params.get("gpu_class"), cmd.params.get("gpus")
    if count is not None and (type(count) is not int or count < 1):  # 8.0, true, "8", 0: never dropped silently
        raise ExecutionError(f"restart_job: gpus {count!r} is not a positive integer: refused, nothing was run "
                             "(a restart without the GPU count it was signed with would not be the one decided)")
    if cls:
        if not isinstance(cls, str) or not _GPU_CLASS.fullmatch(cls):
            raise ExecutionError(f"restart_job: gpu_class {cls!r} is not a GRES type name")
        if count is not None:
            updates.append(f"TresPerJob=gres/gpu:{cls}:{count}")
    return updates


def _describe(update: str) -> str:
    key, _, value = update.partition("=")
    return f"excluding {value}" if key == "ExcNodeList" else f"asking for {value.removeprefix('gres/')}"


def _entry(cmd: Command) -> str:
    """Our part of a node's reason for this command: ``<incident> <category>[ gpu=<gpu>]``."""
    category = (cmd.params.get("category") or cmd.params.get("reason")
                or cmd.reason.split(":", 1)[0].strip() or cmd.type)
    gpu = f" gpu={cmd.target.gpu}" if cmd.type == "quarantine_gpu" and cmd.target.gpu else ""
    return re.sub(r"[;\s]+", " ", f"{cmd.incident} {category}{gpu}").strip()


def _entries(reason: str) -> list[str] | None:
    """The faultline entries of a drain reason, or None when the reason is someone else's."""
    if not reason.startswith(REASON_PREFIX):
        return None
    return [e.strip() for e in reason[len(REASON_PREFIX):].split(";") if e.strip()]


def _reason(entries: list[str]) -> str:
    return f"{REASON_PREFIX} {'; '.join(entries)}"
