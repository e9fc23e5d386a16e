"""Kubernetes pods that use GPUs, grouped into jobs, and nodes, as tracker views.

Works on the official client's model objects (``V1Pod``, ``V1Node``: read by
attribute, so any client version's models do).

**Job and ranks.** :mod:`common.kube_workloads` names each pod's job and
orders a job's pods (Kubeflow training jobs, JobSets, LeaderWorkerSet groups,
indexed Jobs, an explicit ``faultline.io/job`` label) -- the same mapping the
executor uses to find a job's pods again. Only pods whose containers ask for
``gpu_resource`` (``nvidia.com/gpu``), or whose ResourceClaims were allocated
GPUs (DRA, :mod:`producers.scheduler.dra_gpus`), are looked at; in rank order,
each pod takes as many consecutive ranks as it has GPUs.

**GPUs.** Which GPUs of the node a pod holds comes, first, from
``assigned`` (the node agents' view of the kubelet's PodResources API,
:mod:`producers.scheduler.agent_gpus`, or the DRA allocation), else from ``NVIDIA_VISIBLE_DEVICES``
in its containers' env, else from one of ``gpu_annotations`` (default
``faultline.io/gpus``), either as indices (``0,1``) or as UUIDs (``GPU-...``),
which ``gpu_uuids`` (node -> UUIDs in index order, e.g. from the inventory)
turns into indices. Unknown GPUs are left out of ``gpus`` (the ranks stay);
known UUIDs also travel as ``gpu_uuids``.

**State.** Any pod ``Failed``: failed; any pod being deleted: cancelled; all
``Succeeded``: finished; all ``Running`` or ``Succeeded`` with one running:
running; anything else (pending, scheduling): no verdict. A new run is a new
set of pods or a container restart (the run is named by pod UIDs and restart
counts). Started at the latest container start; ended at the latest
container finish. The owner is the ``faultline.io/owner`` label, else the
namespace; the size is fixed (``elastic`` min = max = the GPU count).

**Node.** The ``Ready`` condition: ``True`` ready, ``False``/``Unknown`` not
ready (with its reason and message); no condition, no verdict.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from common.kube_workloads import JOB_LABEL, WorkloadRules, gpu_count, identify
from producers.scheduler.tracking import JobState, JobView, NodeView

__all__ = ["AssignedGpus", "PodRules", "gpus_of", "jobs_from_pods", "nodes_from_objects", "pod_gpu_count",
           "unplaced"]

OWNER_LABEL = "faultline.io/owner"

AssignedGpus = Callable[[Any], Sequence[tuple[str, int | None]] | None]
"""A pod -> the GPUs the kubelet assigned it, as (UUID, index on the node or None); None: not known."""


@dataclass(frozen=True)
class PodRules:
    """How pods are read: see the module docstring."""

    gpu_resource: str = "nvidia.com/gpu"
    job_labels: Sequence[str] = (JOB_LABEL,)
    gpu_annotations: Sequence[str] = ("faultline.io/gpus",)
    gpu_uuids: Mapping[str, Sequence[str]] = field(default_factory=dict)
    max_restarts: int | None = 3
    qualify_namespace: bool = False
    assigned: AssignedGpus | None = None

    @property
    def workloads(self) -> WorkloadRules:
        return WorkloadRules(tuple(self.job_labels), self.gpu_resource, self.qualify_namespace)


def pod_gpu_count(pod: Any, resource: str = "nvidia.com/gpu") -> int:
    """GPUs the pod's containers ask for (limits, else requests)."""
    return gpu_count(pod, resource)


def gpus_of(pod: Any, rules: PodRules) -> int:
    """The pod's GPUs: its device-plugin request, else (DRA) the devices allocated to its claims."""
    asked = gpu_count(pod, rules.gpu_resource)
    if asked or rules.assigned is None or not (pod.spec and pod.spec.resource_claims):
        return asked
    return len(rules.assigned(pod) or [])


def _visible_devices(pod: Any, rules: PodRules) -> list[str]:
    for c in pod.spec.containers or []:
        for env in c.env or []:
            if env.name == "NVIDIA_VISIBLE_DEVICES" and env.value and env.value not in ("all", "none", "void"):
                return [v.strip() for v in env.value.split(",") if v.strip()]
    annotations = pod.metadata.annotations or {}
    for key in rules.gpu_annotations:
        if annotations.get(key):
            return [v.strip() for v in str(annotations[key]).split(",") if v.strip()]
    return []


