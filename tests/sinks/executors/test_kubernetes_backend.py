"""The Kubernetes backend: the real ``kubernetes`` client against a local HTTP server that serves
recorded API responses (``k8s_api/``) and records every request, so the exact bodies are checked."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from sinks.executors.core import ExecutionError
from sinks.executors.kubernetes import KubernetesBackend

from .commands import command
from .http_recorder import RecordingServer, Reply, Request

RECORDED = Path(__file__).parent / "k8s_api"
NODE = "gpu-node-07"
GPU = "GPU-5e0f3c2a-8b1d-4f6e-9a7c-2d4b6e8f0a1c"
SMP = "application/strategic-merge-patch+json"


def recorded(name: str) -> Any:
    return json.loads((RECORDED / f"{name}.json").read_text())


@dataclass
class FakeApiServer:
    """Answers the API paths the backend uses from recorded responses; tests queue other answers."""

    nodes: dict[str, Any] = field(default_factory=lambda: {NODE: recorded("node")})
    queued: dict[tuple[str, str], list[Reply]] = field(default_factory=dict)

    def queue(self, method: str, path: str, *replies: Reply) -> None:
        self.queued.setdefault((method, path), []).extend(replies)

    def answer(self, req: Request) -> Reply:
        waiting = self.queued.get((req.method, req.path))
        if waiting:
            return waiting.pop(0)
        parts = req.path.strip("/").split("/")
        if req.method == "GET" and req.path == "/api/v1/nodes":
            return Reply(200, recorded("nodes"))
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            node = self.nodes.get(parts[3])
            return Reply(200, node) if node else Reply(404, recorded("node_not_found"))
        if req.method == "GET" and req.path == "/api/v1/pods":
            return Reply(200, recorded("job_pods" if "labelSelector" in req.query else "pods_on_node"))
        if req.method == "POST" and req.path.endswith("/eviction"):
            return Reply(201, recorded("eviction_created"))
        if req.method == "DELETE" and parts[4:5] == ["pods"]:
            return Reply(200, next(p for p in recorded("job_pods")["items"] if p["metadata"]["name"] == parts[5]))
        return Reply(404, {"kind": "Status", "code": 404, "message": f"no route {req.method} {req.path}"})


@dataclass
class Cluster:
    api: FakeApiServer
    server: RecordingServer
    backend: KubernetesBackend
    sleeps: list[float]

    def sent(self, method: str | None = None) -> list[Request]:
        return [r for r in self.server.requests if method is None or r.method == method]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    api = FakeApiServer()
    with RecordingServer(api.answer) as server:
        client = k8s.ApiClient(k8s.Configuration(host=server.url))
        sleeps: list[float] = []
        # the fence's own requests, exactly: the marks kubectl shows are checked on their own (below) and
        # against a real API server (test_kubernetes_apiserver.py)
        yield Cluster(api, server, KubernetesBackend(k8s.CoreV1Api(client), sleep=sleeps.append, timeout_s=5,
                                                     marks=False), sleeps)


def test_cordon_patches_the_node_unschedulable(cluster: Cluster) -> None:
    detail = cluster.backend.execute(command("c1", "cordon_node", node=NODE, incident="inc-7"))
    assert detail == f"cordoned node {NODE}"
    [patch] = cluster.sent("PATCH")
    assert patch.path == f"/api/v1/nodes/{NODE}" and patch.headers["content-type"] == SMP
    assert patch.json() == {"metadata": {"annotations": {"faultline.io/cordoned-by": "inc-7"}},
                            "spec": {"unschedulable": True}}


def test_a_node_cordoned_by_a_person_is_left_as_it_is(cluster: Cluster) -> None:
    cluster.api.nodes[NODE]["spec"]["unschedulable"] = True
    assert "not by faultline" in cluster.backend.execute(command("c1", "cordon_node", node=NODE))
    assert cluster.sent("PATCH") == []


def test_quarantine_adds_our_taint_beside_the_existing_ones(cluster: Cluster) -> None:
    detail = cluster.backend.execute(command("c1", "quarantine_gpu", node=NODE, gpu=GPU))
    assert detail.startswith(f"quarantined GPU {GPU} on node {NODE}")
    [patch] = cluster.sent("PATCH")
    assert patch.headers["content-type"] == SMP
    assert patch.json() == {
        "metadata": {"resourceVersion": "4811207", "annotations": {"faultline.io/quarantined-gpus": GPU}},
        "spec": {"taints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "faultline.io/quarantine", "value": GPU, "effect": "NoSchedule"},
        ]},
    }


def test_a_second_gpu_of_a_tainted_node_joins_the_annotation(cluster: Cluster) -> None:
    node = cluster.api.nodes[NODE]
    node["metadata"]["annotations"]["faultline.io/quarantined-gpus"] = GPU
    node["spec"]["taints"].append({"key": "faultline.io/quarantine", "value": GPU, "effect": "NoSchedule"})
    cluster.backend.execute(command("c1", "quarantine_gpu", node=NODE, gpu="GPU-0000"))
    [patch] = cluster.sent("PATCH")
    assert patch.json()["metadata"]["annotations"] == {"faultline.io/quarantined-gpus": f"GPU-0000,{GPU}"}
    assert [t["key"] for t in patch.json()["spec"]["taints"]] == ["nvidia.com/gpu", "faultline.io/quarantine"]
    assert "as it already was" in cluster.backend.execute(command("c2", "quarantine_gpu", node=NODE, gpu=GPU))


def test_a_concurrent_node_change_is_redone_on_a_fresh_read(cluster: Cluster) -> None:
    cluster.api.queue("PATCH", f"/api/v1/nodes/{NODE}", Reply(409, recorded("node_conflict")))
    cluster.backend.execute(command("c1", "quarantine_gpu", node=NODE, gpu=GPU))
    assert [r.method for r in cluster.server.requests] == ["GET", "PATCH", "GET", "PATCH"]


def test_release_removes_the_last_gpu_with_its_taint(cluster: Cluster) -> None:
    node = cluster.api.nodes[NODE]
    node["metadata"]["annotations"]["faultline.io/quarantined-gpus"] = GPU
    node["spec"]["taints"].append({"key": "faultline.io/quarantine", "value": GPU, "effect": "NoSchedule"})
    assert cluster.backend.execute(command("c1", "release_gpu", node=NODE, gpu=GPU)) == f"released GPU {GPU} on {NODE}"
    [patch] = cluster.sent("PATCH")
    assert patch.json() == {
        "metadata": {"resourceVersion": "4811207", "annotations": {"faultline.io/quarantined-gpus": None}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    }


def test_releasing_the_node_undoes_only_our_own_cordon(cluster: Cluster) -> None:
    node = cluster.api.nodes[NODE]
    node["spec"]["unschedulable"] = True
    assert "nothing of faultline's" in cluster.backend.execute(command("c1", "release_gpu", node=NODE))
    node["metadata"]["annotations"]["faultline.io/cordoned-by"] = "inc-7"
    cluster.backend.execute(command("c2", "release_gpu", node=NODE))
    [patch] = cluster.sent("PATCH")
    assert patch.json()["metadata"]["annotations"]["faultline.io/cordoned-by"] is None
    assert patch.json()["spec"]["unschedulable"] is False


def test_drain_cordons_then_evicts_all_but_daemonset_static_and_finished_pods(cluster: Cluster) -> None:
    detail = cluster.backend.execute(command("c1", "drain_node", node=NODE, incident="inc-7"))
    assert detail == (f"cordoned node {NODE}; evicted 2 pods (3 DaemonSet/static/finished left)")
    methods = [(r.method, r.path) for r in cluster.server.requests]
    assert methods == [
        ("GET", f"/api/v1/nodes/{NODE}"),
        ("PATCH", f"/api/v1/nodes/{NODE}"),
        ("GET", "/api/v1/pods"),
        ("POST", "/api/v1/namespaces/training/pods/llm-pretrain-worker-3/eviction"),
        ("POST", "/api/v1/namespaces/research/pods/notebook-alice-0/eviction"),
    ]
    assert cluster.server.requests[2].query == {"fieldSelector": [f"spec.nodeName={NODE}"]}
    assert cluster.sent("POST")[0].json() == {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "llm-pretrain-worker-3", "namespace": "training"},
    }


def test_drain_retries_evictions_a_disruption_budget_refuses(cluster: Cluster) -> None:
    path = "/api/v1/namespaces/training/pods/llm-pretrain-worker-3/eviction"
    cluster.api.queue("POST", path, Reply(429, recorded("eviction_refused")))
    cluster.backend.execute(command("c1", "drain_node", node=NODE))
    assert [r.path for r in cluster.sent("POST")].count(path) == 2
    assert cluster.sleeps == [2.0]


def test_drain_fails_naming_the_pods_still_protected(cluster: Cluster) -> None:
    path = "/api/v1/namespaces/training/pods/llm-pretrain-worker-3/eviction"
    cluster.api.queue("POST", path, *[Reply(429, recorded("eviction_refused"))] * 5)
    with pytest.raises(ExecutionError, match="refused after 5 tries .*: training/llm-pretrain-worker-3$"):
        cluster.backend.execute(command("c1", "drain_node", node=NODE))
    assert len(cluster.sleeps) == 4


def test_restart_deletes_the_jobs_pods_once_excluded_nodes_are_fenced(cluster: Cluster) -> None:
    cluster.api.nodes[NODE]["spec"]["unschedulable"] = True
    cmd = command("c1", "restart_job", node=None, job="llm-pretrain",
                  params={"exclude": {"nodes": [NODE, "gpu-node-99"], "gpus": []}})  # 99: gone, so fenced
    detail = cluster.backend.execute(cmd)
    assert detail == (f"deleted 2 pods of job llm-pretrain for their controller to recreate; "
                      f"excluded nodes fenced: {NODE}, gpu-node-99")
    [listing] = [r for r in cluster.sent("GET") if r.path == "/api/v1/pods"]
    assert listing.query == {"labelSelector": ["faultline.io/job=llm-pretrain"]}
    assert [r.path for r in cluster.sent("DELETE")] == ["/api/v1/namespaces/training/pods/llm-pretrain-worker-0",
                                                        "/api/v1/namespaces/training/pods/llm-pretrain-worker-1"]


def test_restart_refuses_while_an_excluded_node_is_schedulable(cluster: Cluster) -> None:
    cmd = command("c1", "restart_job", node=None, job="llm-pretrain", params={"exclude": {"nodes": [NODE]}})
    with pytest.raises(ExecutionError, match=f"excluded nodes still schedulable: {NODE}"):
        cluster.backend.execute(cmd)
    assert cluster.sent("DELETE") == []


def test_a_tainted_node_counts_as_fenced(cluster: Cluster) -> None:
    node = cluster.api.nodes[NODE]
    node["spec"]["taints"] = [*copy.deepcopy(node["spec"]["taints"]),
                              {"key": "faultline.io/quarantine", "value": GPU, "effect": "NoSchedule"}]
    cmd = command("c1", "restart_job", node=None, job="llm-pretrain", params={"exclude": {"nodes": [NODE]}})
    assert cluster.backend.execute(cmd).startswith("deleted 2 pods")


def test_api_refusals_become_execution_errors_with_the_apis_message(cluster: Cluster) -> None:
    cluster.api.queue("PATCH", f"/api/v1/nodes/{NODE}", Reply(403, recorded("forbidden")))
    with pytest.raises(ExecutionError, match=r"patch node gpu-node-07: HTTP 403 .*cannot patch resource"):
        cluster.backend.execute(command("c1", "cordon_node", node=NODE))


def test_fleet_size_counts_the_nodes(cluster: Cluster) -> None:
    assert cluster.backend.fleet_size() == 4


def test_unreachable_api_leaves_the_fleet_size_unknown() -> None:
    client = k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9"))
    client.configuration.retries = 0
    assert KubernetesBackend(k8s.CoreV1Api(client), timeout_s=1).fleet_size() is None


def test_an_api_without_resource_k8s_io_v1_serves_no_device_taint_rules(cluster: Cluster) -> None:
    """(from_environment then builds a backend without per-GPU fencing: the node-taint tests above)"""
    from sinks.executors.kubernetes_dra import served

    assert served(cluster.backend.api.api_client, timeout_s=5) is False  # the recorded API answers 404
    assert cluster.sent("GET")[-1].path.rstrip("/") == "/apis/resource.k8s.io/v1"


def test_a_fence_is_marked_where_kubectl_looks_and_a_refused_mark_is_said_not_failed() -> None:
    """After the fence's own patch: the node's FaultlineFenced condition (status subresource, strategic merge
    by type) and an Event on the node; a server that refuses both still returns the fence as done, saying so."""
    api = FakeApiServer()
    api.queue("PATCH", f"/api/v1/nodes/{NODE}/status", Reply(200, recorded("node")))
    api.queue("POST", "/api/v1/namespaces/default/events", Reply(201, {
        "kind": "Event", "apiVersion": "v1", "metadata": {"name": "e1", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": NODE}}))
    with RecordingServer(api.answer) as server:
        backend = KubernetesBackend(k8s.CoreV1Api(k8s.ApiClient(k8s.Configuration(host=server.url))), timeout_s=5)
        assert backend.execute(command("c1", "cordon_node", node=NODE, incident="inc-7")) == f"cordoned node {NODE}"
        status = next(r for r in server.requests if r.path == f"/api/v1/nodes/{NODE}/status")
        [condition] = status.json()["status"]["conditions"]
        assert status.headers["content-type"] == SMP
        assert {k: condition[k] for k in ("type", "status", "reason")} == {
            "type": "FaultlineFenced", "status": "True", "reason": "Cordoned"}
        assert "inc-7" in condition["message"] and condition["lastTransitionTime"].endswith("Z")
        event = next(r for r in server.requests if r.path == "/api/v1/namespaces/default/events").json()
        assert event["involvedObject"] == {"kind": "Node", "name": NODE, "uid": NODE, "apiVersion": "v1"}
        assert (event["reason"], event["type"]) == ("FaultlineFenced", "Warning")
        refused = backend.execute(command("c2", "cordon_node", node=NODE, incident="inc-7"))  # 404s this time
        assert refused.startswith(f"cordoned node {NODE}; not shown to kubectl: node condition FaultlineFenced "
                                  "(HTTP 404") and "event (HTTP 404" in refused
