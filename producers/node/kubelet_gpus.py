"""The ``kubelet_gpus`` source: which pod holds which GPU, from the kubelet, as dcgm-exporter reads it.

The kubelet serves its ``PodResourcesLister`` gRPC API (``v1``) on the unix
socket ``/var/lib/kubelet/pod-resources/kubelet.sock``: for every pod on the
node, each container's devices by resource name. For ``nvidia.com/gpu`` the
NVIDIA device plugin's device IDs are the GPU UUIDs (``GPU-...``; with
time-slicing ``GPU-...::<replica>``, one GPU shared); MIG devices are their
``MIG-...`` UUIDs. Every poll lists them (a deadline per call) and exports
the mapping on the agent's metrics port as

    faultline_pod_gpu_info{node, namespace, pod, gpu_uuid, gpu_index} 1

(``gpu_index`` from NVML where the agent can open it, else empty). The job
source (:mod:`producers.scheduler.agent_gpus`) reads it from each node's agent
to place a job's ranks on the right GPUs; Prometheus can join GPU metrics to
pods with it. Nothing goes to Kafka: which GPU a pod holds travels in the job
source's ``job_started`` allocation, as the contract has it.

A missing socket (not a Kubernetes node, the directory not mounted) is said
once and the source stays off (the factory returns None). Config section
``kubelet_gpus``::

    kubelet_gpus:
      socket: /var/lib/kubelet/pod-resources/kubelet.sock
      interval_s: 10
      resources: [nvidia.com/gpu]
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import Gauge
from pydantic import Field

from producers.registry import SourceContext, SourceSettings
from producers.source import Observation

__all__ = ["KubeletGpus", "KubeletGpusSettings", "PodGpu", "POD_GPU_INFO", "create", "list_pod_gpus"]

log = logging.getLogger("faultline.agent.kubelet_gpus")

POD_GPU_INFO = Gauge("faultline_pod_gpu_info", "1 for each GPU the kubelet assigned to a pod (PodResources API).",
                     ["node", "namespace", "pod", "gpu_uuid", "gpu_index"])
_exported_lock = threading.Lock()


class KubeletGpusSettings(SourceSettings):
    socket: Path = Field(Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
                         description="The kubelet's PodResources unix socket.")
    interval_s: float = Field(10.0, gt=0, description="Seconds between two listings.")
    resources: list[str] = Field(default_factory=lambda: ["nvidia.com/gpu"],
                                 description="Device-plugin resource names that are GPUs.")
    timeout_s: float = Field(5.0, gt=0, description="Deadline of one List call.")


@dataclass(frozen=True)
class PodGpu:
    """One GPU a pod's container holds."""

    namespace: str
    pod: str
    uuid: str


def _device_uuid(device_id: str) -> str:
    """The GPU behind a device ID (time-slicing replicas are ``<uuid>::<n>``)."""
    return device_id.split("::", 1)[0]


def list_pod_gpus(socket: Path, resources: Sequence[str], timeout_s: float = 5.0) -> list[PodGpu]:
    """Every (pod, GPU) the kubelet at ``socket`` reports, through ``PodResourcesLister.List``."""
    import grpc

    from producers.node.podresources.v1 import api_pb2, api_pb2_grpc

    wanted = set(resources)
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        reply = api_pb2_grpc.PodResourcesListerStub(channel).List(api_pb2.ListPodResourcesRequest(),
                                                                   timeout=timeout_s)
    seen: dict[tuple[str, str, str], PodGpu] = {}
    for pod in reply.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if devices.resource_name not in wanted:
                    continue
                for device_id in devices.device_ids:
                    gpu = PodGpu(pod.namespace, pod.name, _device_uuid(device_id))
                    seen.setdefault((gpu.namespace, gpu.pod, gpu.uuid), gpu)
    return list(seen.values())


def _nvml_indices() -> dict[str, int]:
    """GPU UUID -> NVML index on this node; empty where NVML cannot be opened."""
    try:
        from producers.node.nvml import PynvmlBackend

        backend = PynvmlBackend()
    except Exception as exc:  # no driver, no library: the indices stay unknown
        log.info("kubelet_gpus: NVML not available (%s): GPUs exported by UUID only", exc)
        return {}
    try:
        return {g.uuid.lower(): g.index for g in backend.gpus() if g.uuid}
    finally:
        backend.close()


class KubeletGpus:
    """Lists the kubelet's pod -> GPU assignment every poll and exports it (see the module docstring)."""

    name = "kubelet_gpus"

    def __init__(self, node: str, socket: Path, resources: Sequence[str] = ("nvidia.com/gpu",), *,
                 interval_s: float = 10.0, timeout_s: float = 5.0,
                 indices: Callable[[], Mapping[str, int]] = _nvml_indices) -> None:
        self.node = node
        self.socket = socket
        self.resources = tuple(resources)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._indices_of = indices
        self._indices: Mapping[str, int] | None = None
        self._exported: set[tuple[str, ...]] = set()

    def poll(self, now: datetime) -> list[Observation]:
        gpus = list_pod_gpus(self.socket, self.resources, self.timeout_s)
        if self._indices is None or any(g.uuid.lower() not in self._indices for g in gpus
                                        if g.uuid.startswith("GPU-")):
            self._indices = self._indices_of()  # once, and again only for a GPU it did not know
        labels: set[tuple[str, ...]] = {
            (self.node, g.namespace, g.pod, g.uuid, str(self._indices.get(g.uuid.lower(), ""))) for g in gpus}
        with _exported_lock:
            for gone in self._exported - labels:
                POD_GPU_INFO.remove(*gone)
            for new in labels - self._exported:
                POD_GPU_INFO.labels(*new).set(1)
            self._exported = labels
        return []

    def close(self) -> None:
        with _exported_lock:
            for gone in self._exported:
                POD_GPU_INFO.remove(*gone)
            self._exported = set()


def create(ctx: SourceContext, settings: Mapping[str, Any]) -> KubeletGpus | None:
    """The ``kubelet_gpus`` section's factory; None (said once) where there is no kubelet socket."""
    cfg = KubeletGpusSettings.model_validate(settings)
    try:
        import grpc  # noqa: F401
    except ImportError:
        log.warning("kubelet_gpus: grpcio is not installed (pip install 'faultline[agent]'): pod GPUs will "
                    "not be exported")
        return None
    if not cfg.socket.exists():
        log.warning("kubelet_gpus: no kubelet PodResources socket at %s (not a Kubernetes node, or "
                    "/var/lib/kubelet/pod-resources not mounted): pod GPUs will not be exported", cfg.socket)
        return None
    return KubeletGpus(ctx.node, cfg.socket, cfg.resources, interval_s=cfg.interval_s, timeout_s=cfg.timeout_s)
