"""What a job's workload object says about restarts and elasticity, for its ``job_started``.

The pods tell the job source where a job runs; only the workload object tells
how often its controller will restart it and how far it may shrink, which the
correlator's restart budget and restart size need (``max_restarts``,
``elastic``). Read once per run of a job (the object's ``get``), and only
these fields:

==================  ==================================  ==========================================
workload            ``max_restarts``                    ``elastic`` (GPUs)
==================  ==================================  ==========================================
PyTorchJob, ...     ``spec.runPolicy.backoffLimit``     ``spec.elasticPolicy.min/maxReplicas`` x
                                                        the GPUs of one pod
JobSet              ``spec.failurePolicy.maxRestarts``  fixed
batch Job           ``spec.backoffLimit``               fixed
==================  ==================================  ==========================================

An object that cannot be read (gone, not permitted, a kind the cluster does
not serve) or lacks the field leaves the job source's defaults; it is said
once per workload.
"""

from __future__ import annotations

import logging
from typing import Any

from common.kube_workloads import Workload

__all__ = ["KUBEFLOW", "WorkloadSpecs"]

log = logging.getLogger("faultline.agent.kubernetes")

KUBEFLOW = ("PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "MXJob")
_CR = {"JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
       **{kind: ("kubeflow.org", "v1", kind.lower() + "s") for kind in KUBEFLOW}}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class WorkloadSpecs:
    """Reads a workload's restart and elasticity fields, once per (workload, run)."""

    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.api_client = api_client
        self.timeout_s = timeout_s
        self._seen: dict[tuple[Workload, str], dict[str, Any]] = {}
        self._quiet: set[Workload] = set()

    def fields(self, workload: Workload, run: str, gpus_per_pod: int) -> dict[str, Any]:
        """``max_restarts`` / ``elastic`` overrides for this run of ``workload`` (may be empty)."""
        key = (workload, run)
        if key not in self._seen:
            self._seen = {k: v for k, v in self._seen.items() if k[0] != workload}  # one run kept per workload
            self._seen[key] = self._read(workload, gpus_per_pod)
        return self._seen[key]

    def _read(self, workload: Workload, gpus_per_pod: int) -> dict[str, Any]:
        if workload.kind not in _CR and workload.kind != "Job":
            return {}
        try:
            if workload.kind == "Job":
                job = self.batch.read_namespaced_job(workload.name, workload.namespace, _request_timeout=self.timeout_s)
                obj: dict[str, Any] = self.api_client.sanitize_for_serialization(job)
            else:
                group, version, plural = _CR[workload.kind]
                found: Any = self.custom.get_namespaced_custom_object(
                    group, version, workload.namespace, plural, workload.name, _request_timeout=self.timeout_s)
                obj = dict(found)
        except Exception as exc:  # not permitted, gone, not served: the defaults stand
            if workload not in self._quiet:
                self._quiet.add(workload)
                log.info("kubernetes: cannot read %s (%s): its restart budget is the configured default",
                         workload, exc)
            return {}
        spec = obj.get("spec") or {}
        out: dict[str, Any] = {}
        if workload.kind == "Job":
            limit = _int(spec.get("backoffLimit"))
        elif workload.kind == "JobSet":
            limit = _int((spec.get("failurePolicy") or {}).get("maxRestarts"))
        else:
            limit = _int((spec.get("runPolicy") or {}).get("backoffLimit"))
            elastic = spec.get("elasticPolicy") or {}
            low, high = _int(elastic.get("minReplicas")), _int(elastic.get("maxReplicas"))
            if low is not None and high is not None and 0 < low <= high and gpus_per_pod > 0:
                out["elastic"] = {"min_gpus": low * gpus_per_pod, "max_gpus": high * gpus_per_pod}
        if limit is not None:
            out["max_restarts"] = limit
        return out
