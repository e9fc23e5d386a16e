"""The kubernetes job source against a real kube-apiserver: PyTorchJob, JobSet and indexed-Job pods
become jobs with the ranks their workload gives them; a failed pod fails the job; nodes report
readiness. Run as the job source's own user, under the chart's ClusterRole (least privilege)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from producers.scheduler.kubernetes import KubernetesSource
from producers.scheduler.kubernetes_pods import PodRules
from tests.kube_apiserver import KubeApiServer
from tests.kube_objects import Objects, owner

pytestmark = pytest.mark.timeout(120)
NOW = datetime(2026, 4, 22, 3, 30, tzinfo=UTC)


@pytest.fixture
def ns(kube_apiserver: KubeApiServer) -> Iterator[str]:
    objects = Objects(kube_apiserver.client())
    name = objects.namespace("t" + uuid.uuid4().hex[:8])
    yield name
    objects.core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    objects.core.delete_namespace(name)


def test_workloads_become_jobs_with_their_ranks(kube_apiserver: KubeApiServer, ns: str) -> None:
    objects = Objects(kube_apiserver.client())
    nodes = [f"{ns}-n{i}" for i in range(4)]
    for n in nodes:
        objects.node(n)
    labels = {"training.kubeflow.org/job-name": "llama", "training.kubeflow.org/operator-name": "pytorchjob-controller"}
    # listed in name order worker-0 < worker-1 < master-0 would be wrong; the master is rank 0
    for name, node, rtype, index in (("llama-worker-1", nodes[2], "worker", 1), ("llama-master-0", nodes[0], "master", 0),
                                     ("llama-worker-0", nodes[1], "worker", 0)):
        objects.pod(ns, name, node, owner=owner("PyTorchJob", "llama"), labels={
            **labels, "training.kubeflow.org/replica-type": rtype, "training.kubeflow.org/replica-index": str(index)})
    for c in (1, 0):
        objects.pod(ns, f"ix-{c}", nodes[3], gpus=4, owner=owner("Job", "ix"),
                    labels={"batch.kubernetes.io/job-name": "ix", "batch.kubernetes.io/job-completion-index": str(c)},
                    annotations={"batch.kubernetes.io/job-completion-index": str(c)})
    source = KubernetesSource(kube_apiserver.client("faultline-jobsource"), PodRules(), namespace=ns, nodes=False,
                              page_size=2)
    started = {o["job"]: o for o in source.poll(NOW)}
    assert set(started) == {"llama", "ix"} and all(o["event"] == "job_started" for o in started.values())
    assert [(a["node"], a["ranks"][0]) for a in started["llama"]["allocation"]] == [
        (nodes[0], 0), (nodes[1], 8), (nodes[2], 16)]
    assert started["llama"]["world_size"] == 24 and started["llama"]["owner"] == ns
    assert started["ix"]["allocation"] == [{"node": nodes[3], "gpus": [], "ranks": list(range(8))}]

    objects.set_phase(ns, "llama-worker-0", "Failed")
    assert [(o["event"], o["job"], o["ts"]) for o in source.poll(NOW)] == [
        ("job_failed", "llama", "2026-04-22T03:24:01.000+00:00")]
    source.close()


def test_node_readiness_from_a_real_node_status(kube_apiserver: KubeApiServer, ns: str) -> None:
    objects = Objects(kube_apiserver.client())
    objects.node(f"{ns}-ok")
    objects.node(f"{ns}-down", ready=False)
    source = KubernetesSource(kube_apiserver.client("faultline-jobsource"), PodRules(), jobs=False)
    mine = [o for o in source.poll(NOW) if str(o.get("node", "")).startswith(ns)]
    assert mine == [{"ts": "2026-04-22T03:30:00.000+00:00", "source": "scheduler", "event": "node_not_ready",
                     "node": f"{ns}-down", "reason": "KubeletNotReady: test"}]


def test_gpus_come_from_the_kubelet_through_the_nodes_agent(kube_apiserver: KubeApiServer, ns: str,
                                                            tmp_path: Path) -> None:
    """fake kubelet (PodResources gRPC) -> the node agent's kubelet_gpus source -> its metrics port ->
    the job source (finding the agent pod through the API) -> the job's allocation names those GPUs."""
    from kubernetes import client as k8s
    from prometheus_client import start_http_server

    from producers.node.kubelet_gpus import KubeletGpus
    from producers.scheduler.agent_gpus import AgentGpus
    from tests.kube_objects import gpu_uuid
    from tests.producers.node.fake_kubelet import fake_kubelet

    objects = Objects(kube_apiserver.client())
    node = f"{ns}-n1"
    objects.node(node)
    labels = {"training.kubeflow.org/job-name": "gpt", "training.kubeflow.org/operator-name": "pytorchjob-controller"}
    for name, rtype in (("gpt-master-0", "master"), ("gpt-worker-0", "worker")):  # two 4-GPU pods, one node
        objects.pod(ns, name, node, gpus=4, owner=owner("PyTorchJob", "gpt"), labels={
            **labels, "training.kubeflow.org/replica-type": rtype, "training.kubeflow.org/replica-index": "0"})
    objects.pod(ns, "agent-x", node, gpus=0, labels={"app.kubernetes.io/component": "agent"})
    objects.core.patch_namespaced_pod_status("agent-x", ns, {"status": {"podIP": "127.0.0.1",
                                                                         "podIPs": [{"ip": "127.0.0.1"}]}})
    server, thread = start_http_server(0, addr="127.0.0.1")
    uuids = [gpu_uuid(node, i) for i in range(8)]
    try:
        with fake_kubelet(tmp_path) as (kubelet, socket):
            agent = KubeletGpus(node, socket, indices=lambda: {u.lower(): i for i, u in enumerate(uuids)})
            kubelet.pods = [(ns, "gpt-master-0", {"train": {"nvidia.com/gpu": uuids[4:]}})]  # worker not yet
            agent.poll(NOW)
            assigned = AgentGpus(k8s.CoreV1Api(kube_apiserver.client("faultline-jobsource")), ns,
                                 "app.kubernetes.io/component=agent", server.server_port, refresh_s=0)
            source = KubernetesSource(kube_apiserver.client("faultline-jobsource"), PodRules(assigned=assigned),
                                      namespace=ns, nodes=False, hold_s=30)
            assert source.poll(NOW) == []  # held: worker-0's GPUs are not reported yet
            kubelet.pods.append((ns, "gpt-worker-0", {"train": {"nvidia.com/gpu": uuids[:4]}}))
            agent.poll(NOW)
            [started] = source.poll(NOW)
            assert started["allocation"] == [{"node": node, "gpus": [4, 5, 6, 7, 0, 1, 2, 3],
                                              "ranks": list(range(8)), "gpu_uuids": uuids[4:] + uuids[:4]}]
            agent.close()
    finally:
        server.shutdown()
        thread.join(5)


