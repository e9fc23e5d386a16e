"""Building an executor from options (what ``faultline executor run`` is given).

Names: an executor is named after its backend (``slurm``, ``kubernetes``,
``webhook``), or ``--name`` for several of one kind (one per cluster). The
name labels its results, picks its ledger file and its consumer group, so two
processes of one name share what was carried out. A dry run is named
``<name>-dry-run`` and keeps its ledger in memory: its results can never make a
real executor believe a command was carried out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

from sinks.executors.approvals import ApprovalBook
from sinks.executors.breaker import CircuitBreaker
from sinks.executors.core import Backend, Executor
from sinks.executors.ledger import ResultLedger
from streams.signing import SigningKeys

__all__ = ["BackendKind", "ExecutorOptions", "make_backend", "make_executor"]

log = logging.getLogger(__name__)

BackendKind = Literal["slurm", "kubernetes", "webhook"]


@dataclass(frozen=True)
class ExecutorOptions:
    """Everything that shapes one executor."""

    backend: BackendKind
    state_dir: Path
    name: str | None = None
    dry_run: bool = False
    url: str | None = None  # webhook only
    fleet_size: int | None = None  # None: ask the backend
    max_share: float = 0.10
    window: timedelta = timedelta(minutes=10)
    min_nodes: int = 1
    timeout_s: float = 30.0
    keys: SigningKeys | None = None  # verify the correlator's signatures (None: accept unsigned commands)
    job_labels: tuple[str, ...] = ()  # kubernetes: labels naming a pod's job (the job source's job_labels)


def make_backend(opts: ExecutorOptions) -> Backend:
    """The backend the options name, connected (Kubernetes: in-cluster or kubeconfig credentials)."""
    if opts.backend == "slurm":
        from sinks.executors.slurm import SlurmBackend

        return SlurmBackend(timeout_s=opts.timeout_s)
    if opts.backend == "kubernetes":
        from common.kube_workloads import WorkloadRules
        from sinks.executors.kubernetes import KubernetesBackend

        rules = WorkloadRules(job_labels=opts.job_labels) if opts.job_labels else None
        return KubernetesBackend.from_environment(timeout_s=opts.timeout_s, rules=rules)
    from sinks.executors.webhook import WebhookBackend

    if not opts.url:
        raise ValueError("the webhook backend needs --url")
    return WebhookBackend(opts.url, timeout_s=min(opts.timeout_s, 10.0))


def make_executor(opts: ExecutorOptions, backend: Backend | None = None) -> Executor:
    """An executor with its ledger (in ``state_dir``), approvals view and circuit breaker."""
    backend = backend if backend is not None else make_backend(opts)
    name = (opts.name or backend.name) + ("-dry-run" if opts.dry_run else "")
    ledger = ResultLedger() if opts.dry_run else ResultLedger.in_dir(opts.state_dir, name)
    fleet = opts.fleet_size if opts.fleet_size is not None else backend.fleet_size()
    if fleet is None and backend.supports("cordon_node"):
        log.warning("executor %s: fleet size unknown (give --fleet-size): the circuit breaker refuses "
                    "every fencing command until it is known", name)
    breaker = CircuitBreaker(max_share=opts.max_share, window=opts.window, fleet_size=fleet,
                             min_nodes=opts.min_nodes)
    if opts.keys is None:
        log.warning("executor %s: no FAULTLINE_SIGNING_KEYS: unsigned commands will run (development only)", name)
    return Executor(backend, ledger, ApprovalBook(), breaker, dry_run=opts.dry_run, name=name, keys=opts.keys)
