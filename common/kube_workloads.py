"""Which training job a Kubernetes pod belongs to, and where in it: one mapping for both ends.

The job source (:mod:`producers.scheduler.kubernetes_pods`) names jobs and
ranks with it, and the executor (:mod:`sinks.executors.kubernetes`) finds the
pods a ``restart_job`` is about with it, so the job a command names is exactly
the job the events named. Works on the official client's model objects
(``V1Pod``: read by attribute, so any client version's models do); imports no
client.

**The workload** (what owns the pods and recreates them), first match wins:

=====================  ==============================================  ===============================
workload               recognised by                                   job name; rank order
=====================  ==============================================  ===============================
JobSet                 label ``jobset.sigs.k8s.io/jobset-name``         the JobSet; global job index,
                       (Kubeflow Trainer's TrainJobs run as one)       then completion index
LeaderWorkerSet group  labels ``leaderworkerset.sigs.k8s.io/name``      ``<lws>-<group>`` (the leader
                       and ``.../group-index``                          pod's name); worker index
Kubeflow training job  label ``training.kubeflow.org/job-name``        the job; master first, then
(PyTorchJob, ...)      (kind: the controller, or ``operator-name``)    the replica index
indexed batch Job      label ``batch.kubernetes.io/job-name``           the Job; completion index
                       (or ``job-name``)
another controller     the controlling ``ownerReference``               its name; pod name
a bare pod             nothing of the above                            the pod's name
=====================  ==============================================  ===============================

An explicit job label (``faultline.io/job`` by default) overrides the *name*
only: the workload stays what owns the pods, so a restart still goes through
the right controller. With ``qualify_namespace`` the job is
``<namespace>/<name>`` (unique cluster-wide); without it, two namespaces with
one job name are one job to the producer, and the executor refuses to restart
such a name (:func:`matching`).

**Ranks.** Pods of one job are ordered by the workload's index (the table);
each pod then takes as many consecutive global ranks as it holds GPUs (the
``torchrun --nproc-per-node=<gpus>`` layout the operators set up).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "COMPLETION_INDEX",
    "JOBSET_NAME",
    "JOB_LABEL",
    "KUBEFLOW_JOB",
    "LWS_NAME",
    "PodIdentity",
    "Workload",
    "WorkloadRules",
    "gpu_count",
    "identify",
    "matching",
    "order",
]

JOB_LABEL = "faultline.io/job"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
BATCH_JOB = ("batch.kubernetes.io/job-name", "job-name")
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
KUBEFLOW_JOB = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KUBEFLOW_OPERATOR = "training.kubeflow.org/operator-name"

_LAST = 1 << 30
# training-operator controllers by their operator-name label, for pods whose owner reference is gone
_KUBEFLOW_KINDS = {"pytorchjob-controller": "PyTorchJob", "tfjob-controller": "TFJob",
                   "xgboostjob-controller": "XGBoostJob", "paddlejob-controller": "PaddleJob",
                   "jaxjob-controller": "JAXJob", "mpijob-controller": "MPIJob"}


@dataclass(frozen=True)
class Workload:
    """What owns a job's pods: its kind, namespace, name (and the group, for a LeaderWorkerSet)."""

    kind: str  # "JobSet", "LeaderWorkerSet", "PyTorchJob" (or another Kubeflow kind), "Job", a controller kind, "Pod"
    namespace: str
    name: str
    group: str | None = None

    def __str__(self) -> str:
        group = f" group {self.group}" if self.group is not None else ""
        return f"{self.kind} {self.namespace}/{self.name}{group}"


@dataclass(frozen=True)
class PodIdentity:
    """One pod as a member of a job."""

    job: str
    workload: Workload
    order: tuple[Any, ...]  # sorts the job's pods into rank order
    node: str | None
    gpus: int


@dataclass(frozen=True)
class WorkloadRules:
    """How pods are read (see the module docstring)."""

    job_labels: Sequence[str] = (JOB_LABEL,)
    gpu_resource: str = "nvidia.com/gpu"
    qualify_namespace: bool = False


def _int(value: Any) -> int | None:
    return int(value) if value is not None and str(value).isdigit() else None


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def gpu_count(pod: Any, resource: str = "nvidia.com/gpu") -> int:
    """GPUs the pod's containers ask for (limits, else requests)."""
    total = 0
    for c in pod.spec.containers or [] if pod.spec else []:
        res = c.resources
        wanted = (res.limits or {}).get(resource) or (res.requests or {}).get(resource) if res else None
        total += _quantity(wanted) if wanted is not None else 0
    return total


