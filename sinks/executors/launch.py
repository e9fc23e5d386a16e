"""Building an executor from options (what ``faultline executor run`` is given).

Names: an executor is named after its backend (``slurm``, ``kubernetes``,
``webhook``), or ``--name`` for several of one kind (one per cluster). The
name labels its results, picks its ledger file and its consumer group, so two
processes of one name share what was carried out -- within one namespace and
cluster: the ledger file is also named after the scope the executor acts in
(its :class:`~sinks.executors.trust.Trust`'s namespace and cluster), so one of
another namespace or cluster, in the same state directory, shares nothing with
it (:meth:`ResultLedger.in_dir`). A dry run is named
``<name>-dry-run`` and keeps its ledger in memory: its results can never make a
real executor believe a command was carried out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from common.settings import Settings
from sinks.executors.approvals import ApprovalBook
from sinks.executors.breaker import CircuitBreaker
from sinks.executors.core import Backend, Executor
from sinks.executors.ledger import ResultLedger
from sinks.executors.trust import Trust
from streams.signing import SigningKeys

__all__ = ["BackendKind", "ExecutorOptions", "make_backend", "make_executor", "trust_from", "webhook_url"]

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
    trust: Trust | None = None  # every key and the scope (sinks/executors/trust.py); None: Trust(commands=keys)
    webhook_token: str | None = field(default=None, repr=False)  # webhook only: sent as a bearer token
    job_labels: tuple[str, ...] = ()  # kubernetes: labels naming a pod's job (the job source's job_labels)


def trust_from(settings: Settings) -> Trust:
    """What an executor started with ``settings`` verifies; raises :class:`MissingKeys` (production, no keys)."""
    settings.require_keys("executor")
    return Trust(commands=settings.signing(), operators=settings.operators(), executors=settings.executors(),
                 namespace=settings.namespace, cluster=settings.cluster)


def webhook_url(settings: Settings, given: str | None) -> str:
    """The webhook's URL: FAULTLINE_WEBHOOK_URL (a secret), or ``--url`` when it holds no credentials.

    A command line is public (``ps``, shell history, the process table of every container
    runtime): a URL with a password or a query string (where tokens go) is refused there.
    """
    if settings.webhook_url is not None:
        return settings.webhook_url.get_secret_value()
    if not given:
        raise ValueError("the webhook backend needs a URL: set FAULTLINE_WEBHOOK_URL")
    parts = urlsplit(given)
    if "@" in parts.netloc or parts.query:
        raise ValueError("--url must not carry credentials (user info or a query string: the command line is "
                         "public); put the URL in FAULTLINE_WEBHOOK_URL and a token in FAULTLINE_WEBHOOK_TOKEN")
    return given


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
        raise ValueError("the webhook backend needs a URL: set FAULTLINE_WEBHOOK_URL (or --url without credentials)")
    headers = {"Authorization": f"Bearer {opts.webhook_token}"} if opts.webhook_token else None
    return WebhookBackend(opts.url, timeout_s=min(opts.timeout_s, 10.0), headers=headers)


def make_executor(opts: ExecutorOptions, backend: Backend | None = None) -> Executor:
    """An executor with its ledger (in ``state_dir``), approvals view and circuit breaker."""
    backend = backend if backend is not None else make_backend(opts)
    name = (opts.name or backend.name) + ("-dry-run" if opts.dry_run else "")
    trust = opts.trust if opts.trust is not None else Trust(commands=opts.keys)
    scope = (trust.namespace, trust.cluster or "default") if trust.namespace is not None else None
    ledger = ResultLedger() if opts.dry_run else ResultLedger.in_dir(opts.state_dir, name, scope)
    unscoped = ResultLedger.file_in(opts.state_dir, name)
    if scope is not None and not opts.dry_run and unscoped.exists():
        log.warning("executor %s: %s is no longer read (a ledger is per namespace and cluster now: %s); this "
                    "namespace's results topic rebuilds what it settled. Rename it to the new name if it "
                    "served this namespace and cluster alone", name, unscoped, ledger.path)
    fleet = opts.fleet_size if opts.fleet_size is not None else backend.fleet_size()
    if fleet is None and backend.supports("cordon_node"):
        log.warning("executor %s: fleet size unknown (give --fleet-size): the circuit breaker refuses "
                    "every fencing command until it is known", name)
    breaker = CircuitBreaker(max_share=opts.max_share, window=opts.window, fleet_size=fleet,
                             min_nodes=opts.min_nodes)
    for keys, setting, what in ((trust.commands, "FAULTLINE_SIGNING_KEYS", "unsigned commands will run"),
                                (trust.operators, "FAULTLINE_OPERATOR_KEYS", "unsigned approvals release commands"),
                                (trust.executors, "FAULTLINE_EXECUTOR_KEYS", "unsigned results teach the ledger")):
        if keys is None:
            log.warning("executor %s: no %s: %s (development only)", name, setting, what)
    return Executor(backend, ledger, ApprovalBook(), breaker, dry_run=opts.dry_run, name=name, trust=trust)
