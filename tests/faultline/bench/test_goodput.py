"""The goodput model: deterministic, states its assumptions, and responds to them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from faultline.bench.goodput import LLAMA3_TAXONOMY, PHASES, Assumptions, breakdown, compare, simulate


def test_taxonomy_is_the_published_record() -> None:
    assert sum(c.count for c in LLAMA3_TAXONOMY) == 419


def test_same_seed_same_answer() -> None:
    assert simulate(Assumptions()) == simulate(Assumptions())


def test_fencing_and_restarting_elsewhere_loses_less_than_restarting_in_place() -> None:
    r = compare(runs=5)
    assert r["faultline_lost_gpu_hours"] < r["baseline_lost_gpu_hours"]
    assert r["ratio"] > 1
    assert r["interruptions"] == 419
    assert r["assumptions"]["gpus"] == 16_384 and "faulty_gpu" in r["assumptions"]["taxonomy"]


def test_without_spares_faultline_waits_for_repairs_too() -> None:
    with_spares = simulate(Assumptions())["faultline_lost_gpu_hours"]
    without = simulate(replace(Assumptions(), spare_capacity=False))["faultline_lost_gpu_hours"]
    assert without > with_spares


def test_longer_checkpoint_interval_costs_both() -> None:
    short = simulate(Assumptions(checkpoint_interval_s=600))
    long = simulate(Assumptions(checkpoint_interval_s=3600))
    assert long["baseline_lost_gpu_hours"] > short["baseline_lost_gpu_hours"]
    assert long["faultline_lost_gpu_hours"] > short["faultline_lost_gpu_hours"]


# --------------------------------------------------------------------------- where the time goes (issue 29)


def test_the_phases_add_up_to_the_lost_gpu_hours_of_each_policy() -> None:
    totals, phases = breakdown(Assumptions())
    assert totals == simulate(Assumptions())  # the same draw: the breakdown explains the headline figures
    for policy in ("baseline", "faultline"):
        assert set(phases[policy]) == {c.name for c in LLAMA3_TAXONOMY}
        summed = sum(v for cause in phases[policy].values() for v in cause.values())
        assert summed == pytest.approx(totals[f"{policy}_lost_gpu_hours"], rel=1e-9)
        assert all(set(cause) == set(PHASES) for cause in phases[policy].values())


def test_each_phase_lands_where_the_policy_spends_it() -> None:
    _, phases = breakdown(Assumptions())
    base, fl = phases["baseline"], phases["faultline"]
    assert base["faulty_gpu"]["human_repair"] > 0 and fl["faulty_gpu"]["human_repair"] == 0  # spares: no repair
    assert base["faulty_gpu"]["lost_work"] == fl["faulty_gpu"]["lost_work"] > 0  # the same work either way
    assert fl["software_bug"]["approval_wait"] > 0 and base["software_bug"]["approval_wait"] == 0  # the second one
    assert fl["faulty_gpu"]["fencing_gate"] > 0 and base["faulty_gpu"]["fencing_gate"] == 0
    hang_s = 600 * 35 * Assumptions().gpus / 3600  # every network failure waits out the collective timeout
    assert base["network_switch_cable"]["detection"] >= hang_s
    _, no_spares = breakdown(replace(Assumptions(), spare_capacity=False))
    assert no_spares["faultline"]["faulty_gpu"]["human_repair"] > 0


def test_compare_reports_where_the_time_goes() -> None:
    r = compare(runs=3, intervals=(1800,))
    where = r["where_the_time_goes"]
    assert where["phases"] == list(PHASES) and where["runs"] == 3
    for policy in ("baseline", "faultline"):
        total = where[policy]["total"]
        assert set(total) == set(PHASES) and total["lost_work"] > 0
        assert sum(total.values()) == pytest.approx(sum(sum(c.values()) for c in where[policy]["by_cause"].values()),
                                                    abs=len(PHASES) * 20)
