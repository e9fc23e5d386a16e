"""One GPU fenced, its node left schedulable: Dynamic Resource Allocation device taints.

Where GPUs are handed out through DRA (a driver such as NVIDIA's publishes each
GPU as a device of a ``ResourceSlice`` of its node), the scheduler never
allocates a device that a ``DeviceTaintRule`` taints with ``NoSchedule``: the
other GPUs of the node stay in service. Where GPUs are device-plugin resources
(``nvidia.com/gpu``), a device taint fences nothing -- so a rule is only made
for a GPU that a ResourceSlice of that node publishes, and only where the API
server serves ``DeviceTaintRule`` (``resource.k8s.io/v1``, Kubernetes 1.37;
:func:`served`); everywhere else the backend keeps the node taint, and its
result says which of the two it applied and why.

A GPU is found by its UUID: a device attribute named ``uuid`` (in any domain,
e.g. ``gpu.nvidia.com/uuid``) equal to the command's GPU. The rule's name is
derived from node and GPU (``faultline-<hash>``), so a second quarantine finds
the first (409 AlreadyExists: "as it already was") and a release deletes
exactly the rule its quarantine made. Rules carry the label
``app.kubernetes.io/managed-by: faultline`` and the node, GPU and incident as
annotations; nothing else is ever deleted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from sinks.executors.kubernetes_api import ApiFailure, all_pages, api_call

__all__ = ["DeviceFence", "GpuDevice", "MANAGED_BY", "rule_name", "served"]

MANAGED_BY = {"app.kubernetes.io/managed-by": "faultline"}
TAINT_KEY = "faultline.io/quarantine"
_GROUP_VERSION = "resource.k8s.io/v1"


@dataclass(frozen=True)
class GpuDevice:
    """Where a DRA driver publishes a GPU: driver, pool and device name."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


def rule_name(node: str, gpu: str) -> str:
    """The DeviceTaintRule of ``gpu`` on ``node`` (an object name: lower-case, at most 63 here)."""
    return "faultline-" + hashlib.sha256(f"{node}\0{gpu}".encode()).hexdigest()[:20]


def served(api_client: Any, timeout_s: float = 10.0) -> bool:
    """Whether the API server serves ``devicetaintrules`` in ``resource.k8s.io/v1``."""
    try:
        with api_call("discover resource.k8s.io/v1"):
            resources = k8s.ResourceV1Api(api_client).get_api_resources(_request_timeout=timeout_s)
    except ApiFailure:
        return False
    return any(r.name == "devicetaintrules" for r in resources.resources or [])


def _uuid_of(device: Any) -> str | None:
    for key, value in (getattr(device, "attributes", None) or {}).items():
        if key == "uuid" or key.endswith("/uuid"):
            text = getattr(value, "string", None)
            if text:
                return str(text)
    return None


class DeviceFence:
    """Finds a node's GPU among its ResourceSlices and taints, or untaints, that device only."""

    def __init__(self, api_client: Any, timeout_s: float = 30.0) -> None:
        self.api = k8s.ResourceV1Api(api_client)
        self.timeout_s = timeout_s

    def find(self, node: str, gpu: str) -> GpuDevice | None:
        """The device ``gpu`` (a UUID) is published as on ``node``, or None."""
        slices = all_pages(f"list ResourceSlices of node {node}", self.api.list_resource_slice, self.timeout_s,
                           field_selector=f"spec.nodeName={node}")
        for rs in slices:
            for device in rs.spec.devices or []:
                found = _uuid_of(device)
                if found is not None and found.lower() == gpu.lower():
                    return GpuDevice(rs.spec.driver, rs.spec.pool.name, device.name)
        return None

    def taint(self, node: str, gpu: str, device: GpuDevice, value: str, incident: str) -> bool:
        """Create the GPU's rule; False when it existed already."""
        body: dict[str, Any] = {
            "apiVersion": _GROUP_VERSION, "kind": "DeviceTaintRule",
            "metadata": {"name": rule_name(node, gpu), "labels": dict(MANAGED_BY),
                         "annotations": {"faultline.io/node": node, "faultline.io/gpu": gpu,
                                         "faultline.io/incident": incident}},
            "spec": {"deviceSelector": {"driver": device.driver, "pool": device.pool, "device": device.device},
                     "taint": {"key": TAINT_KEY, "value": value, "effect": "NoSchedule"}},
        }
        try:
            with api_call(f"create DeviceTaintRule {body['metadata']['name']}"):
                rule: Any = k8s.V1DeviceTaintRule.from_dict(body)
                self.api.create_device_taint_rule(rule, _request_timeout=self.timeout_s)
        except ApiFailure as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def rules(self, node: str | None = None, gpu: str | None = None) -> list[Any]:
        """faultline's rules (of ``node``, of ``gpu``)."""
        selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
        found = all_pages("list DeviceTaintRules", self.api.list_device_taint_rule, self.timeout_s,
                          label_selector=selector)
        out = []
        for rule in found:
            notes = rule.metadata.annotations or {}
            if (node is None or notes.get("faultline.io/node") == node) and (
                    gpu is None or str(notes.get("faultline.io/gpu", "")).lower() == gpu.lower()):
                out.append(rule)
        return out

    def untaint(self, node: str, gpu: str | None) -> list[str]:
        """Delete faultline's rules of ``gpu`` on ``node`` (every GPU of it when None); their names."""
        deleted = []
        for rule in self.rules(node, gpu):
            name = rule.metadata.name
            try:
                with api_call(f"delete DeviceTaintRule {name}"):
                    self.api.delete_device_taint_rule(name, _request_timeout=self.timeout_s)
            except ApiFailure as exc:
                if exc.status != 404:
                    raise
            deleted.append(name)
        return deleted