def _gpus(pod: Any, rules: PodRules) -> tuple[list[int], list[str]]:
    """The pod's GPU indices on its node (those that are known) and UUIDs (if named so)."""
    assigned = rules.assigned(pod) if rules.assigned is not None else None
    if assigned:
        order = list(rules.gpu_uuids.get(pod.spec.node_name or "", []))
        indices = [i if i is not None else (order.index(u) if u in order else None) for u, i in assigned]
        return [i for i in indices if i is not None], [u for u, _ in assigned]
    devices = _visible_devices(pod, rules)
    if all(d.isdigit() for d in devices):
        return [int(d) for d in devices], []
    order = list(rules.gpu_uuids.get(pod.spec.node_name or "", []))
    return [order.index(d) for d in devices if d in order], devices


def _container_times(pod: Any, state: str, attr: str) -> list[datetime]:
    out = []
    for cs in (pod.status.container_statuses or []) if pod.status else []:
        inner = getattr(cs.state, state, None) if cs.state else None
        when = getattr(inner, attr, None) if inner else None
        if when is not None:
            out.append(when)
    return out


def _state(pods: Sequence[Any]) -> JobState:
    phases = [(p.status.phase if p.status else None) or "Unknown" for p in pods]
    if "Failed" in phases:
        return "failed"
    if any(p.metadata.deletion_timestamp for p in pods):
        return "cancelled"
    if all(ph == "Succeeded" for ph in phases):
        return "finished"
    if all(ph in ("Running", "Succeeded") for ph in phases) and "Running" in phases:
        return "running"
    return "other"


def _run(pods: Sequence[Any]) -> str:
    parts = sorted(
        f"{p.metadata.uid}:{sum(cs.restart_count or 0 for cs in (p.status.container_statuses or []))}"
        for p in pods
        if p.status
    )
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _details(job: str, pods: Sequence[Any], rules: PodRules) -> dict[str, Any]:
    per_node: dict[str, dict[str, list[Any]]] = {}
    rank = 0
    owner = None
    for pod in pods:
        count = gpus_of(pod, rules)
        indices, uuids = _gpus(pod, rules)
        entry = per_node.setdefault(pod.spec.node_name or "", {"gpus": [], "ranks": [], "gpu_uuids": []})
        entry["gpus"].extend(indices)
        entry["ranks"].extend(range(rank, rank + count))
        entry["gpu_uuids"].extend(uuids)
        rank += count
        owner = owner or (pod.metadata.labels or {}).get(OWNER_LABEL) or pod.metadata.namespace
    allocation = [
        {"node": node, "gpus": e["gpus"], "ranks": e["ranks"], **({"gpu_uuids": e["gpu_uuids"]} if e["gpu_uuids"] else {})}
        for node, e in per_node.items()
    ]
    return {
        "allocation": allocation,
        "world_size": rank,
        "elastic": {"min_gpus": rank, "max_gpus": rank},
        "owner": owner,
        "max_restarts": rules.max_restarts,
    }


def jobs_from_pods(pods: Iterable[Any], rules: PodRules) -> list[JobView]:
    """One view per job of the GPU pods among ``pods``."""
    groups: dict[str, list[tuple[tuple[Any, ...], Any]]] = {}
    workloads = rules.workloads
    for pod in pods:
        ident = identify(pod, workloads)
        if ident.gpus > 0 or gpus_of(pod, rules) > 0:
            groups.setdefault(ident.job, []).append((ident.order, pod))
    views = []
    for job, members in groups.items():
        group = [pod for _, pod in sorted(members, key=lambda m: m[0])]
        started = [t for p in group for t in _container_times(p, "running", "started_at")]
        started += [p.status.start_time for p in group if not started and p.status and p.status.start_time]
        ended = [t for p in group for t in _container_times(p, "terminated", "finished_at")]
        views.append(JobView(job=job, state=_state(group), run=_run(group), started_at=max(started, default=None),
                             ended_at=max(ended, default=None), details=_details(job, group, rules)))
    return views


def unplaced(pods: Iterable[Any], rules: PodRules) -> set[str]:
    """Jobs with a running GPU pod whose GPUs ``rules.assigned`` does not know (yet)."""
    if rules.assigned is None:
        return set()
    workloads = rules.workloads
    out = set()
    for pod in pods:
        ident = identify(pod, workloads)
        if ident.gpus and pod.status and pod.status.phase == "Running" and not rules.assigned(pod):
            out.add(ident.job)
    return out


def nodes_from_objects(nodes: Iterable[Any]) -> list[NodeView]:
    """Each node's readiness from its ``Ready`` condition."""
    out = []
    for node in nodes:
        ready = next((c for c in (node.status.conditions or []) if c.type == "Ready"), None) if node.status else None
        if ready is None:
            out.append(NodeView(node.metadata.name, None))
            continue
        is_ready = ready.status == "True"
        reason = ": ".join(x for x in (ready.reason, ready.message) if x) or None
        out.append(NodeView(node.metadata.name, is_ready, None if is_ready else reason))
    return out
