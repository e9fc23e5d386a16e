"""A PyTorchJob fails on a real (test) Kubernetes API server, end to end.

Two PyTorchJobs run; the job source lists their pods (training-operator labels); GPU 3 of a
node job A runs on falls off the bus and a worker dies. The capture (inventory, what the job
source reported, the XID line, the worker exit, the job source's ``job_failed``) goes through
the correlator, and the commands it decides go through the Kubernetes executor against the
same API server: the GPU is fenced, and exactly job A's pods are deleted for the training
operator to recreate -- never job B's. Two clusters:

- ``device-plugin``: pods ask for ``nvidia.com/gpu``, one job per node; the quarantine is the
  node taint (the device plugin cannot fence one GPU).
- ``dra``: pods get their GPUs through ResourceClaims, and job B shares the failing node with
  job A (GPUs 4-7 beside A's 0-3): the job source knows each pod's exact GPUs from the
  allocation, only A is blamed, the one GPU gets a DeviceTaintRule and the node stays in
  service for B.

``test_decisions_in_process`` runs the correlator in-process (``decide_offline``, the same engine
and capture screen as the worker); ``test_through_faultline_replay`` runs ``faultline replay``'s
path (broker, Faust worker, archive) on the DRA cluster."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from common.settings import Settings
from faultline.outcome import decide_offline
from producers.scheduler.dra_gpus import DraGpus
from producers.scheduler.kubernetes import KubernetesSource
from producers.scheduler.kubernetes_pods import PodRules
from sinks.executors.core import Executor
from sinks.executors.kubernetes import QUARANTINE_TAINT, KubernetesBackend
from sinks.executors.kubernetes_dra import rule_name
from sinks.executors.ledger import ResultLedger
from streams.decisions import Command
from tests.kube_apiserver import KubeApiServer
from tests.kube_objects import Objects, gpu_uuid, owner

pytestmark = pytest.mark.timeout(300)
PCI = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
NOW = datetime(2026, 4, 22, 3, 40, tzinfo=UTC)


@dataclass
class Scene:
    objects: Objects
    ns: str
    mode: str
    failing_node: str
    pods: dict[str, list[str]]  # job -> its pods
    capture: list[str]


def _line(**fields: Any) -> str:
    return json.dumps(fields)


def _pytorchjob(objects: Objects, ns: str, job: str, places: list[tuple[str, list[int]]], mode: str) -> list[str]:
    """The job's object and its pods, master first: one pod per (node, GPU indices)."""
    obj = objects.custom_object("PyTorchJob", ns, job)
    ref = owner("PyTorchJob", job, obj["metadata"]["uid"])
    names = []
    for i, (node, gpus) in enumerate(places):
        rtype, index = ("master", 0) if i == 0 else ("worker", i - 1)
        names.append(f"{job}-{rtype}-{index}")
        labels = {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": rtype,
                  "training.kubeflow.org/replica-index": str(index),
                  "training.kubeflow.org/operator-name": "pytorchjob-controller"}
        if mode == "dra":
            objects.claimed_pod(ns, names[-1], node, [f"gpu-{g}" for g in gpus], owner=ref, labels=labels)
        else:
            objects.pod(ns, names[-1], node, gpus=len(gpus), owner=ref, labels=labels)
    return names