def test_the_watch_reports_changes_and_lists_again_after_410_gone(kube_apiserver: KubeApiServer, ns: str) -> None:
    import threading

    from producers.scheduler.kubernetes_watch import WatchCache
    from tests.servers import wait_until

    objects = Objects(kube_apiserver.client())
    node = f"{ns}-n1"
    objects.node(node)
    source = KubernetesSource(kube_apiserver.client("faultline-jobsource"), PodRules(), namespace=ns, nodes=False,
                              watch=True, page_size=1)
    assert source.poll(NOW) == []  # listed; the watch runs from here
    assert isinstance(source._pods, WatchCache)
    source._pods.watch_s = 1  # the server ends each watch after a second: resumes are exercised too
    for i in range(2):
        objects.pod(ns, f"ix-{i}", node, gpus=4, owner=owner("Job", "ix"),
                    labels={"batch.kubernetes.io/job-name": "ix"},
                    annotations={"batch.kubernetes.io/job-completion-index": str(i)})
    seen: list[dict[str, object]] = []
    wait_until(lambda: bool(seen.extend(source.poll(NOW)) or seen), 30, "the pods seen through the watch")
    assert [(o["event"], o["job"], o["world_size"]) for o in seen] == [("job_started", "ix", 8)]

    # The job source away (its watch not resuming) while etcd compacts its history past the version
    # it holds and a pod fails: the resumed watch gets 410 Gone, and only a new list sees the failure.
    source._pods._stop.set()
    assert source._pods._thread is not None
    source._pods._thread.join(10)
    objects.set_phase(ns, "ix-1", "Failed")
    kube_apiserver.compact_etcd()
    source._pods._stop.clear()
    source._pods._thread = None  # the next look lists (and watches) again, as after a restart of the watch
    source._pods._synced = True
    held = source._pods._version
    source._pods._thread = threading.Thread(target=source._pods._run, daemon=True)
    source._pods._thread.start()
    failed: list[dict[str, object]] = []

    def look() -> bool:
        try:
            failed.extend(source.poll(NOW))
        except RuntimeError as exc:  # between the 410 and the new list: the poll fails (the agent backs off)
            assert "the watch failed" in str(exc) and "410" in str(exc)
        return bool(failed)

    wait_until(look, 60, "the failure seen after relisting")
    assert [(o["event"], o["job"]) for o in failed] == [("job_failed", "ix")]
    assert source._pods.relists >= 2 and source._pods._version != held
    source.close()


