"""The job source's view of which GPUs each pod holds: read from the node agents.

Only the kubelet knows which GPUs the device plugin gave a pod, and only on its
node's unix socket; the node agent reads it there and exports it
(:mod:`producers.node.kubelet_gpus`, ``faultline_pod_gpu_info`` on its metrics
port). :class:`AgentGpus` finds the agent pod of a node (a label selector, in
the release's namespace, through the API the job source already lists pods
with), fetches ``http://<pod IP>:<port>/metrics`` and keeps the node's
mapping. A node is asked again only when one of its GPU pods is not in the
mapping yet, and at most every ``refresh_s``; a node whose agent does not
answer is skipped (its pods' GPUs stay unknown, the ranks stay) and said once.
"""

from __future__ import annotations

import logging
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["AgentGpus", "parse_pod_gpus"]

log = logging.getLogger("faultline.agent.kubernetes")

_METRIC = "faultline_pod_gpu_info"

Assignment = dict[tuple[str, str], list[tuple[str, int | None]]]
"""(namespace, pod) -> [(GPU UUID, index on the node or None), ...]"""


def parse_pod_gpus(text: str) -> Assignment:
    """The pods' GPUs in an agent's metrics page."""
    out: Assignment = {}
    for family in text_string_to_metric_families(text):
        if family.name != _METRIC:
            continue
        for sample in family.samples:
            if sample.value != 1:
                continue
            labels = sample.labels
            index = labels.get("gpu_index", "")
            out.setdefault((labels["namespace"], labels["pod"]), []).append(
                (labels["gpu_uuid"], int(index) if index.isdigit() else None))
    for gpus in out.values():
        gpus.sort(key=lambda g: (g[1] is None, g[1] if g[1] is not None else 0, g[0]))
    return out


def _fetch(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as answer:  # a pod IP of the cluster network
        return str(answer.read().decode())


class AgentGpus:
    """Pod -> GPUs, from the agent of the pod's node (see the module docstring)."""

    def __init__(self, core: Any, namespace: str, label_selector: str, port: int = 9464, *,
                 refresh_s: float = 10.0, timeout_s: float = 3.0,
                 fetch: Callable[[str, float], str] = _fetch, clock: Callable[[], float] = time.monotonic) -> None:
        self.core = core
        self.namespace = namespace
        self.label_selector = label_selector
        self.port = port
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        self._fetch = fetch
        self._clock = clock
        self._nodes: dict[str, Assignment] = {}
        self._asked: dict[str, float] = {}
        self._silent: set[str] = set()

    def __call__(self, pod: Any) -> Sequence[tuple[str, int | None]] | None:
        """The GPUs of ``pod`` as its node's agent reports them, or None when not known."""
        node = pod.spec.node_name if pod.spec else None
        if not node:
            return None
        key = (str(pod.metadata.namespace), str(pod.metadata.name))
        known = self._nodes.get(node, {})
        if key not in known and self._clock() - self._asked.get(node, -1e9) >= self.refresh_s:
            self._asked[node] = self._clock()
            known = self._refresh(node)
        return known.get(key)

    def _refresh(self, node: str) -> Assignment:
        try:
            agents = self.core.list_namespaced_pod(self.namespace, label_selector=self.label_selector,
                                                   field_selector=f"spec.nodeName={node}",
                                                   _request_timeout=self.timeout_s).items
            ips = [p.status.pod_ip for p in agents if p.status and p.status.pod_ip]
            if not ips:
                raise LookupError(f"no running agent pod ({self.label_selector}) in {self.namespace}")
            self._nodes[node] = parse_pod_gpus(self._fetch(f"http://{ips[0]}:{self.port}/metrics", self.timeout_s))
            self._silent.discard(node)
        except Exception as exc:  # an agent away must not stop the job source: the GPUs stay unknown
            if node not in self._silent:
                self._silent.add(node)
                log.warning("kubernetes: no pod GPUs from the agent of node %s (%s): its pods' GPU indices "
                            "stay unknown until it answers", node, exc)
        return self._nodes.get(node, {})
