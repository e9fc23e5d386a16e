"""Who never arrived, answered from a tally kept as reports come: the same answers as walking the job's
ranks every time (the definition), for any reports, allocations and questions in between."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from correlators.attribution import CollectiveReports
from correlators.topology import Job
from streams.events import JobStarted, RankAllocation


def _job(nodes: int, per_node: int, shuffle: list[int] | None = None) -> Job:
    ranks = list(range(nodes * per_node))
    if shuffle:
        for i, j in enumerate(shuffle):  # interleave ranks across nodes
            a, b = i % len(ranks), j % len(ranks)
            ranks[a], ranks[b] = ranks[b], ranks[a]
    # names that do not sort as the nodes' ranks do, so a tie broken by name would show
    alloc = [RankAllocation(node=f"n{(n * 7919) % 101}", gpus=list(range(per_node)),
                            ranks=ranks[n * per_node:(n + 1) * per_node])
             for n in range(nodes)]
    return Job("j", JobStarted(allocation=alloc, world_size=nodes * per_node))


def _by_definition(r: CollectiveReports, job: Job) -> tuple[list[int], tuple[str | None, list[int]]]:
    """The answers as first written: every question walks the whole job."""
    world = set(job.place_of)
    missing = sorted(world - r.reporting)
    ranks: list[int] = []
    if world and missing and len(missing) <= max(1, len(world) // 2):
        ranks = missing
    elif r.last_enqueued:
        newest = max(r.last_enqueued.values())
        behind = sorted(k for k, v in r.last_enqueued.items() if v < newest)
        if behind and len(behind) <= max(1, len(r.last_enqueued) // 2):
            ranks = behind
    places = [job.place_of[k] for k in ranks if k in job.place_of]
    if not places:
        return ranks, (None, [])
    node = Counter(n for n, _ in places).most_common(1)[0][0]
    return ranks, (node, sorted(g for n, g in places if n == node))


@settings(max_examples=400, deadline=None)
@given(nodes=st.integers(1, 8), per_node=st.integers(1, 4), shuffle=st.lists(st.integers(0, 63), max_size=20),
       data=st.data(), ask_every=st.integers(1, 5), realloc_at=st.integers(0, 80), restore_at=st.integers(0, 80))
def test_the_tally_answers_as_the_definition_does(nodes: int, per_node: int, shuffle: list[int], data: st.DataObject,
                                                   ask_every: int, realloc_at: int, restore_at: int) -> None:
    world = nodes * per_node  # reports mostly from the job's ranks, some from outside it, some rankless
    report = st.tuples(st.integers(-2, world + 1), st.one_of(st.none(), st.integers(95, 100)))
    reports = data.draw(st.lists(report, max_size=3 * world + 5))
    job = _job(nodes, per_node, shuffle)
    r = CollectiveReports()
    for i, (rank, enqueued) in enumerate(reports):
        if i == realloc_at:
            job = _job(nodes, per_node, shuffle[::-1])  # the job restarted on another allocation
        if i == restore_at:  # a snapshot restored: the tally is not in it, and is rebuilt
            adapter = TypeAdapter(CollectiveReports)
            r = adapter.validate_json(adapter.dump_json(r))
        r.add(rank if rank >= 0 else None, enqueued)
        if i % ask_every == 0:
            want_ranks, want_culprit = _by_definition(r, job)
            assert r.culprit(job) == want_culprit
            assert r.culprit_ranks(job) == want_ranks
            assert r.culprit_text(job) == str(want_ranks)
    assert (r.culprit_ranks(job), r.culprit(job)) == _by_definition(r, job)
    assert r.culprit_text(job) == str(_by_definition(r, job)[0])


def test_of_two_nodes_missing_as_many_ranks_the_one_holding_the_lowest_is_blamed() -> None:
    job = _job(4, 2)  # node 2 is named n82, node 3 n22: a tie broken by name would blame node 3
    r = CollectiveReports()
    for rank in (0, 1, 2, 3, 4, 6):
        r.add(rank)
    assert r.culprit_ranks(job) == [5, 7] and r.culprit(job) == ("n82", [1])


def test_a_16384_rank_storm_names_the_one_rank_that_never_arrived() -> None:
    """Every rank but one reports and the culprit is asked after each (the bench times this storm)."""
    job = _job(2048, 8)
    r = CollectiveReports()
    for rank in range(16_384):
        if rank != 12_345:
            r.add(rank, 900)
            r.culprit(job)
            if rank > 9000:  # the summary's text is asked for too once the missing are the culprits
                r.culprit_text(job)
    assert r.culprit(job) == (f"n{(1543 * 7919) % 101}", [1]) and r.culprit_ranks(job) == [12_345]
    assert r.culprit_text(job) == "[12345]"
