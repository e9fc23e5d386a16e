"""``restart_job`` on Kubernetes: find the job's pods the way the job source named them, and have
their controller recreate them, or refuse.

**Which pods.** :mod:`common.kube_workloads` is the one mapping from pod to job
(the job source named the job with it). The pods are looked up by label --
the explicit job label first (a person's word: when it finds pods, that is
the job), else the workloads' own labels (Kubeflow, JobSet, batch Job,
LeaderWorkerSet) -- and, only when no label finds any, by listing every pod
in scope; in each case the mapping decides which pods belong. A job name
that matches the pods of more than one workload (one name in two namespaces)
is refused: the restart must never touch another job's pods. A name may be
``<namespace>/<name>``.

**What restarts each workload** (the workload object is read first; one that
is gone, finished, failed or suspended is refused, since nothing would
recreate its pods):

=================================  ===========================================================
workload                           what the executor does
=================================  ===========================================================
PyTorchJob and the other           delete the job's pods; the training operator recreates
Kubeflow training kinds            every replica it misses, from the same template
JobSet (and TrainJobs on one)      delete the JobSet's child Jobs (foreground: their pods go
                                   first); the JobSet controller recreates every child Job it
                                   misses. Deleting only pods would count as failures against
                                   the child Jobs' backoff limits and may fail the JobSet
indexed (or plain) batch Job       delete its pods; the Job controller recreates each index
                                   (each counts against the Job's ``backoffLimit``)
LeaderWorkerSet group              delete the group's pods, leader first; the group is
                                   recreated whole
ReplicaSet / StatefulSet pods      delete them; their controller recreates them
bare pods, other controllers       refused: nothing known recreates them
=================================  ===========================================================

Every delete names the object's UID as a precondition, so a pod or Job
recreated under the same name between the listing and the delete is never
deleted in its place; pods already terminating are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client as k8s

from common.kube_workloads import (
    BATCH_JOB,
    JOBSET_NAME,
    KUBEFLOW_JOB,
    LWS_GROUP,
    LWS_NAME,
    LWS_WORKER,
    Workload,
    WorkloadRules,
    matching,
)
from sinks.executors.core import ExecutionError
from sinks.executors.kubernetes_api import ApiFailure, all_pages, api_call

__all__ = ["KUBEFLOW_KINDS", "JobRestarter"]

KUBEFLOW_KINDS = frozenset({"PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "MXJob"})
_RECREATING_CONTROLLERS = frozenset({"ReplicaSet", "StatefulSet"})
_CR = {  # kind -> (group, version, plural) of the objects read before a restart
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
    **{kind: ("kubeflow.org", "v1", kind.lower() + "s") for kind in KUBEFLOW_KINDS},
}
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)")
_TERMINAL = {"Succeeded", "Failed", "Complete", "Completed", "FailureTarget", "SuccessCriteriaMet"}


def _condition(obj: dict[str, Any]) -> str | None:
    """The first terminal condition that holds on a workload object (a dict), or None."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") in _TERMINAL and str(c.get("status")) == "True":
            return str(c["type"])
    return None


def _suspended(obj: dict[str, Any]) -> bool:
    spec = obj.get("spec") or {}
    return bool(spec.get("suspend") or (spec.get("runPolicy") or {}).get("suspend"))


