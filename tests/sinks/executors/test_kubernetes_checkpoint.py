"""``checkpoint_now`` on Kubernetes against a real kube-apiserver, as the chart's executor user: the
annotation lands on the job's running pods only, a retry changes nothing, a job with no running pod is an
error result; and the downward-API file the kubelet would write from those annotations gives the trainer's
:class:`~producers.jobs.reporter.CheckpointRequests` exactly one request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from producers.jobs.reporter import CHECKPOINT_ANNOTATION, CheckpointRequests
from sinks.executors.core import ExecutionError
from sinks.executors.kubernetes_checkpoint import CHECKPOINT_NOW, CHECKPOINT_REASON, MAX_REASON
from streams.decisions import Command
from tests.downward_api import DownwardVolume
from tests.kube_apiserver import KubeApiServer, wait_until

from .commands import command
from .kube_cluster import Cluster, pytorch_pods

pytestmark = pytest.mark.timeout(120)


def _checkpoint(cid: str, job: str, reason: str = "gpu_ecc_degradation: single-bit ECC rising on GPU 2") -> Command:
    cmd = command(cid, "checkpoint_now", node=None, job=job, params={})
    return cmd.model_copy(update={"reason": reason})


def _annotations(c: Cluster, name: str, namespace: str | None = None) -> dict[str, str]:
    return dict(c.objects.core.read_namespaced_pod(name, namespace or c.ns).metadata.annotations or {})


def test_the_annotation_lands_on_the_jobs_running_pods_only(cluster: Cluster) -> None:
    node = cluster.node(1)
    llama, mistral = f"{cluster.prefix}-llama", f"{cluster.prefix}-mistral"
    running = pytorch_pods(cluster, llama, [node, node, node])
    cluster.objects.set_phase(cluster.ns, running[2], "Failed")  # a finished pod of the job: not asked
    cluster.objects.core.patch_namespaced_pod(running[1], cluster.ns, {"metadata": {"annotations": {
        "team.io/owner": "alice"}}})  # the pod's own annotations stay
    other = pytorch_pods(cluster, mistral, [node])  # another job on the same node: not asked
    assert cluster.backend.supports("checkpoint_now")
    assert CHECKPOINT_NOW in cluster.backend.plan(_checkpoint("ck-1", llama))

    detail = cluster.backend.execute(_checkpoint("ck-1", llama))
    assert detail == (f"asked 2 running pods of PyTorchJob {cluster.ns}/{llama} to checkpoint now "
                      f"({CHECKPOINT_NOW}=ck-1)")
    for name in running[:2]:
        got = _annotations(cluster, name)
        assert got[CHECKPOINT_NOW] == "ck-1"
        assert got[CHECKPOINT_REASON] == "gpu_ecc_degradation: single-bit ECC rising on GPU 2"
    assert _annotations(cluster, running[1])["team.io/owner"] == "alice"
    assert CHECKPOINT_NOW not in _annotations(cluster, running[2])
    assert CHECKPOINT_NOW not in _annotations(cluster, other[0])


def test_a_second_run_of_the_same_command_changes_nothing(cluster: Cluster) -> None:
    node, job = cluster.node(1), f"{cluster.prefix}-llama"
    pods = pytorch_pods(cluster, job, [node, node])
    cluster.backend.execute(_checkpoint("ck-1", job, reason="x" * 1000))
    versions = [cluster.objects.core.read_namespaced_pod(p, cluster.ns).metadata.resource_version for p in pods]
    assert len(_annotations(cluster, pods[0])[CHECKPOINT_REASON]) == MAX_REASON  # bounded
    detail = cluster.backend.execute(_checkpoint("ck-1", job, reason="x" * 1000))
    assert detail.endswith("; 2 already asked by this command") and detail.startswith("asked 0 running pods")
    assert [cluster.objects.core.read_namespaced_pod(p, cluster.ns).metadata.resource_version
            for p in pods] == versions  # not written again
    again = {"metadata": {"annotations": {CHECKPOINT_NOW: "ck-1", CHECKPOINT_REASON: "x" * MAX_REASON}}}
    cluster.objects.core.patch_namespaced_pod(pods[0], cluster.ns, again)  # and a retried patch would write nothing
    assert cluster.objects.core.read_namespaced_pod(pods[0], cluster.ns).metadata.resource_version == versions[0]
    cluster.backend.execute(_checkpoint("ck-2", job))  # a new command is a new request
    assert _annotations(cluster, pods[0])[CHECKPOINT_NOW] == "ck-2"


def test_a_job_without_a_running_pod_is_an_error_that_says_what_next(cluster: Cluster) -> None:
    node, job = cluster.node(1), f"{cluster.prefix}-llama"
    with pytest.raises(ExecutionError, match=f"no pods of job {job} found|no running pod of job {job}"):
        cluster.backend.execute(_checkpoint("ck-1", job))
    [pod] = pytorch_pods(cluster, job, [node])
    cluster.objects.set_phase(cluster.ns, pod, "Succeeded")
    with pytest.raises(ExecutionError, match=rf"no running pod of job {job} \(Succeeded\): nothing would read .*"
                                             "resubmit it from its newest checkpoint"):
        cluster.backend.execute(_checkpoint("ck-2", job))
    assert CHECKPOINT_NOW not in _annotations(cluster, pod)


def test_an_ambiguous_job_name_asks_no_pod(cluster: Cluster) -> None:
    node, job = cluster.node(1), f"{cluster.prefix}-llama"
    other = cluster.objects.namespace(f"{cluster.prefix}-research")
    [a] = pytorch_pods(cluster, job, [node])
    [b] = pytorch_pods(cluster, job, [node], namespace=other)
    with pytest.raises(ExecutionError, match=f"job name {job} is ambiguous"):
        cluster.backend.execute(_checkpoint("ck-1", job))
    assert CHECKPOINT_NOW not in _annotations(cluster, a) and CHECKPOINT_NOW not in _annotations(cluster, b, other)
    assert "asked 1 running pods" in cluster.backend.execute(_checkpoint("ck-2", f"{other}/{job}"))
    assert _annotations(cluster, b, other)[CHECKPOINT_NOW] == "ck-2"


def test_the_trainer_sees_exactly_one_request_in_its_downward_api_file(cluster: Cluster, tmp_path: Path) -> None:
    """What the kubelet projects from the pod's annotations, before and after the executor's patch (and after
    a retry of the same command): the trainer's listener sees one request, with the command's id."""
    assert CHECKPOINT_ANNOTATION == CHECKPOINT_NOW  # the trainer's stdlib module keeps its own copy
    node, job = cluster.node(1), f"{cluster.prefix}-llama"
    [pod] = pytorch_pods(cluster, job, [node])
    volume = DownwardVolume(tmp_path / "podinfo")
    volume.write(_annotations(cluster, pod))  # the kubelet writes it before the container starts
    listener = CheckpointRequests(volume.path)
    requests = [listener.poll()]
    cluster.backend.execute(_checkpoint("ck-1", job))
    volume.write(_annotations(cluster, pod))  # the kubelet sees the change and rewrites the file
    requests.append(listener.poll())
    requests.append(listener.poll())
    cluster.backend.execute(_checkpoint("ck-1", job))  # a retry
    volume.write(_annotations(cluster, pod))  # even if the file were rewritten
    requests.append(listener.poll())
    assert [r for r in requests if r is not None] == [
        {"command": "ck-1", "reason": "gpu_ecc_degradation: single-bit ECC rising on GPU 2"}]


def test_a_pod_replaced_after_the_listing_is_not_annotated_in_its_place(cluster: Cluster,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch names the listed pod's UID: a new pod of the same name (409) is skipped, like a deleted one."""
    node, job = cluster.node(1), f"{cluster.prefix}-llama"
    [pod] = pytorch_pods(cluster, job, [node])
    listed = cluster.backend.restarter.find(job)
    cluster.objects.core.delete_namespaced_pod(pod, cluster.ns, grace_period_seconds=0)
    pytorch_pods(cluster, f"{cluster.prefix}-other", [node])  # (the PyTorchJob object's name must differ)
    cluster.objects.pod(cluster.ns, pod, node, labels={"training.kubeflow.org/job-name": job})  # same name, new UID
    monkeypatch.setattr(cluster.backend.restarter, "find", lambda _: listed)
    with pytest.raises(ExecutionError, match=f"every running pod of job {job} went away"):
        cluster.backend.execute(_checkpoint("ck-1", job))
    assert CHECKPOINT_NOW not in _annotations(cluster, pod)


