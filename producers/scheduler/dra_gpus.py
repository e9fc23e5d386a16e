"""Which GPUs a pod holds where GPUs are handed out by Dynamic Resource Allocation.

A pod that asks for GPUs through ``spec.resourceClaims`` has no
``nvidia.com/gpu`` limit: its GPUs are the devices the scheduler allocated to
its ResourceClaims, and the API server knows them exactly. :class:`DraGpus`
follows the chain the scheduler wrote:

    pod.status.resourceClaimStatuses (or spec.resourceClaims[].resourceClaimName)
      -> ResourceClaim.status.allocation.devices.results[] {driver, pool, device}
      -> the ResourceSlice device of that driver and pool: its ``uuid`` and ``index``
         attributes (in any domain: ``gpu.nvidia.com/uuid`` counts)

and answers like the node agents' view (:mod:`producers.scheduler.agent_gpus`):
``[(uuid, index), ...]``, or None while the claim is not allocated. Only
devices of ``driver`` count (NVIDIA's ``gpu.nvidia.com`` by default). A claim is
read once per UID (an allocation does not change); the slices are listed again
only when a device is not in the last listing, at most every ``refresh_s``.
This is the same device the executor's ``DeviceTaintRule`` then fences
(:mod:`sinks.executors.kubernetes_dra`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["DraGpus"]

log = logging.getLogger("faultline.agent.kubernetes")

Gpu = tuple[str, int | None]


def _attribute(device: Any, name: str) -> Any:
    for key, value in (getattr(device, "attributes", None) or {}).items():
        if key == name or key.endswith("/" + name):
            for kind in ("string", "int"):
                found = getattr(value, kind, None)
                if found is not None:
                    return found
    return None


def _claim_names(pod: Any) -> list[str]:
    names = {s.resource_claim_name for s in (pod.status.resource_claim_statuses or []) if s.resource_claim_name} \
        if pod.status else set()
    names |= {c.resource_claim_name for c in (pod.spec.resource_claims or []) if c.resource_claim_name} \
        if pod.spec else set()
    return sorted(names)


class DraGpus:
    """Pod -> the GPUs allocated to its ResourceClaims (see the module docstring)."""

    def __init__(self, api_client: Any, driver: str = "gpu.nvidia.com", *, refresh_s: float = 10.0,
                 timeout_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        from kubernetes import client

        self.api = client.ResourceV1Api(api_client)
        self.driver = driver
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._claims: dict[tuple[str, str], list[tuple[str, str]]] = {}  # allocated claim -> [(pool, device)]
        self._devices: dict[tuple[str, str], Gpu] = {}
        self._listed_at = -1e9

    def __call__(self, pod: Any) -> Sequence[Gpu] | None:
        names = _claim_names(pod)
        if not names:
            return None
        devices: list[tuple[str, str]] = []
        for name in names:
            allocated = self._allocated(str(pod.metadata.namespace), name)
            if allocated is None:
                return None  # not allocated (yet): no verdict
            devices += allocated
        if not devices:
            return None
        if any(d not in self._devices for d in devices):
            self._list_slices()
        gpus = [self._devices[d] for d in devices if d in self._devices]
        return sorted(gpus, key=lambda g: (g[1] is None, g[1] or 0, g[0])) if len(gpus) == len(devices) else None

    def _allocated(self, namespace: str, name: str) -> list[tuple[str, str]] | None:
        key = (namespace, name)  # claims made from a pod's template get names of their own: no reuse
        if key in self._claims:
            return self._claims[key]
        try:
            claim = self.api.read_namespaced_resource_claim(name, namespace, _request_timeout=self.timeout_s)
        except Exception as exc:  # gone, or not permitted: no verdict (at debug: it repeats every poll)
            log.debug("kubernetes: resource claim %s/%s: %s", namespace, name, exc)
            return None
        allocation = claim.status.allocation if claim.status else None
        if allocation is None or allocation.devices is None:
            return None
        if len(self._claims) > 100_000:
            self._claims.clear()  # bounded: what is needed again is read again
        self._claims[key] = [(r.pool, r.device) for r in allocation.devices.results or [] if r.driver == self.driver]
        return self._claims[key]

    def _list_slices(self) -> None:
        if self._clock() - self._listed_at < self.refresh_s:
            return
        self._listed_at = self._clock()
        token: str | None = None
        devices: dict[tuple[str, str], Gpu] = {}
        for _ in range(200):
            try:
                page = self.api.list_resource_slice(field_selector=f"spec.driver={self.driver}", limit=500,
                                                    _continue=token, _request_timeout=self.timeout_s)
            except Exception as exc:  # the GPUs stay unknown until the next listing
                log.warning("kubernetes: listing the %s ResourceSlices failed: %s", self.driver, exc)
                return
            for rs in page.items or []:
                for device in rs.spec.devices or []:
                    uuid, index = _attribute(device, "uuid"), _attribute(device, "index")
                    if uuid:
                        devices[(rs.spec.pool.name, device.name)] = (str(uuid), int(index) if isinstance(index, int)
                                                                     else None)
            token = page.metadata._continue if page.metadata else None
            if not token:
                break
        self._devices = devices
