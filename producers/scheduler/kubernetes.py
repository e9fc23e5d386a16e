"""The ``kubernetes`` source: GPU pods and node readiness as ``scheduler`` observations.

Every poll lists the pods (all namespaces, or one; optionally a label
selector) and the nodes through the official client (``kubernetes``
package), page by page with a deadline per request;
:mod:`~producers.scheduler.kubernetes_pods` groups the GPU pods into jobs
and reads node conditions, and
:class:`~producers.scheduler.tracking.SchedulerTracker` reports what changed
(a job whose pods are all gone is ``job_cancelled``). Listing on a fixed
cadence, rather than holding a watch open, fits the agent's ``poll`` and
needs no resume logic after an API server restart.

Where the API server is: ``host`` (+ ``token_file``), else the in-cluster
service account, else ``kubeconfig`` / ``~/.kube/config``. Config section
``kubernetes``::

    kubernetes:
      interval_s: 15
      namespace: training              # else all namespaces
      label_selector: team=ml          # optional
      gpu_uuids: {gpu-07: [GPU-1a93c00c-..., GPU-2e56bd2c-...]}   # to turn UUIDs into indices
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import Field

from producers.registry import SourceContext, SourceSettings
from producers.scheduler.kubernetes_pods import PodRules, jobs_from_pods, nodes_from_objects
from producers.scheduler.tracking import SchedulerTracker
from producers.source import Observation

__all__ = ["KubernetesSettings", "KubernetesSource", "api_client", "create"]

log = logging.getLogger("faultline.agent.kubernetes")

_MAX_PAGES = 200


class KubernetesSettings(SourceSettings):
    interval_s: float = Field(15.0, gt=0, description="Seconds between two listings.")
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

    def list_pods(self) -> list[Any]:
        """Every pod in scope (``V1Pod`` objects)."""
        selector = {"label_selector": self.label_selector} if self.label_selector else {}
        if self.namespace:
            return _all_pages(self.core.list_namespaced_pod, self.timeout_s, self.page_size,
                              namespace=self.namespace, **selector)
        return _all_pages(self.core.list_pod_for_all_namespaces, self.timeout_s, self.page_size, **selector)

    def list_nodes(self) -> list[Any]:
        """Every node (``V1Node`` objects)."""
        return _all_pages(self.core.list_node, self.timeout_s, self.page_size)

    def poll(self, now: datetime) -> list[Observation]:
        out: list[Observation] = []
        if self.report_jobs:
            out.extend(self.tracker.jobs(jobs_from_pods(self.list_pods(), self.rules), now))
        if self.report_nodes:
            out.extend(self.tracker.nodes(nodes_from_objects(self.list_nodes()), now))
        return out

    def close(self) -> None:
        self.api.close()


def create(ctx: SourceContext, settings: Mapping[str, Any]) -> KubernetesSource:
    """The ``kubernetes`` section's factory."""
    cfg = KubernetesSettings.model_validate(settings)
    rules = PodRules(gpu_resource=cfg.gpu_resource, job_labels=tuple(cfg.job_labels),
                     gpu_annotations=tuple(cfg.gpu_annotations), gpu_uuids=cfg.gpu_uuids,
                     max_restarts=cfg.max_restarts, qualify_namespace=cfg.qualify_namespace)
    return KubernetesSource(api_client(cfg), rules, namespace=cfg.namespace, label_selector=cfg.label_selector,
                            jobs=cfg.jobs, nodes=cfg.nodes, interval_s=cfg.interval_s, timeout_s=cfg.timeout_s)
