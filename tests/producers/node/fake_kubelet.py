"""A local gRPC server on a unix socket that speaks the kubelet's ``PodResourcesLister`` (v1).

Built on the servicer generated from the kubelet's own ``api.proto``
(``producers/node/podresources/v1``), so requests and replies go over the
real wire protocol, as the kubelet's socket serves them. Tests set
:attr:`FakeKubelet.pods` to what the kubelet would report.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from producers.node.podresources.v1 import api_pb2, api_pb2_grpc

__all__ = ["FakeKubelet", "fake_kubelet"]


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    """Answers ``List`` from :attr:`pods`: (namespace, pod, {container: {resource: [device ids]}})."""

    def __init__(self) -> None:
        self.pods: list[tuple[str, str, dict[str, dict[str, list[str]]]]] = []
        self.calls = 0

    def List(self, request: Any, context: Any) -> Any:  # noqa: N802 (the service's method name)
        self.calls += 1
        return api_pb2.ListPodResourcesResponse(pod_resources=[
            api_pb2.PodResources(namespace=ns, name=name, containers=[
                api_pb2.ContainerResources(name=container, devices=[
                    api_pb2.ContainerDevices(resource_name=resource, device_ids=ids)
                    for resource, ids in resources.items()])
                for container, resources in containers.items()])
            for ns, name, containers in self.pods])


@contextmanager
def fake_kubelet(directory: Path) -> Iterator[tuple[FakeKubelet, Path]]:
    """A fake kubelet serving ``<directory>/kubelet.sock``; stopped on exit."""
    socket = directory / "kubelet.sock"
    kubelet = FakeKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(kubelet, server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield kubelet, socket
    finally:
        server.stop(grace=None).wait(5)
