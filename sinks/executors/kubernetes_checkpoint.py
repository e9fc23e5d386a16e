"""``checkpoint_now`` on Kubernetes: an annotation on each running pod of the job, read inside the pod
through the downward API.

**The rule.** The job's pods are found with the same mapping as ``restart_job``
(:meth:`~sinks.executors.kubernetes_restart.JobRestarter.find`); a name that matches more than one
workload is refused. Every pod of the job that is ``Running`` and not terminating gets, in one merge
patch naming the listed pod's UID, the annotations

* ``faultline.io/checkpoint-now: <command id>`` -- the request: the trainer's
  :class:`producers.jobs.reporter.CheckpointRequests`, pointed at the pod's downward-API
  ``annotations`` file, sees one request per change of this value;
* ``faultline.io/checkpoint-reason: <the command's reason>`` (at most :data:`MAX_REASON` characters),
  for the person reading ``kubectl describe pod``.

A pod already carrying this command's id is left untouched, so a retried command changes nothing (nor
would a repeated patch: the API writes nothing for a patch that changes nothing). A pod deleted or
replaced between the listing and the patch is skipped: 404, or 422 for the UID (a merge patch cannot
change an object's UID, so the API refuses it on a new pod of the same name). A job with no running
pod is an error result that says what to do next: nothing would read the request.

No exec into a container and no new process in the pod: the executor needs ``patch`` on ``pods``, which
the chart's ValidatingAdmissionPolicy narrows to these two annotations (RBAC cannot).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from sinks.executors.core import ExecutionError, require
from sinks.executors.kubernetes_api import ApiFailure, api_call
from sinks.executors.kubernetes_restart import JobRestarter
from streams.decisions import Command

__all__ = ["CHECKPOINT_NOW", "CHECKPOINT_REASON", "MAX_REASON", "CheckpointAsk"]

#: The pod annotation whose value (a command id) asks the job to checkpoint; the reporter's own constant is equal.
CHECKPOINT_NOW = "faultline.io/checkpoint-now"
CHECKPOINT_REASON = "faultline.io/checkpoint-reason"
MAX_REASON = 256

_MERGE = "application/merge-patch+json"


class CheckpointAsk:
    """Asks a job's running pods to checkpoint now (see the module docstring)."""

    def __init__(self, api: k8s.CoreV1Api, finder: JobRestarter, timeout_s: float = 30.0) -> None:
        self.api = api
        self.finder = finder
        self.timeout_s = timeout_s

    def plan(self, cmd: Command) -> str:
        return (f"PATCH the running pods of job {cmd.target.job}: annotation {CHECKPOINT_NOW}={cmd.id} "
                "(the trainer reads it through the downward API)")

    def request(self, cmd: Command) -> str:
        """Annotate the job's running pods with the command's id; what was done, or ExecutionError."""
        job = require(cmd, "job")
        found = self.finder.find(job)
        if len(found) > 1:
            names = "; ".join(sorted(str(w) for w in found))
            raise ExecutionError(f"job name {job} is ambiguous: it names the pods of {names}; asked none to "
                                 "checkpoint (name jobs uniquely: the faultline.io/job label, or <namespace>/<name>)")
        pods = [p for pods in found.values() for p in pods]
        running = [p for p in pods if _running(p)]
        if not running:
            phases = ", ".join(sorted({str(p.status.phase if p.status else None) for p in pods})) or "no pods"
            raise ExecutionError(
                f"no running pod of job {job} ({phases}): nothing would read a checkpoint request. If the job is "
                "still starting, it has no progress to save yet; if it ended, resubmit it from its newest "
                "checkpoint; if its pods carry another job name, name that one")
        reason = (cmd.reason or cmd.incident)[:MAX_REASON]
        asked = already = gone = 0
        for pod in running:
            meta: Any = pod.metadata
            if (meta.annotations or {}).get(CHECKPOINT_NOW) == cmd.id:
                already += 1
                continue
            body = {"metadata": {"uid": meta.uid, "annotations": {CHECKPOINT_NOW: cmd.id, CHECKPOINT_REASON: reason}}}
            try:
                with api_call(f"annotate pod {meta.namespace}/{meta.name}"):
                    self.api.patch_namespaced_pod(meta.name, meta.namespace, body, _content_type=_MERGE,
                                                  _request_timeout=self.timeout_s)
                asked += 1
            except ApiFailure as exc:
                if not _replaced(exc):
                    raise
                gone += 1
        if asked + already == 0:
            raise ExecutionError(f"every running pod of job {job} went away while being asked to checkpoint; "
                                 "nothing would read the request")
        workload = ", ".join(sorted(str(w) for w in found))
        return (f"asked {asked} running pods of {workload} to checkpoint now ({CHECKPOINT_NOW}={cmd.id})"
                + (f"; {already} already asked by this command" if already else "")
                + (f"; {gone} gone meanwhile" if gone else ""))


def _running(pod: Any) -> bool:
    """Running and not terminating: a pod whose trainer can still read the request and save."""
    return bool(pod.status and pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None)


def _replaced(exc: ApiFailure) -> bool:
    """The listed pod is gone (404), or a new pod holds its name (422: the patch's UID is not its own)."""
    return exc.status == 404 or (exc.status == 422 and "metadata.uid" in str(exc))
