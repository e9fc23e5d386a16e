"""Topology: inventory and scheduler events joined, GPUs resolved whatever id form a source uses."""

from __future__ import annotations

import pytest

from correlators.topology import Topology
from producers.capture import parse_capture_line
from streams.events import GpuInfo, GpuRef, Inventory, JobStarted, RankAllocation

PCI = ["18:00", "2a:00", "3a:00", "5d:00", "9a:00", "ab:00", "ba:00", "db:00"]


def _topo() -> Topology:
    t = Topology()
    for n, rack in (("n1", "r1"), ("n2", "r1"), ("n3", "r2")):
        t.apply_inventory(n, Inventory(rack=rack, gpus=[
            GpuInfo(index=i, uuid=f"GPU-{n}-{i}", pci=PCI[i], power_domain=f"{n}-PS{1 + i // 4}") for i in range(8)]))
    return t


def _start(t: Topology, job: str, alloc: dict[str, list[int]]) -> None:
    rows, rank = [], 0
    for node, gpus in alloc.items():
        rows.append(RankAllocation(node=node, gpus=gpus, ranks=list(range(rank, rank + len(gpus)))))
        rank += len(gpus)
    t.apply_job_started(job, JobStarted(allocation=rows, world_size=rank))


@pytest.mark.parametrize("ref, index", [
    (GpuRef(uuid="GPU-n1-3"), 3),
    (GpuRef(uuid="gpu-N1-3"), 3),           # UUIDs compare without case
    (GpuRef(pci="5d:00"), 3),
    (GpuRef(index=6), 6),
    (GpuRef(uuid="GPU-unknown", index=2), 2),  # an unknown UUID falls back to the index
    (GpuRef(pci="ff:00"), None),
])
def test_resolve_any_id_form(ref: GpuRef, index: int | None) -> None:
    assert _topo().resolve("n1", ref) == index


def test_kernel_and_nvml_pci_forms_meet() -> None:
    """The parsers normalise 'PCI:0000:5d:00' and '00000000:5D:00.0' to one form the topology matches."""
    t = _topo()
    xid = parse_capture_line('{"ts":"2026-04-22T03:00:00Z","source":"kernel","node":"n1","line":'
                             '"NVRM: Xid (PCI:0000:5d:00): 79, pid=\'<unknown>\', name=<unknown>, GPU has fallen off the bus."}')
    nvml = parse_capture_line('{"ts":"2026-04-22T03:00:00Z","source":"nvml","node":"n1","gpu":'
                              '{"pci_bus_id":"00000000:5D:00.0"},"metrics":{}}')
    assert t.resolve("n1", xid[0].body.gpu) == 3  # type: ignore[union-attr]
    assert t.resolve("n1", nvml[0].body.gpu) == 3  # type: ignore[union-attr]


def test_resolve_on_unknown_node_or_without_ref() -> None:
    t = _topo()
    assert t.resolve(None, GpuRef(index=1)) is None
    assert t.resolve("n1", None) is None
    assert t.resolve("n9", GpuRef(index=1)) == 1


def test_gpu_ids_prefer_uuid() -> None:
    t = _topo()
    assert t.gpu_id("n2", 5) == "GPU-n2-5"
    assert t.gpu_id("n9", 5) == "n9:5"


def test_jobs_ranks_and_places() -> None:
    t = _topo()
    _start(t, "a", {"n1": [0, 1, 2, 3], "n2": [4, 5]})
    j = t.jobs["a"]
    assert j.world_size == 6 and j.nodes == ["n1", "n2"]
    assert j.place_of[4] == ("n2", 4) and j.rank_of[("n1", 3)] == 3
    assert [x.name for x in t.running_jobs_on("n1", 2)] == ["a"]
    assert t.running_jobs_on("n1", 5) == [] and t.running_jobs_on("n3") == []
    assert [x.name for x in t.running_jobs_on("n2")] == ["a"]


def test_two_jobs_share_a_node_by_gpu() -> None:
    t = _topo()
    _start(t, "a", {"n1": [0, 1, 2, 3]})
    _start(t, "b", {"n1": [4, 5, 6, 7]})
    assert [x.name for x in t.running_jobs_on("n1", 5)] == ["b"]
    assert sorted(x.name for x in t.running_jobs_on("n1")) == ["a", "b"]


def test_restart_counts_starts_and_moves_the_job() -> None:
    t = _topo()
    _start(t, "a", {"n1": list(range(8))})
    t.jobs["a"].running = False
    _start(t, "a", {"n3": list(range(8))})
    j = t.jobs["a"]
    assert j.starts == 2 and j.running and j.nodes == ["n3"]
    assert t.running_jobs_on("n1") == [] and t.jobs_on("n1") == []
    assert [x.name for x in t.jobs_on("n3", 0)] == ["a"]


def test_power_domains_and_racks() -> None:
    t = _topo()
    assert t.power_domain_peers("n1", 5) == [4, 5, 6, 7]
    assert t.power_domain_peers("n9", 0) == []
    assert t.rack_of("n3") == "r2" and t.rack_of("n9") is None
    assert t.rack_nodes("r1") == ["n1", "n2"]


def test_inventory_update_keeps_rack_when_not_sent() -> None:
    t = _topo()
    t.apply_inventory("n1", Inventory(gpus=[GpuInfo(index=0, uuid="GPU-new")]))
    assert t.rack_of("n1") == "r1" and t.gpu_id("n1", 0) == "GPU-new"
