"""Blame: the rank that never arrived, what a worker's exit means, why a node is silent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from correlators.attribution import BmcView, CollectiveReports, exit_category, silence_category
from correlators.topology import Job, Topology
from streams.events import JobStarted, RankAllocation


def _job(nodes: int = 2, per_node: int = 8) -> Job:
    topo = Topology()
    spec = JobStarted(allocation=[RankAllocation(node=f"n{k + 1}", gpus=list(range(per_node)),
                                                 ranks=list(range(k * per_node, (k + 1) * per_node)))
                                  for k in range(nodes)], world_size=nodes * per_node)
    return topo.apply_job_started("pt", spec)


def _reports(ranks: list[int], enqueued: dict[int, int] | None = None, seq: int = 842) -> CollectiveReports:
    r = CollectiveReports()
    for rank in ranks:
        r.add(rank, (enqueued or {}).get(rank, seq))
    return r


def test_the_missing_rank_is_the_culprit() -> None:
    job = _job()
    r = _reports([x for x in range(16) if x != 11])
    assert r.culprit_ranks(job) == [11]
    assert r.culprit(job) == ("n2", [3])


def test_all_report_the_one_behind_is_the_culprit() -> None:
    job = _job()
    r = _reports(list(range(16)), {5: 841})
    assert r.culprit_ranks(job) == [5]
    assert r.culprit(job) == ("n1", [5])


def test_missing_ranks_outweigh_progress() -> None:
    job = _job()
    r = _reports([x for x in range(16) if x not in (12, 13)], {0: 841})
    assert r.culprit_ranks(job) == [12, 13]


def test_several_missing_on_one_node_blame_that_node() -> None:
    job = _job(nodes=4)
    r = _reports([x for x in range(32) if not 16 <= x < 24])
    node, gpus = r.culprit(job)
    assert node == "n3" and gpus == list(range(8))


def test_no_culprit_when_everyone_agrees() -> None:
    job = _job()
    assert _reports(list(range(16))).culprit_ranks(job) == []
    assert _reports(list(range(16))).culprit(job) == (None, [])


def test_no_culprit_when_most_are_missing() -> None:
    """Only two of sixteen ranks reported: too little to single anyone out."""
    job = _job()
    assert _reports([0, 1]).culprit_ranks(job) == []


def test_no_culprit_when_half_are_behind() -> None:
    job = _job(nodes=1, per_node=4)
    assert _reports([0, 1, 2, 3], {0: 7, 1: 7}, seq=8).culprit_ranks(job) == [0, 1]
    assert _reports([0, 1, 2, 3], {0: 7, 1: 7, 2: 7}, seq=8).culprit_ranks(job) == []


def test_reports_without_rank_or_progress_are_ignored() -> None:
    r = CollectiveReports()
    r.add(None, 5)
    r.add(3)
    assert r.reporting == {3} and r.last_enqueued == {}


@pytest.mark.parametrize("kind, category", [
    ("cuda_oom", "cuda_oom"), ("cuda_error", "software_crash"), ("app_error", "software_crash"),
    ("nccl_error", "network_timeout"), ("nccl_timeout", "network_timeout"), ("worker_exit", None),
])
def test_exit_category(kind: str, category: str | None) -> None:
    assert exit_category(kind) == category


@pytest.mark.parametrize("bmc, peers, category", [
    (BmcView(power_on=True), 0, "node_down"),
    (BmcView(), 0, "node_down"),
    (BmcView(reachable=False), 0, "node_down"),          # one node's BMC gone alone: not a rack
    (BmcView(reachable=False), 2, "rack_outage"),
    (BmcView(power_on=False), 1, "rack_outage"),
    (BmcView(power_on=True), 2, "node_down"),             # peers silent but this BMC answers: not the rack
    (BmcView(power_on=True, hardware_sel=[("memory", "x")]), 0, "node_hardware_fault"),
    (BmcView(power_on=True, hardware_sel=[("cpu", "x"), ("power_supply", "y")]), 0, "power_supply_fault"),
])
def test_silence_category(bmc: BmcView, peers: int, category: str) -> None:
    assert silence_category(bmc, peers) == category


def test_a_silent_node_died_of_its_newest_hardware_fault() -> None:
    """One power supply lost and the node ran on; a memory UE, then silence: the memory, not the supply. The other
    way round, the supply."""
    t0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
    view = BmcView(power_on=True)
    view.hardware_fault("power_supply", "PS2 failure", t0)
    view.hardware_fault("memory", "DIMM_B3 uncorrectable ECC", t0 + timedelta(seconds=150))
    assert silence_category(view, 0) == "node_hardware_fault"
    view = BmcView(power_on=True)
    view.hardware_fault("memory", "DIMM_B3 uncorrectable ECC", t0)
    view.hardware_fault("power_supply", "PS2 failure", t0 + timedelta(seconds=150))
    assert silence_category(view, 0) == "power_supply_fault"
