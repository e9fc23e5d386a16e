"""The Kubernetes backend against a real kube-apiserver (``tests/kube_apiserver.py``): cordon, taint
(node and DRA device), eviction under PodDisruptionBudgets, restart of each workload kind, release.

There is no controller manager or kubelet: a deleted pod stays (terminating) and nothing is
recreated, so each test checks what the executor asked the API for, object by object. The backend
runs as the user ``faultline-executor``, bound to the ClusterRole the Helm chart renders: what it
does, it may do, and no more is granted (tests/deploy/test_helm_chart.py pins the grants)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from sinks.executors.core import ExecutionError
from sinks.executors.kubernetes import CORDONED_BY, QUARANTINE_TAINT, KubernetesBackend
from sinks.executors.kubernetes_dra import rule_name
from tests.kube_apiserver import KubeApiServer
from tests.kube_objects import gpu_uuid, owner

from .commands import command
from .kube_cluster import Cluster, pytorch_pods

pytestmark = pytest.mark.timeout(120)


def test_cordon_then_release_undoes_only_our_cordon(cluster: Cluster) -> None:
    ours, theirs = cluster.node(1), cluster.node(2)
    cluster.objects.core.patch_node(theirs, {"spec": {"unschedulable": True}})
    assert cluster.backend.execute(command("c1", "cordon_node", node=ours, incident="inc-1")) == f"cordoned node {ours}"
    assert "not by faultline" in cluster.backend.execute(command("c2", "cordon_node", node=theirs))
    node = cluster.read_node(ours)
    assert node.spec.unschedulable is True and node.metadata.annotations[CORDONED_BY] == "inc-1"
    cluster.backend.execute(command("c3", "release_gpu", node=ours))
    cluster.backend.execute(command("c4", "release_gpu", node=theirs))
    assert not cluster.read_node(ours).spec.unschedulable
    assert CORDONED_BY not in (cluster.read_node(ours).metadata.annotations or {})
    assert cluster.read_node(theirs).spec.unschedulable is True  # a person's cordon stays


def test_a_dra_gpu_is_quarantined_alone_and_released_exactly(cluster: Cluster) -> None:
    node = cluster.node(1)
    cluster.objects.resource_slice(node)
    bad, other = gpu_uuid(node, 3), gpu_uuid(node, 5)
    detail = cluster.backend.execute(command("c1", "quarantine_gpu", node=node, gpu=bad, incident="inc-9"))
    assert "DeviceTaintRule" in detail and f"gpu.nvidia.com/{node}/gpu-3" in detail and "node stays" in detail
    cluster.backend.execute(command("c2", "quarantine_gpu", node=node, gpu=other))
    assert "as it already was" in cluster.backend.execute(command("c3", "quarantine_gpu", node=node, gpu=bad))
    rule = cluster.objects.resource.read_device_taint_rule(rule_name(node, bad))
    assert rule.spec.device_selector.device == "gpu-3" and rule.spec.device_selector.pool == node
    assert (rule.spec.taint.key, rule.spec.taint.effect) == (QUARANTINE_TAINT, "NoSchedule")
    assert rule.metadata.annotations["faultline.io/incident"] == "inc-9"
    taints = [t.key for t in cluster.read_node(node).spec.taints or []]
    assert QUARANTINE_TAINT not in taints and not cluster.read_node(node).spec.unschedulable  # the node serves on

    detail = cluster.backend.execute(command("c4", "release_gpu", node=node, gpu=bad))
    assert detail == f"released GPU {bad} on {node} (DeviceTaintRule {rule_name(node, bad)} deleted)"
    left = [r.metadata.name for r in cluster.objects.resource.list_device_taint_rule().items]
    assert rule_name(node, bad) not in left and rule_name(node, other) in left  # the other GPU stays fenced
    cluster.backend.execute(command("c5", "release_gpu", node=node))  # the whole node: its last rule too
    assert rule_name(node, other) not in [r.metadata.name for r in
                                          cluster.objects.resource.list_device_taint_rule().items]


def test_a_device_plugin_gpu_falls_back_to_the_node_taint(cluster: Cluster) -> None:
    node = cluster.node(1, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    gpu = gpu_uuid(node, 2)
    detail = cluster.backend.execute(command("c1", "quarantine_gpu", node=node, gpu=gpu))
    assert "taint faultline.io/quarantine:NoSchedule" in detail and "no DRA driver publishes" in detail
    # (the API server's admission adds node.kubernetes.io/not-ready to a new node: no kubelet here)
    taints = {t.key: t.value for t in cluster.read_node(node).spec.taints if t.key != "node.kubernetes.io/not-ready"}
    assert taints == {"nvidia.com/gpu": "present", QUARANTINE_TAINT: gpu}
    assert cluster.backend.execute(command("c2", "release_gpu", node=node, gpu=gpu)) == f"released GPU {gpu} on {node}"
    assert [t.key for t in cluster.read_node(node).spec.taints if t.key != "node.kubernetes.io/not-ready"] == [
        "nvidia.com/gpu"]


def test_drain_waits_for_the_disruption_budget_and_leaves_daemonset_pods(cluster: Cluster) -> None:
    node, ns = cluster.node(1), cluster.ns
    for i in range(2):
        cluster.objects.pod(ns, f"serve-{i}", node, labels={"app": "serve"}, gpus=1,
                            owner=owner("ReplicaSet", "serve-abc"))
    cluster.objects.pod(ns, "exporter", node, gpus=0, owner=owner("DaemonSet", "exporter"))
    cluster.objects.pdb(ns, "serve", {"app": "serve"}, allowed=1)

    def controller(_: float) -> None:  # the disruption controller's next round: one more may go
        cluster.sleeps.append(_)
        cluster.objects.allow(ns, "serve", 1)

    cluster.backend._sleep = controller
    detail = cluster.backend.execute(command("c1", "drain_node", node=node, incident="inc-2"))
    assert detail == f"cordoned node {node}; evicted 2 pods (1 DaemonSet/static/finished left)"
    assert len(cluster.sleeps) == 1  # the second eviction was refused (429) once
    assert cluster.objects.terminating(ns) == {"serve-0", "serve-1"}


def test_drain_fails_naming_a_pod_the_budget_keeps(cluster: Cluster) -> None:
    node, ns = cluster.node(1), cluster.ns
    cluster.objects.pod(ns, "db-0", node, labels={"app": "db"}, gpus=0, owner=owner("StatefulSet", "db"))
    cluster.objects.pdb(ns, "db", {"app": "db"}, allowed=0)
    with pytest.raises(ExecutionError, match=f"refused after 5 tries .*: {ns}/db-0$"):
        cluster.backend.execute(command("c1", "drain_node", node=node))
    assert cluster.objects.terminating(ns) == set()


def test_restart_deletes_the_pytorchjobs_pods_and_no_other_jobs(cluster: Cluster) -> None:
    nodes = [cluster.node(i) for i in range(1, 5)]
    llama = pytorch_pods(cluster, f"{cluster.prefix}-llama", nodes[:2])
    mistral = pytorch_pods(cluster, f"{cluster.prefix}-mistral", nodes[2:])
    cluster.backend.execute(command("q", "cordon_node", node=nodes[1]))
    detail = cluster.backend.execute(command("c1", "restart_job", node=None, job=f"{cluster.prefix}-llama",
                                             params={"exclude": {"nodes": [nodes[1]], "gpus": []}}))
    assert detail.startswith(f"deleted 2 pods of PyTorchJob {cluster.ns}/{cluster.prefix}-llama for the training "
                             "operator to recreate")
    assert cluster.objects.terminating(cluster.ns) == set(llama)
    assert not set(mistral) & cluster.objects.terminating(cluster.ns)


def test_restart_refuses_a_failed_pytorchjob_an_ambiguous_name_and_bare_pods(cluster: Cluster) -> None:
    node, done, llama = cluster.node(1), f"{cluster.prefix}-done", f"{cluster.prefix}-llama"
    cluster.objects.custom_object("PyTorchJob", cluster.ns, done, conditions=[
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    cluster.objects.pod(cluster.ns, f"{done}-worker-0", node, labels={"training.kubeflow.org/job-name": done},
                        owner=owner("PyTorchJob", done))
    with pytest.raises(ExecutionError, match=f"PyTorchJob .*/{done} is Failed: .*resubmit"):
        cluster.backend.execute(command("c1", "restart_job", node=None, job=done))

    other = cluster.objects.namespace(f"{cluster.prefix}-research")
    pytorch_pods(cluster, llama, [node])
    pytorch_pods(cluster, llama, [node], namespace=other)
    with pytest.raises(ExecutionError, match=f"job name {llama} is ambiguous"):
        cluster.backend.execute(command("c2", "restart_job", node=None, job=llama))
    assert cluster.objects.terminating(cluster.ns) == set() == cluster.objects.terminating(other)
    cluster.backend.execute(command("c3", "restart_job", node=None, job=f"{other}/{llama}"))
    assert cluster.objects.terminating(other) == {f"{llama}-master-0"}
    assert cluster.objects.terminating(cluster.ns) == set()

    cluster.objects.pod(cluster.ns, "scratch", node, labels={"faultline.io/job": f"{cluster.prefix}-scratch"})
    with pytest.raises(ExecutionError, match="bare pods"):
        cluster.backend.execute(command("c4", "restart_job", node=None, job=f"{cluster.prefix}-scratch"))


def test_restart_of_a_jobset_deletes_its_child_jobs_in_the_foreground(cluster: Cluster) -> None:
    node = cluster.node(1)
    js = f"{cluster.prefix}-js"
    for name in (js, f"{cluster.prefix}-other-js"):
        obj = cluster.objects.custom_object("JobSet", cluster.ns, name)
        ref = owner("JobSet", name, obj["metadata"]["uid"])
        for j in range(2):
            labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": "w",
                      "jobset.sigs.k8s.io/job-index": str(j)}
            job = cluster.objects.job(cluster.ns, f"{name}-w-{j}", labels, owner=ref)
            cluster.objects.pod(cluster.ns, f"{name}-w-{j}-0", node, labels=labels,
                                owner=owner("Job", job.metadata.name, job.metadata.uid))
    detail = cluster.backend.execute(command("c1", "restart_job", node=None, job=js))
    assert detail == (f"deleted 2 Jobs of JobSet {cluster.ns}/{js} (foreground: their pods first) for the JobSet "
                      "controller to recreate")
    jobs = {j.metadata.name: j for j in cluster.objects.batch.list_namespaced_job(cluster.ns).items}
    assert {n for n, j in jobs.items() if j.metadata.deletion_timestamp} == {f"{js}-w-0", f"{js}-w-1"}
    assert "foregroundDeletion" in jobs[f"{js}-w-0"].metadata.finalizers
    assert cluster.objects.terminating(cluster.ns) == set()  # pods go with their Job (the garbage collector)


def test_restart_of_a_leaderworkerset_group_deletes_that_group_only(cluster: Cluster) -> None:
    node, lws = cluster.node(1), f"{cluster.prefix}-lws"
    cluster.objects.custom_object("LeaderWorkerSet", cluster.ns, lws)
    for group in (0, 1):
        for worker in (0, 1):
            name = f"{lws}-{group}" if worker == 0 else f"{lws}-{group}-{worker}"
            cluster.objects.pod(cluster.ns, name, node, owner=owner("StatefulSet", f"{lws}-{group}"), labels={
                "leaderworkerset.sigs.k8s.io/name": lws, "leaderworkerset.sigs.k8s.io/group-index": str(group),
                "leaderworkerset.sigs.k8s.io/worker-index": str(worker)})
    assert "LeaderWorkerSet" in cluster.backend.execute(command("c1", "restart_job", node=None, job=f"{lws}-1"))
    assert cluster.objects.terminating(cluster.ns) == {f"{lws}-1", f"{lws}-1-1"}


def test_restart_waits_until_every_excluded_gpu_is_fenced(cluster: Cluster) -> None:
    nodes = [cluster.node(1), cluster.node(2)]
    cluster.objects.resource_slice(nodes[0])
    pytorch_pods(cluster, f"{cluster.prefix}-llama", nodes)
    bad = gpu_uuid(nodes[0], 4)
    restart = command("c1", "restart_job", node=None, job=f"{cluster.prefix}-llama", params={"exclude": {"nodes": [], "gpus": [bad]}})
    with pytest.raises(ExecutionError, match=f"excluded GPUs not quarantined: {bad}"):
        cluster.backend.execute(restart)
    assert cluster.objects.terminating(cluster.ns) == set()
    cluster.backend.execute(command("q1", "quarantine_gpu", node=nodes[0], gpu=bad))  # its DeviceTaintRule
    assert cluster.backend.execute(restart).startswith("deleted 2 pods of PyTorchJob")
    cluster.backend.execute(command("r1", "release_gpu", node=nodes[0], gpu=bad))


def test_a_job_renamed_by_its_label_is_found_by_that_name_only(cluster: Cluster) -> None:
    node, job = cluster.node(1), f"{cluster.prefix}-llama"
    names = pytorch_pods(cluster, job, [node, node])
    for name in names:
        cluster.objects.core.patch_namespaced_pod(name, cluster.ns, {"metadata": {"labels": {
            "faultline.io/job": f"{job}-run2"}}})
    with pytest.raises(ExecutionError, match=f"no pods of job {job} found"):
        cluster.backend.execute(command("c1", "restart_job", node=None, job=job))
    assert cluster.objects.terminating(cluster.ns) == set()
    assert "PyTorchJob" in cluster.backend.execute(command("c2", "restart_job", node=None, job=f"{job}-run2"))
    assert cluster.objects.terminating(cluster.ns) == set(names)


def test_restart_of_an_indexed_job_deletes_its_pods_unless_it_is_suspended(cluster: Cluster) -> None:
    node = cluster.node(1)
    for name in ("ix", "held"):
        job_name = f"{cluster.prefix}-{name}"
        labels = {"batch.kubernetes.io/job-name": job_name}
        job = cluster.objects.job(cluster.ns, job_name, labels)
        for c in range(2):
            cluster.objects.pod(cluster.ns, f"{job_name}-{c}", node, owner=owner("Job", job_name, job.metadata.uid),
                                labels={**labels, "batch.kubernetes.io/job-completion-index": str(c)})
    cluster.objects.batch.patch_namespaced_job(f"{cluster.prefix}-held", cluster.ns, {"spec": {"suspend": True}})
    with pytest.raises(ExecutionError, match="is suspended: resume it first"):
        cluster.backend.execute(command("c1", "restart_job", node=None, job=f"{cluster.prefix}-held"))
    detail = cluster.backend.execute(command("c2", "restart_job", node=None, job=f"{cluster.prefix}-ix"))
    assert detail.startswith(f"deleted 2 pods of Job {cluster.ns}/{cluster.prefix}-ix for the Job controller")
    assert cluster.objects.terminating(cluster.ns) == {f"{cluster.prefix}-ix-0", f"{cluster.prefix}-ix-1"}


def test_the_api_server_is_asked_whether_it_serves_device_taint_rules(kube_apiserver: KubeApiServer) -> None:
    from sinks.executors.kubernetes_dra import served

    assert served(kube_apiserver.client("faultline-executor")) is True  # 1.37: resource.k8s.io/v1


def test_a_job_named_after_a_long_controller_name_is_found_by_listing(cluster: Cluster) -> None:
    node, name = cluster.node(1), f"{cluster.prefix}-" + "serving-replicas-of-a-very-long-model-name" * 2
    cluster.objects.pod(cluster.ns, "long-0", node, owner=owner("StatefulSet", name))
    assert len(name) > 63  # longer than any label value: the look-up lists the namespace instead
    detail = cluster.backend.execute(command("c1", "restart_job", node=None, job=f"{cluster.ns}/{name}"))
    assert detail == f"deleted 1 pods of job {cluster.ns}/{name} for their controller to recreate"


def test_the_executor_honours_the_job_sources_own_job_labels(kube_apiserver: KubeApiServer, cluster: Cluster) -> None:
    from common.kube_workloads import WorkloadRules

    node, run = cluster.node(1), f"{cluster.prefix}-run-7"
    cluster.objects.pod(cluster.ns, "a-0", node, labels={"team.io/run": run}, owner=owner("StatefulSet", "a"))
    backend = KubernetesBackend(k8s.CoreV1Api(kube_apiserver.client("faultline-executor")), timeout_s=10,
                                rules=WorkloadRules(job_labels=("team.io/run",)))
    with pytest.raises(ExecutionError, match=f"no pods of job {run}"):  # by default the job is "a", its owner
        cluster.backend.execute(command("c1", "restart_job", node=None, job=run))
    assert backend.execute(command("c2", "restart_job", node=None, job=run)).startswith(f"deleted 1 pods of job {run}")


def _fenced_condition(c: Cluster, node: str) -> Any:
    return next((x for x in c.read_node(node).status.conditions or [] if x.type == "FaultlineFenced"), None)


def test_kubectl_sees_each_fence_as_a_node_condition_and_events(cluster: Cluster) -> None:
    """What `kubectl describe node` shows: FaultlineFenced True while anything of faultline's fences the node
    (since the first fence), False once the last is released; an Event per fence and release, on the node,
    written with the chart's role (nodes/status, events)."""
    node = cluster.node(1)
    gpu = gpu_uuid(node, 2)
    done = cluster.backend.execute(command("c1", "quarantine_gpu", node=node, gpu=gpu, incident="inc-7"))
    assert "not shown to kubectl" not in done, done
    first = _fenced_condition(cluster, node)
    assert (first.status, first.reason) == ("True", "Quarantined") and gpu in first.message and "inc-7" in first.message
    cluster.backend.execute(command("c2", "cordon_node", node=node, incident="inc-8"))
    second = _fenced_condition(cluster, node)
    assert (second.status, second.reason) == ("True", "Cordoned")
    assert second.last_transition_time == first.last_transition_time  # fenced since the first fence
    cluster.backend.execute(command("c3", "release_gpu", node=node, gpu=gpu, incident="inc-7"))
    assert _fenced_condition(cluster, node).status == "True"  # the cordon holds
    cluster.backend.execute(command("c4", "release_gpu", node=node, incident="inc-8"))
    last = _fenced_condition(cluster, node)
    assert (last.status, last.reason) == ("False", "Released")
    events = cluster.objects.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    seen = sorted((e.reason, e.type, e.involved_object.kind) for e in events)
    assert seen == [("FaultlineFenced", "Warning", "Node")] * 2 + [("FaultlineReleased", "Normal", "Node")] * 2
