"""The Kubernetes backend: cordon, taint, evict and restart with the official ``kubernetes`` client.

What each command does:

* ``cordon_node`` — ``spec.unschedulable: true``, and the annotation
  ``faultline.io/cordoned-by: <incident>`` so a release only ever undoes our
  own cordon (a node a person cordoned is left as it is).
* ``quarantine_gpu`` — the taint ``faultline.io/quarantine=<gpu>:NoSchedule``
  and the GPU in the annotation ``faultline.io/quarantined-gpus``. The device
  plugin still advertises the card, so the taint keeps *new* pods off the whole
  node (taints are unique per key and effect: a second GPU of the node joins
  the annotation, the taint stays).
* ``drain_node`` — cordon, then evict (Eviction API, so PodDisruptionBudgets
  are honoured) every pod on the node except DaemonSet and static (mirror)
  pods and finished ones. Evictions refused with 429 are retried a bounded
  number of times; pods still protected then make the command fail, naming them.
* ``release_gpu`` — take the GPU out of the annotation and drop the taint with
  the last one; without a GPU, release the whole node: the taint, and our
  cordon (only if ``faultline.io/cordoned-by`` says it is ours).
* ``restart_job`` — delete the job's pods (label ``faultline.io/job=<job>``)
  so their controller recreates them. The pods' placement belongs to that
  controller, which the executor does not own, so excluded nodes are not put
  into pod affinities: every excluded node must already be fenced (cordoned or
  quarantine-tainted; the correlator fences before it restarts). If one is
  still schedulable, nothing is deleted and the command fails: a restart must
  never land on excluded hardware.

Node writes that depend on what was read (taints, annotations) carry the
node's ``resourceVersion``: a concurrent change makes the API answer 409 and
the write is redone on a fresh read (bounded).

RBAC — a ClusterRole bound to the executor's service account needs exactly:

=====================  ====================  ==========================================
resource               verbs                 for
=====================  ====================  ==========================================
``nodes``              get, list, patch      cordon, taint, release; fleet size
``pods``               list, delete          drain's pod listing; restart_job
``pods/eviction``      create                drain_node
=====================  ====================  ==========================================
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from sinks.executors.core import ExecutionError, excluded_nodes, require
from streams.decisions import Command

__all__ = [
    "KubernetesBackend",
    "SUPPORTED_TYPES",
    "QUARANTINE_TAINT",
    "QUARANTINED_GPUS",
    "CORDONED_BY",
    "JOB_LABEL",
]

SUPPORTED_TYPES: frozenset[str] = frozenset(
    {"cordon_node", "drain_node", "quarantine_gpu", "release_gpu", "restart_job"})
QUARANTINE_TAINT = "faultline.io/quarantine"
QUARANTINED_GPUS = "faultline.io/quarantined-gpus"
CORDONED_BY = "faultline.io/cordoned-by"
JOB_LABEL = "faultline.io/job"

_STRATEGIC_MERGE = "application/strategic-merge-patch+json"
_MIRROR_POD = "kubernetes.io/config.mirror"
_CONFLICT_RETRIES = 3


class KubernetesBackend:
    """Carries node and job commands out on a Kubernetes cluster."""

    name = "kubernetes"

    def __init__(
        self,
        api: k8s.CoreV1Api,
        *,
        job_label: str = JOB_LABEL,
        evict_attempts: int = 5,
        evict_backoff_s: float = 2.0,
        timeout_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api
        self.job_label = job_label
        self.evict_attempts = max(1, evict_attempts)
        self.evict_backoff_s = evict_backoff_s
        self.timeout_s = timeout_s
        self._sleep = sleep

    @classmethod
    def from_environment(cls, **options: Any) -> KubernetesBackend:
        """The in-cluster service account when running in a pod, else the local kubeconfig."""
        try:
            k8s_config.load_incluster_config()
        except k8s_config.ConfigException:
            k8s_config.load_kube_config()
        return cls(k8s.CoreV1Api(), **options)

    # --- Backend ------------------------------------------------------------------------

    def supports(self, cmd_type: str) -> bool:
        return cmd_type in SUPPORTED_TYPES

    def fleet_size(self) -> int | None:
        try:
            with _api("list nodes"):
                return len(self.api.list_node(_request_timeout=self.timeout_s).items)
        except ExecutionError:
            return None

    def knows_node(self, node: str) -> bool:
        """Whether the cluster lists a Node of this name (the executor acts on no other)."""
        with _api("list nodes"):
            items = self.api.list_node(_request_timeout=self.timeout_s).items
        return any(n.metadata is not None and n.metadata.name == node for n in items)

    def plan(self, cmd: Command) -> str:
        node, gpu, job = cmd.target.node, cmd.target.gpu, cmd.target.job
        if cmd.type == "cordon_node":
            return f"PATCH node {node}: spec.unschedulable=true"
        if cmd.type == "drain_node":
            return f"PATCH node {node}: spec.unschedulable=true; evict its pods (not DaemonSet/static pods)"
        if cmd.type == "quarantine_gpu":
            return f"PATCH node {node}: taint {QUARANTINE_TAINT}={_label_value(gpu or '')}:NoSchedule"
        if cmd.type == "release_gpu":
            return f"PATCH node {node}: release {gpu or 'every GPU'} from quarantine"
        excluded = ", ".join(excluded_nodes(cmd))
        return (f"DELETE the pods labelled {self.job_label}={job} (their controller recreates them)"
                + (f", once the excluded nodes {excluded} are seen fenced" if excluded else ""))

    def execute(self, cmd: Command) -> str:
        if cmd.type == "restart_job":
            return self._restart(require(cmd, "job"), excluded_nodes(cmd))
        node = require(cmd, "node")
        if cmd.type == "cordon_node":
            return self._cordon(node, cmd.incident)
        if cmd.type == "drain_node":
            return self._drain(node, cmd.incident)
        if cmd.type == "quarantine_gpu":
            return self._quarantine(node, require(cmd, "gpu"))
        if cmd.type == "release_gpu":
            return self._release(node, cmd.target.gpu)
        raise ExecutionError(f"unsupported: the kubernetes backend does not carry out {cmd.type}")

    # --- node commands ------------------------------------------------------------------

    def _cordon(self, node: str, incident: str) -> str:
        current = self._read_node(node)
        annotations = (current.metadata.annotations or {}) if current.metadata else {}
        if current.spec and current.spec.unschedulable and CORDONED_BY not in annotations:
            return f"node {node} was already cordoned (not by faultline): left as it is"
        self._patch_node(node, {"metadata": {"annotations": {CORDONED_BY: incident}},
                                "spec": {"unschedulable": True}})
        return f"cordoned node {node}"

    def _quarantine(self, node: str, gpu: str) -> str:
        def change(current: k8s.V1Node) -> dict[str, Any] | None:
            gpus = _quarantined(current)
            taints = self._taints(current)
            if gpu in gpus and any(t.get("key") == QUARANTINE_TAINT for t in taints):
                return None
            if not any(t.get("key") == QUARANTINE_TAINT for t in taints):
                taints.append({"key": QUARANTINE_TAINT, "value": _label_value(gpu), "effect": "NoSchedule"})
            return {"metadata": {"annotations": {QUARANTINED_GPUS: ",".join(sorted(gpus | {gpu}))}},
                    "spec": {"taints": taints}}

        changed = self._update_node(node, change)
        return f"quarantined GPU {gpu} on node {node} (taint {QUARANTINE_TAINT}:NoSchedule)" + (
            "" if changed else ", as it already was")

    def _release(self, node: str, gpu: str | None) -> str:
        def change(current: k8s.V1Node) -> dict[str, Any] | None:
            gpus = _quarantined(current)
            left = gpus - {gpu} if gpu else set()
            ours = CORDONED_BY in ((current.metadata.annotations or {}) if current.metadata else {})
            patch: dict[str, Any] = {"metadata": {"annotations": {QUARANTINED_GPUS: ",".join(sorted(left)) or None}}}
            if not left:
                patch["spec"] = {"taints": [t for t in self._taints(current) if t.get("key") != QUARANTINE_TAINT]}
            if gpu is None and ours:
                patch["metadata"]["annotations"][CORDONED_BY] = None
                patch["spec"]["unschedulable"] = False
            return patch if (left != gpus or (gpu is None and ours)) else None

        changed = self._update_node(node, change)
        what = f"GPU {gpu}" if gpu else "node"
        return f"released {what} on {node}" if changed else f"nothing of faultline's to release on {node} ({what})"

    def _drain(self, node: str, incident: str) -> str:
        cordoned = self._cordon(node, incident)
        with _api(f"list pods on {node}"):
            pods = self.api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                                        _request_timeout=self.timeout_s).items
        movable = [p for p in pods if _evictable(p)]
        waiting = movable
        for attempt in range(self.evict_attempts):
            waiting = [p for p in waiting if not self._evict(p)]
            if not waiting:
                break
            if attempt + 1 < self.evict_attempts:
                self._sleep(self.evict_backoff_s)
        if waiting:
            names = ", ".join(_pod_name(p) for p in waiting)
            raise ExecutionError(f"{cordoned}; eviction still refused after {self.evict_attempts} tries "
                                 f"(PodDisruptionBudget) for: {names}")
        return f"{cordoned}; evicted {len(movable)} pods ({len(pods) - len(movable)} DaemonSet/static/finished left)"

    def _evict(self, pod: k8s.V1Pod) -> bool:
        """True when the pod is evicted (or gone), False when a disruption budget refuses it for now."""
        namespace, name = _ident(pod)
        body = k8s.V1Eviction(api_version="policy/v1", kind="Eviction",
                              metadata=k8s.V1ObjectMeta(name=name, namespace=namespace))
        try:
            with _api(f"evict pod {namespace}/{name}"):
                self.api.create_namespaced_pod_eviction(name, namespace, body, _request_timeout=self.timeout_s)
        except _ApiFailure as exc:
            if exc.status == 429:
                return False
            if exc.status != 404:
                raise
        return True

    # --- restart --------------------------------------------------------------------------

    def _restart(self, job: str, excluded: list[str]) -> str:
        schedulable = [n for n in excluded if not self._fenced(n)]
        if schedulable:
            raise ExecutionError(f"excluded nodes still schedulable: {', '.join(schedulable)}; fence them first "
                                 "(cordon_node / quarantine_gpu): the restart must not land there")
        with _api(f"list pods of job {job}"):
            pods = self.api.list_pod_for_all_namespaces(label_selector=f"{self.job_label}={job}",
                                                        _request_timeout=self.timeout_s).items
        if not pods:
            raise ExecutionError(f"no pods labelled {self.job_label}={job}: nothing to restart")
        for pod in pods:
            namespace, name = _ident(pod)
            try:
                with _api(f"delete pod {namespace}/{name}"):
                    self.api.delete_namespaced_pod(name, namespace, _request_timeout=self.timeout_s)
            except _ApiFailure as exc:
                if exc.status != 404:
                    raise
        fenced = f"; excluded nodes fenced: {', '.join(excluded)}" if excluded else ""
        return f"deleted {len(pods)} pods of job {job} for their controller to recreate{fenced}"

    def _fenced(self, node: str) -> bool:
        """Whether nothing new can land on ``node``: cordoned, quarantine-tainted, or gone."""
        try:
            current = self._read_node(node)
        except _ApiFailure as exc:
            if exc.status == 404:
                return True
            raise
        if current.spec and current.spec.unschedulable:
            return True
        return any(t.get("key") == QUARANTINE_TAINT for t in self._taints(current))

    # --- node reads and writes --------------------------------------------------------

    def _read_node(self, node: str) -> k8s.V1Node:
        with _api(f"read node {node}"):
            return self.api.read_node(node, _request_timeout=self.timeout_s)

    def _patch_node(self, node: str, patch: dict[str, Any]) -> None:
        with _api(f"patch node {node}"):
            self.api.patch_node(node, patch, _content_type=_STRATEGIC_MERGE, _request_timeout=self.timeout_s)

    def _update_node(self, node: str, change: Callable[[k8s.V1Node], dict[str, Any] | None]) -> bool:
        """Read, compute a patch, write it guarded by resourceVersion; redo on conflict. False: no change."""
        conflict: _ApiFailure | None = None
        for _ in range(_CONFLICT_RETRIES):
            current = self._read_node(node)
            patch = change(current)
            if patch is None:
                return False
            version = current.metadata.resource_version if current.metadata else None
            if version:
                patch.setdefault("metadata", {})["resourceVersion"] = version
            try:
                self._patch_node(node, patch)
                return True
            except _ApiFailure as exc:
                if exc.status != 409:
                    raise
                conflict = exc
        raise ExecutionError(f"patch node {node}: changed by someone else {_CONFLICT_RETRIES} times in a row; "
                             "gave up") from conflict

    def _taints(self, node: k8s.V1Node) -> list[dict[str, Any]]:
        """The node's taints as API JSON (a taint list is replaced whole by a patch)."""
        taints = node.spec.taints if node.spec and node.spec.taints else []
        return [self.api.api_client.sanitize_for_serialization(t) for t in taints]


