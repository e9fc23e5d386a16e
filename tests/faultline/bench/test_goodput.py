"""The goodput model: deterministic, states its assumptions, and responds to them."""

from __future__ import annotations

from dataclasses import replace

from faultline.bench.goodput import LLAMA3_TAXONOMY, Assumptions, compare, simulate


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