def _controller(pod: Any) -> Any | None:
    return next((o for o in pod.metadata.owner_references or [] if getattr(o, "controller", False)), None)


def _workload(pod: Any) -> tuple[Workload, str, tuple[Any, ...]]:
    """The pod's workload, the job name it implies, and the pod's place in it."""
    meta = pod.metadata
    labels, annotations = meta.labels or {}, meta.annotations or {}
    namespace, name = str(meta.namespace or ""), str(meta.name or "")
    completion = _int(annotations.get(COMPLETION_INDEX) or labels.get(COMPLETION_INDEX))
    if labels.get(JOBSET_NAME):
        jobset = str(labels[JOBSET_NAME])
        global_index = _int(labels.get(JOBSET_GLOBAL_INDEX) or annotations.get(JOBSET_GLOBAL_INDEX))
        job_index = _int(labels.get(JOBSET_JOB_INDEX))
        place = (_LAST if global_index is None else global_index, str(labels.get(JOBSET_REPLICATED_JOB, "")),
                 _LAST if job_index is None else job_index, _LAST if completion is None else completion)
        return Workload("JobSet", namespace, jobset), jobset, place
    if labels.get(LWS_NAME) and labels.get(LWS_GROUP) is not None:
        lws, group = str(labels[LWS_NAME]), str(labels[LWS_GROUP])
        worker = _int(labels.get(LWS_WORKER))
        return Workload("LeaderWorkerSet", namespace, lws, group), f"{lws}-{group}", (
            _LAST if worker is None else worker,)
    owner = _controller(pod)
    if labels.get(KUBEFLOW_JOB):
        job = str(labels[KUBEFLOW_JOB])
        kind = owner.kind if owner is not None else _KUBEFLOW_KINDS.get(str(labels.get(KUBEFLOW_OPERATOR)), "PyTorchJob")
        master = str(labels.get(KUBEFLOW_REPLICA_TYPE, "")).lower() in ("master", "chief", "launcher")
        index = _int(labels.get(KUBEFLOW_REPLICA_INDEX))
        return Workload(str(kind), namespace, job), job, (0 if master else 1, _LAST if index is None else index)
    batch = next((str(labels[k]) for k in BATCH_JOB if labels.get(k)), None)
    if batch is not None:
        return Workload("Job", namespace, batch), batch, (_LAST if completion is None else completion,)
    if owner is not None:
        return Workload(str(owner.kind), namespace, str(owner.name)), str(owner.name), (_LAST,)
    return Workload("Pod", namespace, name), name, (_LAST,)


def identify(pod: Any, rules: WorkloadRules | None = None) -> PodIdentity:
    """The job ``pod`` belongs to and its place in it."""
    rules = rules or WorkloadRules()
    workload, job, place = _workload(pod)
    labels = pod.metadata.labels or {}
    explicit = next((str(labels[k]) for k in rules.job_labels if labels.get(k)), None)
    job = explicit or job
    if rules.qualify_namespace:
        job = f"{workload.namespace}/{job}"
    node = pod.spec.node_name if pod.spec else None
    return PodIdentity(job, workload, (*place, str(pod.metadata.name or "")), node,
                       gpu_count(pod, rules.gpu_resource))


def order(pods: Iterable[Any], rules: WorkloadRules | None = None) -> list[Any]:
    """``pods`` (of one job) in rank order."""
    return sorted(pods, key=lambda p: identify(p, rules).order)


def matching(job: str, pods: Iterable[Any], rules: WorkloadRules | None = None) -> dict[Workload, list[Any]]:
    """The pods of ``job`` among ``pods``, by workload (more than one: the name is ambiguous).

    ``job`` may be ``<namespace>/<name>`` whatever ``qualify_namespace`` says:
    object names and label values cannot hold a ``/``, so the split is exact.
    """
    rules = rules or WorkloadRules()
    namespace, _, name = job.rpartition("/") if "/" in job else ("", "", job)
    unqualified = WorkloadRules(tuple(rules.job_labels), rules.gpu_resource, qualify_namespace=False)
    out: dict[Workload, list[Any]] = {}
    for pod in pods:
        ident = identify(pod, unqualified)
        if ident.job == name and (not namespace or ident.workload.namespace == namespace):
            out.setdefault(ident.workload, []).append(pod)
    return out