@pytest.fixture(params=["device-plugin", "dra"])
def scene(request: pytest.FixtureRequest, kube_apiserver: KubeApiServer) -> Iterator[Scene]:
    mode: str = request.param
    objects = Objects(kube_apiserver.client())
    prefix = "r" + uuid.uuid4().hex[:6]
    ns = objects.namespace(f"{prefix}-training")
    nodes = [f"{prefix}-gpu-{i}" for i in range(1, 5)]
    capture = []
    for n in nodes:
        objects.node(n)
        if mode == "dra":
            objects.resource_slice(n)  # the DRA driver publishes every GPU as a device
        capture.append(_line(ts="2026-04-22T03:00:00.000+00:00", source="inventory", node=n, rack="r1", gpus=[
            {"index": i, "uuid": gpu_uuid(n, i), "pci_bus_id": f"00000000:{PCI[i]}:00.0",
             "name": "NVIDIA H100 80GB HBM3"} for i in range(8)]))
    llama, mistral = f"{prefix}-llama", f"{prefix}-mistral"
    if mode == "dra":  # the failing node carries both jobs: A on GPUs 0-3, B on 4-7
        places = {llama: [(nodes[0], list(range(8))), (nodes[1], [0, 1, 2, 3])],
                  mistral: [(nodes[2], list(range(8))), (nodes[1], [4, 5, 6, 7])]}
    else:
        places = {llama: [(nodes[0], list(range(8))), (nodes[1], list(range(8)))],
                  mistral: [(nodes[2], list(range(8))), (nodes[3], list(range(8)))]}
    pods = {job: _pytorchjob(objects, ns, job, where, mode) for job, where in places.items()}
    client = kube_apiserver.client("faultline-jobsource")
    source = KubernetesSource(client, PodRules(assigned=DraGpus(client) if mode == "dra" else None),
                              namespace=ns, nodes=False)
    capture += [json.dumps(o) for o in source.poll(NOW)]  # both jobs started
    capture += [
        _line(ts="2026-04-22T03:10:00.000+00:00", source="trainer", job=llama, rank=0, node=nodes[0],
              event="checkpoint_saved", step=1200, path="/ckpt/llama/1200", bytes=1 << 30, seconds=12.0),
        _line(ts="2026-04-22T03:23:20.000+00:00", source="kernel", node=nodes[1],
              line="NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
        _line(ts="2026-04-22T03:23:21.500+00:00", source="torchelastic", job=llama, node=nodes[1], rank=11,
              exitcode=1, error_file=None),
    ]
    objects.set_phase(ns, f"{llama}-worker-0", "Failed")
    capture += [json.dumps(o) for o in source.poll(NOW)]  # job_failed
    source.close()
    yield Scene(objects, ns, mode, nodes[1], pods, capture)
    objects.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    objects.core.delete_namespace(ns)


def _execute(server: KubeApiServer, commands: list[dict[str, Any]]) -> dict[str, str]:
    backend = KubernetesBackend(k8s.CoreV1Api(server.client("faultline-executor")), device_taints=True, timeout_s=10)
    executor = Executor(backend, ResultLedger())
    results = {}
    for raw in commands:
        cmd = Command.model_validate(raw)
        if backend.supports(cmd.type):
            result = executor.handle(cmd, NOW)
            results[cmd.type] = f"{result.status}: {result.detail}"
    return results


def _check(scene: Scene, server: KubeApiServer, decided: dict[str, Any]) -> None:
    llama, mistral = sorted(scene.pods)
    [incident] = [i for i in decided["incidents"] if i["job"] == llama]
    assert incident["category"] == "gpu_off_bus"
    assert [i for i in decided["incidents"] if i["job"] == mistral] == []  # B shares the node, not the GPU
    bad = gpu_uuid(scene.failing_node, 3)
    types = [(c["type"], c["target"].get("gpu")) for c in decided["commands"] if c["type"] != "open_ticket"]
    assert ("quarantine_gpu", bad) in types and ("restart_job", None) in types
    assert types.index(("quarantine_gpu", bad)) < types.index(("restart_job", None))

    results = _execute(server, decided["commands"])
    fence = "DeviceTaintRule" if scene.mode == "dra" else "taint faultline.io/quarantine:NoSchedule"
    assert results["quarantine_gpu"].startswith(f"done: quarantined GPU {bad} on node {scene.failing_node} "
                                                f"({fence}"), results
    assert results["restart_job"].startswith(f"done: deleted 2 pods of PyTorchJob {scene.ns}/{llama}"), results
    live = scene.objects.pods(scene.ns) - scene.objects.terminating(scene.ns)  # a Failed pod goes at once
    assert live == set(scene.pods[mistral])  # all of A's pods deleted, none of B's
    node = scene.objects.core.read_node(scene.failing_node)
    if scene.mode == "dra":
        rule = scene.objects.resource.read_device_taint_rule(rule_name(scene.failing_node, bad))
        assert rule.spec.device_selector.device == "gpu-3"
        assert not node.spec.unschedulable and QUARANTINE_TAINT not in [t.key for t in node.spec.taints or []]
        scene.objects.resource.delete_device_taint_rule(rule.metadata.name)
    else:
        assert QUARANTINE_TAINT in [t.key for t in node.spec.taints]


def test_decisions_in_process(scene: Scene, kube_apiserver: KubeApiServer) -> None:
    _check(scene, kube_apiserver, decide_offline(scene.capture))


@pytest.mark.broker
@pytest.mark.parametrize("scene", ["dra"], indirect=True)  # the broker path once, on the DRA cluster
def test_through_faultline_replay(scene: Scene, kube_apiserver: KubeApiServer, kafka_bootstrap: str,
                                  tmp_path: Path, unique_name: str) -> None:
    from faultline.outcome import collate
    from faultline.pipeline import replay

    capture = tmp_path / "pytorchjob_gpu_off_bus.jsonl"
    capture.write_text("\n".join(scene.capture) + "\n")
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name,
                        archive=f"chdb://{tmp_path / 'archive'}")
    run = replay(capture, settings)
    assert run.bad == 0
    _check(scene, kube_apiserver, collate(run.incidents, run.commands))
