"""The kubelet_gpus source against a local server that speaks the kubelet's PodResourcesLister
protocol: pods' GPUs (device-plugin UUIDs, time-slicing replicas folded) exported as
faultline_pod_gpu_info, gone pods dropped; and the committed stubs match the kubelet's api.proto."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest

from producers.node.kubelet_gpus import KubeletGpus, create, list_pod_gpus
from producers.registry import SourceContext
from producers.scheduler.agent_gpus import parse_pod_gpus
from tests.producers.node.fake_kubelet import fake_kubelet

NOW = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
A, B, C = ("GPU-1a93c00c-983f-97a3-67ee-1c6b937fb67c", "GPU-2e56bd2c-b465-7d30-52c2-427c93f21e22",
           "GPU-9cdf59c7-82c4-b24b-d34f-8fe1ef803563")
STUBS = Path(__file__).resolve().parents[3] / "producers" / "node" / "podresources" / "v1"


def _mine(node: str) -> dict[tuple[str, str], list[tuple[str, int | None]]]:
    text = generate_latest(REGISTRY).decode()
    lines = "\n".join(line for line in text.splitlines() if f'node="{node}"' in line or line.startswith("#"))
    return parse_pod_gpus(lines)


def test_pods_gpus_are_listed_and_exported_then_dropped(tmp_path: Path) -> None:
    with fake_kubelet(tmp_path) as (kubelet, socket):
        kubelet.pods = [
            ("training", "llama-worker-0", {"train": {"nvidia.com/gpu": [B, A], "rdma/hca": ["mlx5_0"]}}),
            ("training", "eval-0", {"main": {"nvidia.com/gpu": [f"{C}::0", f"{C}::3"]}}),  # time-sliced: one GPU
            ("kube-system", "coredns-1", {"coredns": {}}),
        ]
        gpus = list_pod_gpus(socket, ["nvidia.com/gpu"])
        assert sorted((g.pod, g.uuid) for g in gpus) == [("eval-0", C), ("llama-worker-0", A), ("llama-worker-0", B)]

        source = KubeletGpus("gpu-01", socket, indices=lambda: {A.lower(): 0, B.lower(): 1})
        assert source.poll(NOW) == []  # nothing for Kafka: the mapping is exported
        assert _mine("gpu-01") == {("training", "llama-worker-0"): [(A, 0), (B, 1)],
                                   ("training", "eval-0"): [(C, None)]}  # C: not in NVML's view
        kubelet.pods = kubelet.pods[:1]
        source.poll(NOW)
        assert _mine("gpu-01") == {("training", "llama-worker-0"): [(A, 0), (B, 1)]}
        source.close()
        assert _mine("gpu-01") == {}
        assert kubelet.calls == 3


def test_a_node_without_a_kubelet_socket_leaves_the_source_off(tmp_path: Path) -> None:
    assert create(SourceContext(node="n1", state_dir=tmp_path), {"socket": str(tmp_path / "none.sock")}) is None


def test_the_factory_reads_its_section(tmp_path: Path) -> None:
    with fake_kubelet(tmp_path) as (kubelet, socket):
        kubelet.pods = [("ns", "p", {"c": {"example.com/gpu": [A]}})]
        source = create(SourceContext(node="gpu-02", state_dir=tmp_path),
                        {"socket": str(socket), "interval_s": 5, "resources": ["example.com/gpu"]})
        assert source is not None and source.interval_s == 5
        source._indices_of = lambda: {}
        source.poll(NOW)
        assert _mine("gpu-02") == {("ns", "p"): [(A, None)]}
        source.close()


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None, reason="grpcio-tools not installed (dev extra)")
def test_the_committed_stubs_are_generated_from_the_kubelets_proto(tmp_path: Path) -> None:
    root = STUBS.parents[3]
    target = tmp_path / "producers" / "node" / "podresources" / "v1"
    target.mkdir(parents=True)
    (target / "api.proto").write_bytes((STUBS / "api.proto").read_bytes())
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", ".", "--python_out=.", "--pyi_out=.",
                    "--grpc_python_out=.", "producers/node/podresources/v1/api.proto"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=60)
    for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
        assert (target / name).read_text() == (STUBS / name).read_text(), f"{name}: regenerate ({root})"
