"""Fixtures for the executor tests: a real Slurm cluster of its own (the node gets drained here), and a
namespace of the test kube-apiserver with the Kubernetes backend (:mod:`.kube_cluster`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.producers.scheduler.slurm_cluster import SlurmCluster, missing_slurm, start_slurm

from .kube_cluster import Cluster, make_cluster


@pytest.fixture(scope="session")
def slurm_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """One running test cluster (one node, 2 placeholder GPUs) for these tests; skipped without Slurm.

    Not the scheduler tests' cluster: these tests drain its only node.
    """
    reason = missing_slurm()
    if reason:
        pytest.skip(reason)
    with start_slurm(tmp_path_factory.mktemp("slurm-executor"), gpus=2) as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_session: SlurmCluster) -> Iterator[SlurmCluster]:
    """The cluster, handed back with no jobs and its node in service after each test."""
    yield slurm_session
    slurm_session.run("scancel", "--user=root", check=False)
    slurm_session.run("scontrol", "update", f"NodeName={slurm_session.node}", "State=RESUME", check=False)


@pytest.fixture
def cluster(kube_apiserver: object) -> Iterator[Cluster]:
    """A fresh namespace, and the backend as the chart's executor user; the namespace's pods go after."""
    yield from make_cluster(kube_apiserver)  # type: ignore[arg-type]
