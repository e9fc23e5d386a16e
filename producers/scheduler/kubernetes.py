"""The ``kubernetes`` source: GPU pods and node readiness as ``scheduler`` observations.

Every poll lists the pods (all namespaces, or one; optionally a label
selector) and the nodes through the official client (``kubernetes``
package), page by page with a deadline per request;
:mod:`~producers.scheduler.kubernetes_pods` groups the GPU pods into jobs
and reads node conditions, and
:class:`~producers.scheduler.tracking.SchedulerTracker` reports what changed
(a job whose pods are all gone is ``job_cancelled``). By default every poll
lists; with ``watch: true`` (the Helm chart's setting) the pods and nodes are
listed once and then watched (:mod:`~producers.scheduler.kubernetes_watch`),
and each poll -- every ``interval_s``, a few seconds -- looks at the watched
copy: the API server is spared a full list per poll and a failure is
reported within seconds.

Where the API server is: ``host`` (+ ``token_file``), else the in-cluster
service account, else ``kubeconfig`` / ``~/.kube/config``. Config section
``kubernetes``::

    kubernetes:
      interval_s: 15
      namespace: training              # else all namespaces
      label_selector: team=ml          # optional
      gpu_uuids: {gpu-07: [GPU-1a93c00c-..., GPU-2e56bd2c-...]}   # to turn UUIDs into indices
      dra_driver: gpu.nvidia.com       # DRA pods: their claims' allocated devices are their GPUs
      agent_gpus:                      # each pod's GPUs from its node's agent (kubelet PodResources)
        namespace: faultline
        label_selector: app.kubernetes.io/component=agent
        port: 9464

With ``agent_gpus`` (:mod:`~producers.scheduler.agent_gpus`), a job's start is
held back (``hold_s``, 30 s) while a running pod's GPUs are not reported yet,
so the allocation names the GPUs the kubelet gave it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import Field

from common.kube_workloads import Workload, identify
from producers.registry import SourceContext, SourceSettings
from producers.scheduler.agent_gpus import AgentGpus
from producers.scheduler.dra_gpus import DraGpus
from producers.scheduler.kubernetes_pods import (
    AssignedGpus,
    PodRules,
    gpus_of,
    jobs_from_pods,
    nodes_from_objects,
    unplaced,
)
from producers.scheduler.kubernetes_watch import WatchCache
from producers.scheduler.tracking import JobView, SchedulerTracker
from producers.scheduler.workload_specs import WorkloadSpecs
from producers.source import Observation

__all__ = ["KubernetesSettings", "KubernetesSource", "api_client", "create", "first_known"]

log = logging.getLogger("faultline.agent.kubernetes")

_MAX_PAGES = 200


class AgentGpusSettings(SourceSettings):
    namespace: str = Field(description="The namespace of the agent pods.")
    label_selector: str = Field(description="Selects the agent pods (one per node).")
    port: int = Field(9464, ge=1, le=65535, description="The agents' metrics port.")
    hold_s: float = Field(30.0, ge=0, description="Hold a job's start this long while a pod's GPUs are unknown.")


class KubernetesSettings(SourceSettings):
    interval_s: float = Field(15.0, gt=0, description="Seconds between two listings (with watch: two looks).")
    watch: bool = Field(False, description="List once, then watch (kubernetes_watch.py): large clusters.")
    read_workloads: bool = Field(True, description="Read max_restarts/elastic from each job's workload object.")
    host: str | None = Field(None, description="API server URL; else in-cluster, else kubeconfig.")
    token_file: Path | None = Field(None, description="With host: a bearer token file.")
    verify_ssl: bool = Field(True, description="With host: verify the server's certificate.")
    kubeconfig: Path | None = Field(None, description="A kubeconfig file (default ~/.kube/config).")
    context: str | None = Field(None, description="The kubeconfig context.")
    namespace: str | None = Field(None, description="Only this namespace's pods; else all.")
    label_selector: str | None = Field(None, description="Only pods with these labels.")
    gpu_resource: str = Field("nvidia.com/gpu", description="The extended resource that is a GPU.")
    job_labels: list[str] = Field(default_factory=lambda: list(PodRules().job_labels),
                                  description="Labels that name a pod's job explicitly, first found wins "
                                  "(else the workload's name: common/kube_workloads.py).")
    qualify_namespace: bool = Field(False, description="Name jobs <namespace>/<name> (unique cluster-wide).")
    gpu_annotations: list[str] = Field(default_factory=lambda: list(PodRules().gpu_annotations),
                                       description="Pod annotations listing its GPUs (indices or UUIDs).")
    gpu_uuids: dict[str, list[str]] = Field(default_factory=dict, description="node -> GPU UUIDs by index.")
    max_restarts: int | None = Field(3, ge=0, description="max_restarts reported for every job.")
    jobs: bool = Field(True, description="Report job events.")
    nodes: bool = Field(True, description="Report node readiness.")
    timeout_s: float = Field(20.0, gt=0, description="Deadline of one API request.")
    agent_gpus: AgentGpusSettings | None = Field(None, description="Read pods' GPUs from the node agents.")
    dra_driver: str | None = Field(None, description="Read DRA pods' GPUs from their ResourceClaims (this "
                                   "driver's devices, e.g. gpu.nvidia.com).")


def api_client(cfg: KubernetesSettings) -> Any:
    """A ``kubernetes.client.ApiClient`` for the configured API server."""
    from kubernetes import client, config

    conf = client.Configuration()
    if cfg.host:
        conf.host = cfg.host
        conf.verify_ssl = cfg.verify_ssl
        if cfg.token_file is not None:
            conf.api_key = {"authorization": "Bearer " + cfg.token_file.read_text().strip()}
    else:
        try:
            config.load_incluster_config(client_configuration=conf)
        except config.ConfigException:
            config.load_kube_config(config_file=str(cfg.kubeconfig) if cfg.kubeconfig else None,
                                    context=cfg.context, client_configuration=conf)
    return client.ApiClient(conf)


def _all_pages(list_call: Callable[..., Any], timeout_s: float, page_size: int, **kwargs: Any) -> list[Any]:
    """Every item of a list call, ``page_size`` at a time (at most ``_MAX_PAGES`` pages)."""
    items: list[Any] = []
    token: str | None = None
    for _ in range(_MAX_PAGES):
        page = list_call(limit=page_size, _continue=token, _request_timeout=timeout_s, **kwargs)
        items.extend(page.items or [])
        token = page.metadata._continue if page.metadata else None
        if not token:
            return items
    raise RuntimeError(f"more than {_MAX_PAGES} pages of {page_size} listed: refusing to go on")


class KubernetesSource:
    """Lists pods and nodes through ``api`` (an ``ApiClient``) and reports what changed."""

    def __init__(
        self,
        api: Any,
        rules: PodRules | None = None,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        jobs: bool = True,
        nodes: bool = True,
        interval_s: float = 15.0,
        timeout_s: float = 20.0,
        page_size: int = 500,
        name: str = "kubernetes",
        hold_s: float = 0.0,
        watch: bool = False,
        read_workloads: bool = False,
    ) -> None:
        from kubernetes import client

        self.api = api
        self.core = client.CoreV1Api(api)
        self.rules = rules or PodRules()
        self.namespace = namespace
        self.label_selector = label_selector
        self.report_jobs = jobs
        self.report_nodes = nodes
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.page_size = page_size
        self.name = name
        self.tracker = SchedulerTracker(vanished="cancelled")
        self.hold_s = hold_s
        self.watch = watch
        self.specs = WorkloadSpecs(api, timeout_s) if read_workloads else None
        self._pods: WatchCache | None = None
        self._nodes: WatchCache | None = None
        self._held: dict[tuple[str, str], float] = {}

    def list_pods(self) -> list[Any]:
        """Every pod in scope (``V1Pod`` objects)."""
        selector: dict[str, Any] = {"label_selector": self.label_selector} if self.label_selector else {}
        if self.watch:
            if self._pods is None:
                scope: dict[str, Any] = {"namespace": self.namespace} if self.namespace else {}
                call = self.core.list_namespaced_pod if self.namespace else self.core.list_pod_for_all_namespaces
                self._pods = WatchCache(call, "pods", page_size=self.page_size, timeout_s=self.timeout_s,
                                        **scope, **selector)
            return self._pods.snapshot()
        if self.namespace:
            return _all_pages(self.core.list_namespaced_pod, self.timeout_s, self.page_size,
                              namespace=self.namespace, **selector)
        return _all_pages(self.core.list_pod_for_all_namespaces, self.timeout_s, self.page_size, **selector)

    def list_nodes(self) -> list[Any]:
        """Every node (``V1Node`` objects)."""
        if self.watch:
            if self._nodes is None:
                self._nodes = WatchCache(self.core.list_node, "nodes", page_size=self.page_size,
                                         timeout_s=self.timeout_s)
            return self._nodes.snapshot()
        return _all_pages(self.core.list_node, self.timeout_s, self.page_size)

    def poll(self, now: datetime) -> list[Observation]:
        out: list[Observation] = []
        if self.report_jobs:
            pods = self.list_pods()
            views = self._with_workload_fields(self._hold(jobs_from_pods(pods, self.rules), pods), pods)
            out.extend(self.tracker.jobs(views, now))
        if self.report_nodes:
            out.extend(self.tracker.nodes(nodes_from_objects(self.list_nodes()), now))
        return out

    def _with_workload_fields(self, views: list[JobView], pods: list[Any]) -> list[JobView]:
        """Running jobs get their workload's restart budget and elasticity (workload_specs.py)."""
        if self.specs is None or not any(v.state == "running" for v in views):
            return views
        owners: dict[str, tuple[Workload, int]] = {}
        for pod in pods:
            ident, count = identify(pod, self.rules.workloads), gpus_of(pod, self.rules)
            if count:
                workload, most = owners.get(ident.job, (ident.workload, 0))
                owners[ident.job] = (workload, max(most, count))
        out = []
        for view in views:
            if view.state == "running" and view.job in owners:
                workload, per_pod = owners[view.job]
                view = replace(view, details={**view.details, **self.specs.fields(workload, view.run, per_pod)})
            out.append(view)
        return out

    def _hold(self, views: list[JobView], pods: list[Any]) -> list[JobView]:
        """Hold back (as no verdict) a start whose pods' GPUs the agents do not report yet, up to
        ``hold_s``: a ``job_started`` with the wrong GPUs would blame the wrong job for a GPU fault."""
        if self.hold_s <= 0 or self.rules.assigned is None:
            return views
        waiting = unplaced(pods, self.rules)
        clock = time.monotonic()
        out = []
        for view in views:
            key = (view.job, view.run)
            if view.state == "running" and view.job in waiting:
                first = self._held.setdefault(key, clock)
                if clock - first < self.hold_s:
                    out.append(replace(view, state="other"))
                    continue
                log.warning("kubernetes: job %s starts with GPUs of some pods unknown after %.0f s (node "
                            "agents not answering?): its ranks are placed by order on those nodes",
                            view.job, self.hold_s)
            self._held.pop(key, None)
            out.append(view)
        return out

    def close(self) -> None:
        for cache in (self._pods, self._nodes):
            if cache is not None:
                cache.close()
        self.api.close()