def test_the_chart_lets_the_executor_change_nothing_else_of_a_pod(cluster: Cluster, kube_apiserver: KubeApiServer,
                                                                   ) -> None:
    """``patch`` on pods could change a pod's image or labels: the chart's ValidatingAdmissionPolicy refuses
    every pod update by the executor but the two checkpoint annotations (and a person's updates go through)."""
    node, job = cluster.node(1), f"{cluster.prefix}-llama"
    [pod] = pytorch_pods(cluster, job, [node])
    as_executor = k8s.CoreV1Api(kube_apiserver.client("faultline-executor"))
    image = {"spec": {"containers": [{"name": "train", "image": "attacker:1"}]}}

    def refused(body: dict[str, Any], dry_run: str | None = "All") -> bool:
        try:
            as_executor.patch_namespaced_pod(pod, cluster.ns, body, dry_run=dry_run)
        except ApiException as exc:
            return exc.status in (403, 422) and "faultline's executor may change only" in str(exc.body)
        return False

    wait_until(lambda: refused(image), 30, "the policy in force (it is read asynchronously)")
    assert refused(image, dry_run=None)
    assert refused({"metadata": {"labels": {"training.kubeflow.org/job-name": "other"}}}, dry_run=None)
    assert refused({"metadata": {"annotations": {"team.io/owner": "mallory"}}}, dry_run=None)
    assert refused({"metadata": {"annotations": {CHECKPOINT_NOW: "ck-1", "team.io/owner": "x"}}}, dry_run=None)
    got = cluster.objects.core.read_namespaced_pod(pod, cluster.ns)
    assert got.spec.containers[0].image == "train:1" and CHECKPOINT_NOW not in (got.metadata.annotations or {})
    assert "asked 1 running pods" in cluster.backend.execute(_checkpoint("ck-1", job))  # its own annotations pass
    cluster.objects.core.patch_namespaced_pod(pod, cluster.ns, {"metadata": {"labels": {"team": "a"}}})  # a person
    assert cluster.objects.core.read_namespaced_pod(pod, cluster.ns).metadata.labels["team"] == "a"
