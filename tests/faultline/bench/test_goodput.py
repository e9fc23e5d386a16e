"""The goodput model: deterministic, states its assumptions, and responds to them."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from correlators.policy import load_policy
from faultline.bench.goodput import (
    LLAMA3_TAXONOMY,
    PHASES,
    Assumptions,
    Cause,
    advised,
    breakdown,
    compare,
    ettr,
    mtbf_s,
    simulate,
    way_back,
)
from faultline.bench.interruptions import measure_all
from faultline.bench.precursors import forewarned, verify
from faultline.bench.runner import goodput_lines


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


# --------------------------------------------------------------------------- restart modes, checkpoint_now, advice


def test_each_restart_costs_the_mode_the_engine_chose() -> None:
    modes = load_policy(None).restart_modes
    timings = measure_all()
    assert timings["faulty_gpu"].first.restart_mode == "spare"  # fenced, a spare node known
    assert timings["software_bug"].first.restart_mode == "in_process"  # torchrun said so, nothing left out
    _, phases = breakdown(Assumptions())
    fl = phases["faultline"]
    gpu_h = Assumptions().gpus / 3600
    assert fl["faulty_gpu"]["requeue"] == pytest.approx(148 * modes.spare_s * gpu_h)
    assert fl["faulty_gpu"]["reload"] == pytest.approx(148 * Assumptions().job_reload_s * gpu_h)
    assert fl["software_bug"]["requeue"] == pytest.approx(54 * modes.in_process_s * gpu_h)  # its reload inside
    assert fl["software_bug"]["reload"] == 0


def test_way_back_counts_the_reload_once() -> None:
    modes, a = load_policy(None).restart_modes, Assumptions()
    assert way_back("in_process", modes, a) == (modes.in_process_s, 0.0)
    assert way_back("spare", modes, a) == (modes.spare_s, a.job_reload_s)
    assert way_back("requeue", modes, a) == (modes.requeue_s, a.job_reload_s)


def test_without_torchrun_the_engine_requeues_and_it_costs_more() -> None:
    timings = measure_all(launcher=False)
    assert timings["software_bug"].first.restart_mode == "requeue"
    _, with_launcher = breakdown(Assumptions())
    _, without = breakdown(Assumptions(in_process_launcher=False))
    assert without["faultline"]["software_bug"]["requeue"] > with_launcher["faultline"]["software_bug"]["requeue"]


def test_a_restart_in_place_on_broken_hardware_fails_again() -> None:
    _, phases = breakdown(Assumptions())
    assert measure_all()["nic"].first.restart_mode == "in_process"  # the engine cannot blame the link
    nic, bug = phases["faultline"]["nic"], phases["faultline"]["software_bug"]
    assert nic["human_repair"] == 0 and nic["approval_wait"] > 0  # the repeat waits for a person, then a spare
    broken = breakdown(Assumptions(taxonomy=(Cause("nic", 7, True, True),)))[1]["faultline"]["nic"]
    fixed = breakdown(Assumptions(taxonomy=(Cause("nic", 7, False, True),)))[1]["faultline"]["nic"]
    assert broken["requeue"] > fixed["requeue"] and broken["detection"] > fixed["detection"]  # the repeat's cost
    assert bug["human_repair"] == 0


def test_only_the_causes_the_engine_forewarns_may_be_predicted() -> None:
    lead = verify()
    assert set(forewarned()) == {"gpu_hbm3_memory", "gpu_thermal_interface_sensor"}
    assert lead["faulty_gpu"] is None and lead["gpu_sram_memory"] is None  # PCIe replays, XID 94: no checkpoint_now
    with pytest.raises(ValueError, match="faulty_gpu"):
        breakdown(Assumptions(predicted_share={"faulty_gpu": 0.5}))


def test_a_zero_share_changes_nothing() -> None:
    zero = {c: 0.0 for c in forewarned()}
    assert simulate(Assumptions(predicted_share=zero)) == simulate(Assumptions())


def test_a_predicted_occurrence_loses_the_save_only() -> None:
    a = Assumptions(predicted_share={"gpu_hbm3_memory": 1.0})
    totals, phases = breakdown(a)
    base_totals, base = breakdown(Assumptions())
    gpu_h = a.gpus / 3600
    assert phases["faultline"]["gpu_hbm3_memory"]["lost_work"] == pytest.approx(72 * a.checkpoint_save_s * gpu_h)
    assert phases["baseline"] == base["baseline"]  # the baseline has no checkpoint_now
    assert {c: v for c, v in phases["faultline"].items() if c != "gpu_hbm3_memory"} == \
        {c: v for c, v in base["faultline"].items() if c != "gpu_hbm3_memory"}
    assert totals["faultline_lost_gpu_hours"] < base_totals["faultline_lost_gpu_hours"]


def test_the_advised_interval_is_youngs_and_beats_half_an_hour() -> None:
    a = Assumptions()
    mtbf = 54 * 86_400 / 419
    assert mtbf_s(a) == pytest.approx(mtbf)
    got = advised(a, runs=3)
    assert got["interval_s"] == pytest.approx(math.sqrt(2 * mtbf * a.checkpoint_save_s), abs=0.1)
    assert [row["checkpoint_save_s"] for row in got["by_save_time"]] == [30, 10, 5]
    at_30_min = replace(a, checkpoint_interval_s=1800)
    assert got["faultline_ettr"] >= ettr(at_30_min, simulate(at_30_min)["faultline_lost_gpu_hours"]) - 0.005
    assert got["faultline_ettr_checkpoint_now"] >= got["faultline_ettr"]


def test_compare_reports_the_new_figures_and_the_phases_still_add_up() -> None:
    r = compare(runs=2, intervals=(1800,))
    shares = [row["predicted_share"] for row in r["checkpoint_now_sensitivity"]]
    assert shares == [0, 0.25, 0.5]
    ettrs = [row["faultline_ettr"] for row in r["checkpoint_now_sensitivity"]]
    assert ettrs == sorted(ettrs)
    assert r["assumptions"]["restart_modes_s"] == load_policy(None).restart_modes.model_dump()
    assert r["assumptions"]["in_process_launcher"] is True and r["assumptions"]["predicted_share"] == {}
    said = "\n".join(goodput_lines(r))  # what `faultline bench` prints at step 6/6
    assert f"faultline {r['faultline_ettr']:.3f}" in said and "checkpoint-now" in said and "Young" in said
    totals, phases = breakdown(replace(Assumptions(), predicted_share={c: 0.5 for c in forewarned()}))
    for policy in ("baseline", "faultline"):
        summed = sum(v for cause in phases[policy].values() for v in cause.values())
        assert summed == pytest.approx(totals[f"{policy}_lost_gpu_hours"], rel=1e-9)


def test_an_unknown_cause_waits_for_approval_only_within_the_engine_s_window() -> None:
    # The engine restarts an unknown cause on its own once per restarts.unknown_cause_window_s (6 h): over a
    # 54-day run most such failures are far apart and restart on their own; counted per job forever (the rule
    # before the window), every one after the first waited for a person.
    def approval(window: float | None) -> float:
        _, phases = breakdown(Assumptions(unknown_cause_window_s=window))
        return phases["faultline"]["software_bug"]["approval_wait"]

    default, forever = approval(None), approval(1e12)
    assert 0 < default < forever / 2
    assert approval(1.0) == 0  # no window: every software bug restarts on its own