class JobRestarter:
    """Restarts one job through its workload's controller (see the module docstring)."""

    def __init__(self, api: k8s.CoreV1Api, rules: WorkloadRules, timeout_s: float = 30.0) -> None:
        self.core = api
        self.batch = k8s.BatchV1Api(api.api_client)
        self.custom = k8s.CustomObjectsApi(api.api_client)
        self.rules = rules
        self.timeout_s = timeout_s

    # --- which pods -----------------------------------------------------------------

    def _list(self, namespace: str, selector: str | None) -> list[Any]:
        what = f"list pods{f' labelled {selector}' if selector else ''}{f' in {namespace}' if namespace else ''}"
        kwargs: dict[str, Any] = {"label_selector": selector} if selector else {}
        if selector is None:  # the full listing: paged
            call: Callable[..., Any] = self.core.list_namespaced_pod if namespace else \
                self.core.list_pod_for_all_namespaces
            scope: dict[str, Any] = {"namespace": namespace} if namespace else {}
            return all_pages(what, call, self.timeout_s, **scope)
        with api_call(what):
            if namespace:
                return list(self.core.list_namespaced_pod(namespace, _request_timeout=self.timeout_s,
                                                          **kwargs).items)
            return list(self.core.list_pod_for_all_namespaces(_request_timeout=self.timeout_s, **kwargs).items)

    def find(self, job: str) -> dict[Workload, list[Any]]:
        """The job's pods by workload (see the module docstring for the order of look-ups)."""
        namespace, _, name = job.rpartition("/")
        if not _LABEL_VALUE.fullmatch(name):  # a controller's long name: no label can hold it
            return matching(job, self._list(namespace, None), self.rules)
        for label in self.rules.job_labels:
            found = matching(job, self._list(namespace, f"{label}={name}"), self.rules)
            if found:
                return found
        selectors = [f"{KUBEFLOW_JOB}={name}", f"{JOBSET_NAME}={name}", f"{BATCH_JOB[0]}={name}"]
        group = re.fullmatch(r"(.+)-(\d+)", name)
        if group:
            selectors.append(f"{LWS_NAME}={group[1]},{LWS_GROUP}={group[2]}")
        pods: dict[str, Any] = {}
        for selector in selectors:
            for pod in self._list(namespace, selector):
                pods[pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"] = pod
        found = matching(job, pods.values(), self.rules)
        return found or matching(job, self._list(namespace, None), self.rules)

    # --- restart ------------------------------------------------------------------------

    def restart(self, job: str) -> tuple[Workload, str]:
        """Restart ``job``; (its workload, what was done). Raises ExecutionError when it refuses."""
        found = self.find(job)
        if not found:
            raise ExecutionError(f"no pods of job {job} found (by its labels or its workload's): nothing to restart")
        if len(found) > 1:
            names = "; ".join(sorted(str(w) for w in found))
            raise ExecutionError(f"job name {job} is ambiguous: it names the pods of {names}; refusing to "
                                 "restart any (name jobs uniquely: the faultline.io/job label, or the job "
                                 "source's qualify_namespace)")
        [(workload, pods)] = found.items()
        kind = workload.kind
        if kind == "Pod":
            raise ExecutionError(f"job {job} is bare pods ({', '.join(_names(pods))}): nothing recreates a "
                                 "deleted bare pod, so a restart would end the job; restart it by hand")
        if kind in _CR or kind == "Job":
            self._check(workload)
        if kind == "JobSet":
            return workload, self._restart_jobset(workload)
        if kind == "LeaderWorkerSet":
            pods = sorted(pods, key=lambda p: (p.metadata.labels or {}).get(LWS_WORKER) != "0")
            return workload, self._delete_pods(pods, f"{workload} for the LeaderWorkerSet to recreate the group")
        if kind in KUBEFLOW_KINDS:
            return workload, self._delete_pods(pods, f"{workload} for the training operator to recreate")
        if kind == "Job":
            return workload, self._delete_pods(
                pods, f"{workload} for the Job controller to recreate (each counts against its backoffLimit)")
        if kind in _RECREATING_CONTROLLERS:
            return workload, self._delete_pods(pods, f"job {job} for their controller to recreate")
        raise ExecutionError(f"job {job} runs under a {kind} ({workload}): faultline does not know that it "
                             "recreates deleted pods, so it does not restart it; restart it through its own tooling")

    def _read(self, workload: Workload) -> dict[str, Any]:
        what = f"read {workload}"
        try:
            with api_call(what):
                if workload.kind == "Job":
                    obj: Any = self.batch.read_namespaced_job(workload.name, workload.namespace,
                                                         _request_timeout=self.timeout_s)
                    return dict(self.core.api_client.sanitize_for_serialization(obj))
                group, version, plural = _CR[workload.kind]
                found: Any = self.custom.get_namespaced_custom_object(
                    group, version, workload.namespace, plural, workload.name, _request_timeout=self.timeout_s)
                return dict(found)
        except ApiFailure as exc:
            if exc.status == 404:
                raise ExecutionError(f"{workload} is gone (HTTP 404): nothing would recreate its pods") from exc
            raise

    def _check(self, workload: Workload) -> None:
        obj = self._read(workload)
        ended = _condition(obj)
        if ended:
            raise ExecutionError(f"{workload} is {ended}: its controller recreates nothing now; resubmit it")
        if _suspended(obj):
            raise ExecutionError(f"{workload} is suspended: resume it first (its controller recreates nothing)")

    def _delete_pods(self, pods: Iterable[Any], why: str) -> str:
        deleted = 0
        for pod in pods:
            meta: Any = pod.metadata
            if meta.deletion_timestamp is not None:
                continue
            body = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=meta.uid)) if meta.uid else None
            try:
                with api_call(f"delete pod {meta.namespace}/{meta.name}"):
                    self.core.delete_namespaced_pod(meta.name, meta.namespace, body=body,
                                                    _request_timeout=self.timeout_s)
                deleted += 1
            except ApiFailure as exc:
                if exc.status not in (404, 409):  # gone, or already replaced by a new pod of that name
                    raise
        return f"deleted {deleted} pods of {why}"

    def _restart_jobset(self, workload: Workload) -> str:
        with api_call(f"list the Jobs of {workload}"):
            listed: list[Any] = self.batch.list_namespaced_job(workload.namespace, label_selector=f"{JOBSET_NAME}={workload.name}",
                                                  _request_timeout=self.timeout_s).items
        jobs = [j for j in listed if j.metadata.deletion_timestamp is None]
        if not jobs:
            raise ExecutionError(f"{workload} has no child Jobs to restart")
        for j in jobs:
            body = k8s.V1DeleteOptions(propagation_policy="Foreground",
                                       preconditions=k8s.V1Preconditions(uid=j.metadata.uid))
            try:
                with api_call(f"delete Job {workload.namespace}/{j.metadata.name}"):
                    self.batch.delete_namespaced_job(j.metadata.name, workload.namespace, body=body,
                                                     _request_timeout=self.timeout_s)
            except ApiFailure as exc:
                if exc.status not in (404, 409):
                    raise
        return (f"deleted {len(jobs)} Jobs of {workload} (foreground: their pods first) for the JobSet "
                "controller to recreate")


def _names(pods: Iterable[Any]) -> list[str]:
    return [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods]