def test_restart_budget_and_elasticity_come_from_the_workload(kube_apiserver: KubeApiServer, ns: str) -> None:
    objects = Objects(kube_apiserver.client())
    node = f"{ns}-n1"
    objects.node(node)
    obj = objects.custom_object("PyTorchJob", ns, "el", spec={
        "runPolicy": {"backoffLimit": 7}, "elasticPolicy": {"minReplicas": 1, "maxReplicas": 4}})
    for i in range(2):
        objects.pod(ns, f"el-worker-{i}", node, gpus=2, owner=owner("PyTorchJob", "el", obj["metadata"]["uid"]),
                    labels={"training.kubeflow.org/job-name": "el", "training.kubeflow.org/replica-type": "worker",
                            "training.kubeflow.org/replica-index": str(i)})
    source = KubernetesSource(kube_apiserver.client("faultline-jobsource"), PodRules(max_restarts=3), namespace=ns,
                              nodes=False, read_workloads=True)
    [started] = source.poll(NOW)
    assert (started["max_restarts"], started["elastic"]) == (7, {"min_gpus": 2, "max_gpus": 8})
    source.close()


def test_dra_pods_gpus_are_the_devices_allocated_to_their_claims(kube_apiserver: KubeApiServer, ns: str) -> None:
    from producers.scheduler.dra_gpus import DraGpus
    from tests.kube_objects import gpu_uuid

    objects = Objects(kube_apiserver.client())
    node = f"{ns}-n1"
    objects.node(node)
    objects.resource_slice(node)
    labels = {"training.kubeflow.org/job-name": "dra", "training.kubeflow.org/operator-name": "pytorchjob-controller"}
    for name, rtype, devices in (("dra-master-0", "master", ["gpu-6", "gpu-7"]),
                                 ("dra-worker-0", "worker", ["gpu-1", "gpu-0"])):
        objects.claimed_pod(ns, name, node, devices, owner=owner("PyTorchJob", "dra"), labels={
            **labels, "training.kubeflow.org/replica-type": rtype, "training.kubeflow.org/replica-index": "0"})
    client = kube_apiserver.client("faultline-jobsource")
    source = KubernetesSource(client, PodRules(assigned=DraGpus(client)), namespace=ns, nodes=False)
    [started] = source.poll(NOW)
    assert started["allocation"] == [{"node": node, "gpus": [6, 7, 0, 1], "ranks": [0, 1, 2, 3],
                                      "gpu_uuids": [gpu_uuid(node, i) for i in (6, 7, 0, 1)]}]
    assert started["world_size"] == 4  # no nvidia.com/gpu limit anywhere: the claims' devices count
    assert KubernetesSource(client, PodRules(), namespace=ns, nodes=False).poll(NOW) == []  # without DRA: no GPUs
    source.close()
