"""One pod -> (job, workload, rank order) for every workload kind people train on, and the lookup
the executor does with the same mapping."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client as k8s

from common.kube_workloads import PodIdentity, Workload, WorkloadRules, identify, matching, order


def pod(name: str, namespace: str = "training", *, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, owner: tuple[str, str] | None = None, gpus: int = 8,
        node: str = "gpu-01") -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {},
                            "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "x/v1", "kind": owner[0], "name": owner[1], "uid": "u",
                                    "controller": True}]
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return k8s.V1Pod.from_dict({"metadata": meta, "spec": {"nodeName": node, "containers": [
        {"name": "train", "image": "x", "resources": resources}]}})


def pytorch(job: str, rtype: str, index: int, namespace: str = "training") -> Any:
    return pod(f"{job}-{rtype}-{index}", namespace, owner=("PyTorchJob", job), labels={
        "training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": rtype,
        "training.kubeflow.org/replica-index": str(index), "training.kubeflow.org/operator-name": "pytorchjob-controller"})


def test_pytorchjob_master_is_rank_zero_then_workers_by_index() -> None:
    pods = [pytorch("llama", "worker", 1), pytorch("llama", "worker", 0), pytorch("llama", "master", 0)]
    random.Random(3).shuffle(pods)
    assert [p.metadata.name for p in order(pods)] == ["llama-master-0", "llama-worker-0", "llama-worker-1"]
    ident = identify(pods[0])
    assert ident.job == "llama" and ident.workload == Workload("PyTorchJob", "training", "llama")
    assert ident.gpus == 8 and ident.node == "gpu-01"


def test_replica_index_orders_numerically_not_as_text() -> None:
    pods = [pytorch("j", "worker", i) for i in (10, 2, 1)]
    assert [p.metadata.name for p in order(pods)] == ["j-worker-1", "j-worker-2", "j-worker-10"]


def test_a_kubeflow_pod_whose_owner_is_gone_is_named_by_its_operator() -> None:
    p = pod("t-worker-0", labels={"training.kubeflow.org/job-name": "t",
                                  "training.kubeflow.org/operator-name": "tfjob-controller"})
    assert identify(p).workload.kind == "TFJob"


def test_jobset_pods_by_global_job_index_then_completion_index() -> None:
    def member(job_index: int, completion: int) -> Any:
        return pod(f"js-workers-{job_index}-{completion}", owner=("Job", f"js-workers-{job_index}"), labels={
            "jobset.sigs.k8s.io/jobset-name": "js", "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/job-index": str(job_index), "jobset.sigs.k8s.io/job-global-index": str(job_index),
            "batch.kubernetes.io/job-name": f"js-workers-{job_index}", "job-name": f"js-workers-{job_index}",
        }, annotations={"batch.kubernetes.io/job-completion-index": str(completion)})
    pods = [member(1, 0), member(0, 1), member(1, 1), member(0, 0)]
    assert [p.metadata.name for p in order(pods)] == ["js-workers-0-0", "js-workers-0-1", "js-workers-1-0",
                                                      "js-workers-1-1"]
    ident = identify(pods[0])
    assert (ident.job, ident.workload) == ("js", Workload("JobSet", "training", "js"))  # not the child Job


def test_a_leaderworkerset_group_is_one_job_named_like_its_leader() -> None:
    def member(group: int, worker: int) -> Any:
        name = f"lws-{group}" if worker == 0 else f"lws-{group}-{worker}"
        return pod(name, owner=("StatefulSet", "lws"), labels={
            "leaderworkerset.sigs.k8s.io/name": "lws", "leaderworkerset.sigs.k8s.io/group-index": str(group),
            "leaderworkerset.sigs.k8s.io/worker-index": str(worker)})
    idents = [identify(member(g, w)) for g in (0, 1) for w in (2, 0, 1)]
    assert {i.job for i in idents} == {"lws-0", "lws-1"}
    assert idents[0].workload == Workload("LeaderWorkerSet", "training", "lws", "0")
    assert [p.metadata.name for p in order([member(1, 2), member(1, 0), member(1, 1)])] == ["lws-1", "lws-1-1",
                                                                                          "lws-1-2"]


def test_indexed_job_ranks_by_completion_index() -> None:
    pods = [pod(f"ix-{c}", owner=("Job", "ix"), labels={"batch.kubernetes.io/job-name": "ix"},
                annotations={"batch.kubernetes.io/job-completion-index": str(c)}) for c in (3, 0, 2, 1)]
    assert [identify(p).order[0] for p in order(pods)] == [0, 1, 2, 3]
    assert identify(pods[0]).workload == Workload("Job", "training", "ix")


def test_an_explicit_job_label_renames_but_keeps_the_controller() -> None:
    p = pytorch("llama", "worker", 0)
    p.metadata.labels["faultline.io/job"] = "llama-70b-run3"
    ident = identify(p)
    assert ident.job == "llama-70b-run3" and ident.workload.kind == "PyTorchJob"


def test_other_controllers_and_bare_pods() -> None:
    assert identify(pod("web-1", owner=("StatefulSet", "web"))).workload == Workload("StatefulSet", "training", "web")
    bare = identify(pod("scratch", labels={"faultline.io/job": "exp"}))
    assert (bare.job, bare.workload) == ("exp", Workload("Pod", "training", "scratch"))


def test_qualified_names_and_the_executors_lookup() -> None:
    a, b = pytorch("llama", "worker", 0, "team-a"), pytorch("llama", "worker", 0, "team-b")
    other = pytorch("gpt", "worker", 0, "team-a")
    assert identify(a, WorkloadRules(qualify_namespace=True)).job == "team-a/llama"
    both = matching("llama", [a, b, other])
    assert sorted(w.namespace for w in both) == ["team-a", "team-b"]  # ambiguous: the executor refuses
    assert list(matching("team-b/llama", [a, b, other])) == [Workload("PyTorchJob", "team-b", "llama")]
    assert matching("team-c/llama", [a, b, other]) == {}


@given(st.lists(st.tuples(st.sampled_from(["master", "worker"]), st.integers(0, 40)), min_size=1, max_size=12,
                unique=True))
def test_rank_order_does_not_depend_on_listing_order(replicas: list[tuple[str, int]]) -> None:
    pods = [pytorch("j", t, i) for t, i in replicas]
    once = [p.metadata.name for p in order(pods)]
    assert [p.metadata.name for p in order(list(reversed(pods)))] == once
    idents: list[PodIdentity] = [identify(p) for p in order(pods)]
    masters = [i for i in idents if i.order[0] == 0]  # a master's place starts with 0, a worker's with 1
    assert idents[: len(masters)] == masters and len(masters) == sum(t == "master" for t, _ in replicas)
