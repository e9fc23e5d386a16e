"""A namespace of the test kube-apiserver, and the Kubernetes backend as the chart's executor user
(the ``cluster`` fixture in this directory's conftest): what the Kubernetes executor tests share."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from sinks.executors.kubernetes import KubernetesBackend
from tests.kube_apiserver import KubeApiServer
from tests.kube_objects import Objects, owner

__all__ = ["Cluster", "make_cluster", "pytorch_pods"]


@dataclass
class Cluster:
    objects: Objects
    backend: KubernetesBackend
    ns: str
    prefix: str
    sleeps: list[float]

    def node(self, n: int, **kwargs: Any) -> str:
        name = f"{self.prefix}-gpu-{n:02d}"
        self.objects.node(name, **kwargs)
        return name

    def read_node(self, name: str) -> Any:
        return self.objects.core.read_node(name)


def pytorch_pods(c: Cluster, job: str, nodes: list[str], namespace: str | None = None) -> list[str]:
    """A PyTorchJob (its object and its pods, as the training operator labels them)."""
    ns = namespace or c.ns
    obj = c.objects.custom_object("PyTorchJob", ns, job)
    ref = owner("PyTorchJob", job, obj["metadata"]["uid"])
    names = []
    for i, node in enumerate(nodes):
        rtype, index = ("master", 0) if i == 0 else ("worker", i - 1)
        name = f"{job}-{rtype}-{index}"
        c.objects.pod(ns, name, node, owner=ref, labels={
            "training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": rtype,
            "training.kubeflow.org/replica-index": str(index),
            "training.kubeflow.org/operator-name": "pytorchjob-controller"})
        names.append(name)
    return names


def make_cluster(kube_apiserver: KubeApiServer) -> Iterator[Cluster]:
    """A namespace of its own (pods forced out and namespaces deleted after), the backend as faultline-executor."""
    prefix = "t" + uuid.uuid4().hex[:8]
    objects = Objects(kube_apiserver.client())
    ns = objects.namespace(f"{prefix}-training")
    sleeps: list[float] = []
    backend = KubernetesBackend(k8s.CoreV1Api(kube_apiserver.client("faultline-executor")), device_taints=True,
                                sleep=sleeps.append, timeout_s=10, evict_backoff_s=0.5)
    yield Cluster(objects, backend, ns, prefix, sleeps)
    for namespace in [n.metadata.name for n in objects.core.list_namespace().items if n.metadata.name.startswith(prefix)]:
        # no namespace controller or kubelet here: pods go only when forced (grace period 0)
        objects.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        objects.core.delete_namespace(namespace)
