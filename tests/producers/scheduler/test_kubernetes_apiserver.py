"""The kubernetes job source against a real kube-apiserver: PyTorchJob, JobSet and indexed-Job pods
become jobs with the ranks their workload gives them; a failed pod fails the job; nodes report
readiness. Run as the job source's own user, under the chart's ClusterRole (least privilege)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

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
    source = KubernetesSource(kube_apiserver.client(), PodRules(), namespace=ns, nodes=False, page_size=2)
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
    source = KubernetesSource(kube_apiserver.client(), PodRules(), jobs=False)
    mine = [o for o in source.poll(NOW) if str(o.get("node", "")).startswith(ns)]
    assert mine == [{"ts": "2026-04-22T03:30:00.000+00:00", "source": "scheduler", "event": "node_not_ready",
                     "node": f"{ns}-down", "reason": "KubeletNotReady: test"}]
