"""The Kubernetes backend: cordon, taint, evict and restart with the official ``kubernetes`` client.

What each command does:

* ``cordon_node`` — ``spec.unschedulable: true``, and the annotation
  ``faultline.io/cordoned-by: <incident>`` so a release only ever undoes our
  own cordon (a node a person cordoned is left as it is).
* ``quarantine_gpu`` -- per GPU where the cluster can: where the API server
  serves ``DeviceTaintRule`` and a DRA driver publishes the GPU in a
  ResourceSlice of the node, a rule taints that device only
  (:mod:`~sinks.executors.kubernetes_dra`) and the node stays schedulable.
  Elsewhere (device-plugin GPUs, older clusters) the taint
  ``faultline.io/quarantine=<gpu>:NoSchedule`` and the GPU in the annotation
  ``faultline.io/quarantined-gpus``: the device plugin still advertises the
  card, so the taint keeps *new* pods off the whole node (taints are unique per
  key and effect: a second GPU of the node joins the annotation, the taint
  stays). The result says which of the two was applied, and why.
* ``drain_node`` -- cordon, then evict (Eviction API, so PodDisruptionBudgets
  are honoured) every pod on the node except DaemonSet and static (mirror)
  pods and finished ones. Evictions refused with 429 are retried a bounded
  number of times; pods still protected then make the command fail, naming them.
* ``release_gpu`` -- undo exactly what the quarantine applied: delete the GPU's
  DeviceTaintRule, or take the GPU out of the annotation and drop the taint
  with the last one; without a GPU, release the whole node: its rules, the
  taint, and our cordon (only if ``faultline.io/cordoned-by`` says it is ours).
* ``restart_job`` -- through the job's workload
  (:mod:`~sinks.executors.kubernetes_restart`: the training operator, the
  JobSet or Job controller, a LeaderWorkerSet), found with the same mapping
  the job source named it with; refused, with the reason, for a workload
  nothing would recreate or a name that is ambiguous. The pods' placement
  belongs to that controller, which the executor does not own, so exclusions
  are not put into pod affinities: every excluded node must already be fenced
  (cordoned or quarantine-tainted) and every excluded GPU quarantined (its
  rule, or its node's taint); the correlator fences before it restarts. If
  one is not, nothing is deleted and the command fails: a restart must never
  land on excluded hardware.
* ``checkpoint_now`` -- the annotation ``faultline.io/checkpoint-now: <command id>`` on each running pod
  of the job, which the trainer reads through the downward API
  (:mod:`~sinks.executors.kubernetes_checkpoint`); no running pod is an error result.

Node writes that depend on what was read (taints, annotations) carry the
node's ``resourceVersion``: a concurrent change makes the API answer 409 and
the write is redone on a fresh read (bounded).

RBAC -- a ClusterRole bound to the executor's service account needs exactly
(``deploy/helm/faultline/templates/executor-rbac.yaml``):

==========================================  ====================  ===================================
resource                                    verbs                 for
==========================================  ====================  ===================================
``nodes``                                   get, list, patch      cordon, taint, release; fleet size
``pods``                                    list, delete, patch   drain's listing; restart; checkpoint
``pods/eviction``                           create                drain_node
``jobs`` (batch)                            get, list, delete     restart of Jobs and JobSets
``pytorchjobs`` ... (kubeflow.org)          get                   restart: is the job still live?
``jobsets``, ``leaderworkersets``           get                   likewise
``resourceslices`` (resource.k8s.io)        list                  which device a GPU is
``devicetaintrules`` (resource.k8s.io)      list, create, delete  per-GPU quarantine and release
``nodes/status``                            patch                 the ``FaultlineFenced`` condition
``events``                                  create                an Event per fence and release
==========================================  ====================  ===================================

Every fence and release is also shown where kubectl looks: a node condition ``FaultlineFenced`` and an
Event on the node (:mod:`sinks.executors.kubernetes_marks`; best effort, said in the result).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from common.kube_workloads import JOB_LABEL, WorkloadRules
from sinks.executors.core import ExecutionError, excluded_gpus, excluded_nodes, require
from sinks.executors.kubernetes_api import ApiFailure as _ApiFailure
from sinks.executors.kubernetes_api import api_call as _api
from sinks.executors.kubernetes_api import evictable as _evictable
from sinks.executors.kubernetes_api import label_value as _label_value
from sinks.executors.kubernetes_api import pod_ident as _ident
from sinks.executors.kubernetes_api import pod_name as _pod_name
from sinks.executors.kubernetes_checkpoint import CheckpointAsk
from sinks.executors.kubernetes_dra import DeviceFence, served
from sinks.executors.kubernetes_marks import FenceMarks
from sinks.executors.kubernetes_restart import JobRestarter
from streams.decisions import Command

__all__ = [
    "KubernetesBackend",
    "SUPPORTED_TYPES",
    "QUARANTINE_TAINT",
    "QUARANTINED_GPUS",
    "CORDONED_BY",
    "JOB_LABEL",
]

log = logging.getLogger(__name__)

SUPPORTED_TYPES: frozenset[str] = frozenset(
    {"cordon_node", "drain_node", "quarantine_gpu", "release_gpu", "restart_job", "checkpoint_now"})
QUARANTINE_TAINT = "faultline.io/quarantine"
QUARANTINED_GPUS = "faultline.io/quarantined-gpus"
CORDONED_BY = "faultline.io/cordoned-by"

_STRATEGIC_MERGE = "application/strategic-merge-patch+json"
_CONFLICT_RETRIES = 3


class KubernetesBackend:
    """Carries node and job commands out on a Kubernetes cluster."""

    name = "kubernetes"

    def __init__(
        self,
        api: k8s.CoreV1Api,
        *,
        job_label: str | None = None,
        rules: WorkloadRules | None = None,
        device_taints: bool = False,
        evict_attempts: int = 5,
        evict_backoff_s: float = 2.0,
        timeout_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        marks: bool = True,
    ) -> None:
        self.api = api
        # the job source's mapping (common/kube_workloads.py), with the same explicit job labels
        self.rules = rules or WorkloadRules(job_labels=(job_label or JOB_LABEL,))
        # per-GPU fencing: only where the API server serves DeviceTaintRule (from_environment asks it)
        self.devices = DeviceFence(api.api_client, timeout_s) if device_taints else None
        # the condition and events kubectl shows (kubernetes_marks.py); off only where a test pins a fence's requests
        self.marks = FenceMarks(api, timeout_s) if marks else None
        self.restarter = JobRestarter(api, self.rules, timeout_s)
        self.checkpoints = CheckpointAsk(api, self.restarter, timeout_s)
        # the job commands, by type (the node commands below share their node's checks and marks)
        self._jobs: dict[str, Callable[[Command], str]] = {"restart_job": self._restart,
                                                           "checkpoint_now": self.checkpoints.request}
        self.evict_attempts = max(1, evict_attempts)
        self.evict_backoff_s = evict_backoff_s
        self.timeout_s = timeout_s
        self._sleep = sleep

    @classmethod
    def from_environment(cls, **options: Any) -> KubernetesBackend:
        """The in-cluster service account when running in a pod, else the local kubeconfig; per-GPU
        fencing when the API server serves DeviceTaintRule."""
        try:
            k8s_config.load_incluster_config()
        except k8s_config.ConfigException:
            k8s_config.load_kube_config()
        api = k8s.CoreV1Api()
        if "device_taints" not in options:
            options["device_taints"] = served(api.api_client)
            log.info("kubernetes executor: %s", "DeviceTaintRule served: GPUs published by a DRA driver are "
                     "quarantined one by one" if options["device_taints"] else
                     "no DeviceTaintRule served: a quarantine taints the GPU's whole node")
        return cls(api, **options)

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
            per_gpu = "a DeviceTaintRule on that GPU where a DRA driver publishes it, else " if self.devices else ""
            return f"{per_gpu}PATCH node {node}: taint {QUARANTINE_TAINT}={_label_value(gpu or '')}:NoSchedule"
        if cmd.type == "release_gpu":
            return f"release {gpu or 'every GPU'} of node {node} from quarantine (what the quarantine applied)"
        if cmd.type == "checkpoint_now":
            return self.checkpoints.plan(cmd)
        excluded = ", ".join(excluded_nodes(cmd))
        return (f"recreate the pods of job {job} through its workload's controller"
                + (f", once the excluded nodes {excluded} are seen fenced" if excluded else ""))

    def execute(self, cmd: Command) -> str:
        if cmd.type in self._jobs:
            return self._jobs[cmd.type](cmd)
        node = require(cmd, "node")
        if cmd.type == "release_gpu":
            done = self._release(node, cmd.target.gpu)
            if self.marks is None:
                return done
            still = self._fenced(node) or bool(self.devices is not None and self.devices.rules(node))
            return done + self.marks.released(node, still, f"{done} (incident {cmd.incident})")
        fences: dict[str, tuple[str, Callable[[], str]]] = {  # each fence, and how kubectl shows it
            "cordon_node": ("Cordoned", lambda: self._cordon(node, cmd.incident)),
            "drain_node": ("Drained", lambda: self._drain(node, cmd.incident)),
            "quarantine_gpu": ("Quarantined", lambda: self._quarantine(node, require(cmd, "gpu"), cmd.incident))}
        if cmd.type not in fences:
            raise ExecutionError(f"unsupported: the kubernetes backend does not carry out {cmd.type}")
        reason, fence = fences[cmd.type]
        done = fence()
        return done + (self.marks.fenced(node, reason, f"{done} (incident {cmd.incident})") if self.marks else "")

    # --- node commands ------------------------------------------------------------------

    def _cordon(self, node: str, incident: str) -> str:
        current = self._read_node(node)
        annotations = (current.metadata.annotations or {}) if current.metadata else {}
        if current.spec and current.spec.unschedulable and CORDONED_BY not in annotations:
            return f"node {node} was already cordoned (not by faultline): left as it is"
        self._patch_node(node, {"metadata": {"annotations": {CORDONED_BY: incident}},
                                "spec": {"unschedulable": True}})
        return f"cordoned node {node}"

    def _quarantine(self, node: str, gpu: str, incident: str) -> str:
        if self.devices is None:
            why = "the API server serves no DeviceTaintRule"
        else:
            device = self.devices.find(node, gpu)
            if device is not None:
                made = self.devices.taint(node, gpu, device, _label_value(gpu), incident)
                return (f"quarantined GPU {gpu} on node {node} (DeviceTaintRule, device {device}: that GPU only; "
                        "the node stays schedulable)" + ("" if made else ", as it already was"))
            why = "no DRA driver publishes this GPU on the node (device-plugin GPUs)"

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
        return f"quarantined GPU {gpu} on node {node} (taint {QUARANTINE_TAINT}:NoSchedule" + (
            "" if changed else ", as it already was") + f"; the whole node: {why})"

    def _release(self, node: str, gpu: str | None) -> str:
        rules = self.devices.untaint(node, gpu) if self.devices is not None else []

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
        deleted = f" (DeviceTaintRule {', '.join(rules)} deleted)" if rules else ""
        if changed or rules:
            return f"released {what} on {node}{deleted}"
        return f"nothing of faultline's to release on {node} ({what})"

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

    def _restart(self, cmd: Command) -> str:
        job, excluded, gpus = require(cmd, "job"), excluded_nodes(cmd), excluded_gpus(cmd)
        schedulable = [n for n in excluded if not self._fenced(n)]
        if schedulable:
            raise ExecutionError(f"excluded nodes still schedulable: {', '.join(schedulable)}; fence them first "
                                 "(cordon_node / quarantine_gpu): the restart must not land there")
        loose = self._unfenced_gpus(gpus, set(excluded))
        if loose:
            raise ExecutionError(f"excluded GPUs not quarantined: {', '.join(loose)}; quarantine them first "
                                 "(quarantine_gpu): the restart must not land there")
        _, done = self.restarter.restart(job)
        fenced = f"; excluded nodes fenced: {', '.join(excluded)}" if excluded else ""
        return f"{done}{fenced}"

    def _unfenced_gpus(self, gpus: list[str], excluded_nodes: set[str]) -> list[str]:
        """The excluded GPUs that nothing fences: no rule of theirs, no quarantine taint on their node."""
        if not gpus:
            return []
        ruled = {str((r.metadata.annotations or {}).get("faultline.io/gpu", "")).lower()
                 for r in (self.devices.rules() if self.devices is not None else [])}
        with _api("list nodes"):
            nodes = self.api.list_node(_request_timeout=self.timeout_s).items
        tainted = set()
        for n in nodes:
            name = n.metadata.name if n.metadata else None
            if name in excluded_nodes or (n.spec and n.spec.unschedulable) or any(
                    t.get("key") == QUARANTINE_TAINT for t in self._taints(n)):
                tainted |= {g.lower() for g in _quarantined(n)}
        return [g for g in gpus if g.lower() not in ruled and g.lower() not in tainted]

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


def _quarantined(node: k8s.V1Node) -> set[str]:
    annotations = (node.metadata.annotations or {}) if node.metadata else {}
    return {g for g in annotations.get(QUARANTINED_GPUS, "").split(",") if g}