class _ApiFailure(ExecutionError):
    """The API answered with an error status (kept, for the callers that tolerate some)."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


@contextmanager
def _api(what: str) -> Iterator[None]:
    """API and transport errors as :class:`ExecutionError` naming the operation."""
    try:
        yield
    except ApiException as exc:
        raise _ApiFailure(f"{what}: {_describe(exc)}", exc.status) from exc
    except Urllib3Error as exc:
        raise ExecutionError(f"{what}: {type(exc).__name__}: {exc}") from exc


def _describe(exc: ApiException) -> str:
    """``HTTP <status> <reason>: <the API's message>``."""
    message = ""
    if exc.body:
        match = re.search(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"', str(exc.body))
        message = match.group(1) if match else str(exc.body)[:200]
    return f"HTTP {exc.status} {exc.reason or ''}".rstrip() + (f": {message}" if message else "")


def _quarantined(node: k8s.V1Node) -> set[str]:
    annotations = (node.metadata.annotations or {}) if node.metadata else {}
    return {g for g in annotations.get(QUARANTINED_GPUS, "").split(",") if g}


def _evictable(pod: k8s.V1Pod) -> bool:
    """Not a DaemonSet's pod, not a static (mirror) pod, not finished."""
    meta = pod.metadata
    if meta is None or meta.name is None or meta.namespace is None:
        return False
    if any(ref.kind == "DaemonSet" for ref in meta.owner_references or []):
        return False
    if _MIRROR_POD in (meta.annotations or {}):
        return False
    return not (pod.status and pod.status.phase in ("Succeeded", "Failed"))


def _ident(pod: k8s.V1Pod) -> tuple[str, str]:
    """(namespace, name) of a listed pod."""
    meta = pod.metadata
    if meta is None or not meta.name or not meta.namespace:
        raise ExecutionError("the API listed a pod without a name or namespace")
    return meta.namespace, meta.name


def _pod_name(pod: k8s.V1Pod) -> str:
    meta = pod.metadata
    return f"{meta.namespace}/{meta.name}" if meta else "?"


def _label_value(text: str) -> str:
    """``text`` as a valid label/taint value: [A-Za-z0-9-_.], at most 63, alphanumeric at both ends."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63]
    return value.strip("-_.")