def first_known(providers: list[AssignedGpus]) -> AssignedGpus:
    """A pod's GPUs from the first provider that knows them (DRA claims, then the node agents)."""
    def assigned(pod: Any) -> Sequence[tuple[str, int | None]] | None:
        for provider in providers:
            found = provider(pod)
            if found:
                return found
        return None

    return assigned


def create(ctx: SourceContext, settings: Mapping[str, Any]) -> KubernetesSource:
    """The ``kubernetes`` section's factory."""
    cfg = KubernetesSettings.model_validate(settings)
    api = api_client(cfg)
    providers: list[AssignedGpus] = []
    if cfg.dra_driver:
        providers.append(DraGpus(api, cfg.dra_driver, refresh_s=min(cfg.interval_s, 10.0), timeout_s=cfg.timeout_s))
    if cfg.agent_gpus is not None:
        from kubernetes import client

        agents = cfg.agent_gpus
        providers.append(AgentGpus(client.CoreV1Api(api), agents.namespace, agents.label_selector, agents.port,
                                   refresh_s=min(cfg.interval_s, 10.0), timeout_s=min(cfg.timeout_s, 5.0)))
    assigned = first_known(providers) if providers else None
    rules = PodRules(gpu_resource=cfg.gpu_resource, job_labels=tuple(cfg.job_labels),
                     gpu_annotations=tuple(cfg.gpu_annotations), gpu_uuids=cfg.gpu_uuids,
                     max_restarts=cfg.max_restarts, qualify_namespace=cfg.qualify_namespace, assigned=assigned)
    return KubernetesSource(api, rules, namespace=cfg.namespace, label_selector=cfg.label_selector,
                            jobs=cfg.jobs, nodes=cfg.nodes, interval_s=cfg.interval_s, timeout_s=cfg.timeout_s,
                            hold_s=cfg.agent_gpus.hold_s if cfg.agent_gpus else 0.0, watch=cfg.watch,
                            read_workloads=cfg.read_workloads)
