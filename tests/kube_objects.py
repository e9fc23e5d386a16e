"""Objects for the test API server (:mod:`tests.kube_apiserver`): the parts controllers would play.

Nodes with GPUs, GPU pods bound to them (``nodeName`` set, status written as
a kubelet would), the training operators' custom resources (their CRDs with
an open schema: the executor reads only ``status.conditions`` and
``spec``), batch Jobs, PodDisruptionBudgets with the status the disruption
controller would give them, and DRA ResourceSlices. Every object is named by
the test, in a namespace of its own.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

__all__ = ["CRDS", "Objects", "gpu_uuid"]

CRDS = {  # kind -> (group, version, plural)
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
}
DRA_DRIVER = "gpu.nvidia.com"


def gpu_uuid(node: str, index: int) -> str:
    """A stable, made-up GPU UUID of ``node``'s GPU ``index``."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}/{index}"))


@dataclass
class Objects:
    """Creates and reads test objects through an admin client."""

    api_client: Any

    def __post_init__(self) -> None:
        self.core = k8s.CoreV1Api(self.api_client)
        self.batch = k8s.BatchV1Api(self.api_client)
        self.custom = k8s.CustomObjectsApi(self.api_client)
        self.policy = k8s.PolicyV1Api(self.api_client)
        self.resource = k8s.ResourceV1Api(self.api_client)

    # --- cluster-wide ---------------------------------------------------------------

    def namespace(self, name: str) -> str:
        self.core.create_namespace({"metadata": {"name": name}})
        return name

    def node(self, name: str, gpus: int = 8, taints: list[dict[str, str]] | None = None,
             ready: bool = True) -> None:
        self.core.create_node({"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
                               "spec": {"taints": taints or []}})
        self.core.patch_node_status(name, {"status": {
            "capacity": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "KubeletReady" if ready else "KubeletNotReady", "message": "test",
                            "lastHeartbeatTime": "2026-04-22T03:00:00Z",
                            "lastTransitionTime": "2026-04-22T03:00:00Z"}]}})

    def crds(self) -> None:
        """The CRDs of :data:`CRDS`, once per server (AlreadyExists is fine)."""
        ext = k8s.ApiextensionsV1Api(self.api_client)
        for kind, (group, version, plural) in CRDS.items():
            body = {
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.{group}"},
                "spec": {"group": group, "scope": "Namespaced",
                         "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                                   "listKind": kind + "List"},
                         "versions": [{"name": version, "served": True, "storage": True,
                                       "subresources": {"status": {}},
                                       "schema": {"openAPIV3Schema": {
                                           "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
            }
            try:
                ext.create_custom_resource_definition(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
        deadline = time.monotonic() + 60
        for _, (group, _v, plural) in CRDS.items():
            while True:
                crd = ext.read_custom_resource_definition(f"{plural}.{group}")
                if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or []):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {plural}.{group} not established")
                time.sleep(0.2)

    # --- workloads --------------------------------------------------------------------

    def custom_object(self, kind: str, namespace: str, name: str, conditions: list[dict[str, str]] | None = None,
                      spec: dict[str, Any] | None = None) -> dict[str, Any]:
        group, version, plural = CRDS[kind]
        obj = self.custom.create_namespaced_custom_object(group, version, namespace, plural, {
            "apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": name},
            "spec": spec or {}})
        if conditions:
            obj = self.custom.patch_namespaced_custom_object_status(
                group, version, namespace, plural, name, {"status": {"conditions": conditions}})
        return dict(obj)

    def job(self, namespace: str, name: str, labels: dict[str, str], owner: dict[str, Any] | None = None) -> Any:
        meta: dict[str, Any] = {"name": name, "labels": labels}
        if owner:
            meta["ownerReferences"] = [owner]
        return self.batch.create_namespaced_job(namespace, {
            "metadata": meta,
            "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0,
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "restartPolicy": "Never", "containers": [{"name": "train", "image": "train:1"}]}}}})

    def pod(self, namespace: str, name: str, node: str, *, labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, owner: dict[str, Any] | None = None, gpus: int = 8,
            phase: str = "Running", started: str = "2026-04-22T03:00:12Z") -> Any:
        meta: dict[str, Any] = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
        if owner:
            meta["ownerReferences"] = [owner]
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        self.core.create_namespaced_pod(namespace, {"metadata": meta, "spec": {
            "nodeName": node, "restartPolicy": "Never",
            "containers": [{"name": "train", "image": "train:1", "resources": resources}]}})
        return self.set_phase(namespace, name, phase, started)

    def set_phase(self, namespace: str, name: str, phase: str, started: str = "2026-04-22T03:00:12Z",
                  finished: str = "2026-04-22T03:24:01Z") -> Any:
        """Write the pod's status as its kubelet would."""
        if phase == "Running":
            state: dict[str, Any] = {"running": {"startedAt": started}}
        elif phase in ("Failed", "Succeeded"):
            state = {"terminated": {"exitCode": 1 if phase == "Failed" else 0, "startedAt": started,
                                    "finishedAt": finished, "reason": "Error" if phase == "Failed" else "Completed"}}
        else:
            state = {"waiting": {"reason": "ContainerCreating"}}
        ready = "True" if phase == "Running" else "False"  # a Ready pod is one a disruption budget guards
        return self.core.patch_namespaced_pod_status(name, namespace, {"status": {
            "phase": phase, "startTime": started,
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": started}],
            "containerStatuses": [{"name": "train", "image": "train:1", "imageID": "", "ready": phase == "Running",
                                   "restartCount": 0, "state": state}]}})

    def pdb(self, namespace: str, name: str, selector: dict[str, str], allowed: int) -> None:
        """A PodDisruptionBudget and the status its controller would give it (``allowed`` disruptions)."""
        self.policy.create_namespaced_pod_disruption_budget(namespace, {
            "metadata": {"name": name}, "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}}})
        self.allow(namespace, name, allowed)

    def allow(self, namespace: str, name: str, allowed: int) -> None:
        current = self.policy.read_namespaced_pod_disruption_budget(name, namespace)
        self.policy.patch_namespaced_pod_disruption_budget_status(name, namespace, {"status": {
            "observedGeneration": current.metadata.generation, "disruptionsAllowed": allowed,
            "currentHealthy": allowed + 1, "desiredHealthy": 1, "expectedPods": allowed + 1}})

    def resource_slice(self, node: str, gpus: int = 8) -> None:
        """The DRA driver's ResourceSlice of ``node``: one device per GPU, with its UUID."""
        self.resource.create_resource_slice(k8s.V1ResourceSlice.from_dict({
            "metadata": {"name": f"{node}-{DRA_DRIVER}"},
            "spec": {"driver": DRA_DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {
                         "uuid": {"string": gpu_uuid(node, i)}, "index": {"int": i},
                         "productName": {"string": "NVIDIA H100 80GB HBM3"}}} for i in range(gpus)]}}))

    def claimed_pod(self, namespace: str, name: str, node: str, devices: list[str], *,
                    labels: dict[str, str] | None = None, owner: dict[str, Any] | None = None) -> Any:
        """A pod whose GPUs come from a ResourceClaim the scheduler allocated ``devices`` (of ``node``'s
        pool) to, as DRA does it: no nvidia.com/gpu limit at all."""
        claim = f"{name}-gpus"
        self.resource.create_namespaced_resource_claim(namespace, k8s.ResourceV1ResourceClaim.from_dict({
            "metadata": {"name": claim},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": DRA_DRIVER, "allocationMode": "ExactCount", "count": len(devices)}}]}}}))
        self.resource.patch_namespaced_resource_claim_status(claim, namespace, {"status": {"allocation": {
            "devices": {"results": [{"request": "gpus", "driver": DRA_DRIVER, "pool": node, "device": d}
                                    for d in devices]}}}})
        meta: dict[str, Any] = {"name": name, "labels": labels or {}}
        if owner:
            meta["ownerReferences"] = [owner]
        self.core.create_namespaced_pod(namespace, {"metadata": meta, "spec": {
            "nodeName": node, "restartPolicy": "Never",
            "resourceClaims": [{"name": "gpus", "resourceClaimName": claim}],
            "containers": [{"name": "train", "image": "train:1", "resources": {"claims": [{"name": "gpus"}]}}]}})
        return self.set_phase(namespace, name, "Running")

    # --- reads -------------------------------------------------------------------------

    def terminating(self, namespace: str) -> set[str]:
        """Names of the namespace's pods being deleted (no kubelet finishes a deletion here)."""
        return {p.metadata.name for p in self.core.list_namespaced_pod(namespace).items
                if p.metadata.deletion_timestamp is not None}

    def pods(self, namespace: str) -> set[str]:
        return {p.metadata.name for p in self.core.list_namespaced_pod(namespace).items}


def owner(kind: str, name: str, uid: str | None = None, api_version: str | None = None) -> dict[str, Any]:
    """A controller ownerReference (the API does not check that the owner exists)."""
    versions = {"PyTorchJob": "kubeflow.org/v1", "JobSet": "jobset.x-k8s.io/v1alpha2", "Job": "batch/v1",
                "StatefulSet": "apps/v1", "ReplicaSet": "apps/v1", "DaemonSet": "apps/v1"}
    return {"apiVersion": api_version or versions.get(kind, "v1"), "kind": kind, "name": name,
            "uid": uid or str(uuid.uuid4()), "controller": True}
