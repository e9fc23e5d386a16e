"""A restart asks for whole nodes of the launcher's nproc_per_node, within its node range."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from correlators.elastic_size import restart_size
from correlators.topology import Job, Launch
from streams.events import Elasticity, JobStarted, RankAllocation


def _job(per_node: int, nodes: int, lo: int, hi: int, offset: int = 0) -> Job:
    alloc = [RankAllocation(node=f"n{k}", gpus=list(range(offset, offset + per_node)),
                            ranks=list(range(k * per_node, (k + 1) * per_node))) for k in range(nodes)]
    return Job("el", JobStarted(allocation=alloc, world_size=per_node * nodes, elastic=Elasticity(min_gpus=lo,
                                                                                               max_gpus=hi)))


def test_sixty_four_less_one_is_fifty_six() -> None:
    job = _job(8, 8, 32, 64)
    s = restart_size(job, Launch(4, 8, 8), lambda n, i: (n, i) != ("n3", 5))
    assert (s.gpus, s.nodes, s.formable) == (56, 7, 7)
    assert "whole node" in s.text() and "launch config" in s.text()


def test_nproc_four_never_fifteen() -> None:
    s = restart_size(_job(4, 4, 8, 16), Launch(2, 4, 4), lambda n, i: (n, i) != ("n1", 2))
    assert s.gpus == 12


def test_halves_of_nodes_count_the_jobs_ranks_per_node() -> None:
    s = restart_size(_job(4, 3, 4, 12, offset=4), None, lambda n, i: (n, i) != ("n0", 6))
    assert (s.per_node, s.gpus, s.source) == (4, 8, "ranks per node of the allocation")


def test_the_floor_is_whole_nodes_and_a_fixed_job_keeps_its_size() -> None:
    assert restart_size(_job(8, 2, 12, 16), None, lambda n, i: n != "n1").gpus == 16
    assert restart_size(_job(8, 2, 16, 16), None, lambda n, i: n != "n1").gpus == 16


@settings(max_examples=300, derandomize=True, deadline=None)
@given(per_node=st.sampled_from([1, 2, 4, 8]), nodes=st.integers(1, 12), lo_n=st.integers(1, 12),
       span=st.integers(0, 6), lost=st.sets(st.tuples(st.integers(0, 11), st.integers(0, 7)), max_size=20),
       launch=st.booleans())
@example(per_node=8, nodes=2, lo_n=1, span=1, lost={(1, 1)}, launch=False)
def test_the_size_is_always_formable(per_node: int, nodes: int, lo_n: int, span: int,
                                     lost: set[tuple[int, int]], launch: bool) -> None:
    """Whatever is lost, an elastic job asks for whole nodes, within the launcher's range."""
    lo_n = min(lo_n, nodes)
    hi_n = lo_n + span
    job = _job(per_node, nodes, lo_n * per_node, hi_n * per_node)
    s = restart_size(job, Launch(lo_n, hi_n, per_node) if launch else None,
                     lambda n, i: (int(n[1:]), i) not in lost)
    assert s.gpus % per_node == 0
    assert lo_n <= s.gpus // per_node <= hi_n
