"""Scheduler tests: a real Slurm cluster for the whole session (see :mod:`.slurm_cluster`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.producers.scheduler.slurm_cluster import SlurmCluster, missing_slurm, start_slurm


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """One running test cluster (one node, 4 placeholder GPUs); skipped where Slurm cannot be had."""
    reason = missing_slurm()
    if reason:
        pytest.skip(reason)
    with start_slurm(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster
