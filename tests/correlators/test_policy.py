"""The policy file: loaded, validated with clear errors, and a user's file merged over it changes decisions."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from builder import Capture
from pydantic import ValidationError
from scenario_book import SCENARIOS

from correlators.policy import (
    DEFAULT_POLICY,
    Checkpoints,
    Gate,
    Lemons,
    Policy,
    RestartLimits,
    Thresholds,
    Timing,
    load_policy,
)
from faultline.outcome import decide_offline
from streams.decisions import CATEGORIES


def _user(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _decide(name: str, policy: str | None = None) -> tuple[dict[str, Any], Capture]:
    cap, _ = SCENARIOS[name]()
    return decide_offline(cap.lines(), policy), cap


def _types(out: dict[str, Any], job: str | None = None) -> list[str]:
    return [c["type"] for c in out["commands"] if job is None or c["target"]["job"] == job]


def _ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


# --- loading and validation ---------------------------------------------------------------
def test_default_policy_loads_and_covers_every_category() -> None:
    p = load_policy()
    assert set(p.categories) == set(CATEGORIES)
    assert all(c == "software" or c in CATEGORIES for c in p.xid.values())
    assert p.xid[79] == "gpu_off_bus" and 63 in p.xid_needs_pending_remap


def test_code_defaults_agree_with_the_shipped_file() -> None:
    """A key missing from the file falls back to the model's default: both must say the same."""
    data = yaml.safe_load(DEFAULT_POLICY.read_text(encoding="utf-8"))
    assert Timing(**data["timing"]) == Timing()
    assert Thresholds(**data["thresholds"]) == Thresholds()
    assert RestartLimits(**data["restarts"]) == RestartLimits()


def test_unknown_category_is_a_clear_error(tmp_path: Path) -> None:
    path = _user(tmp_path, "categories:\n  gpu_on_fire: {severity: page, actions: [notify]}\n")
    with pytest.raises(ValidationError, match="unknown.*gpu_on_fire"):
        load_policy(path)


def test_xid_to_unknown_category_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="xid: unknown categories"):
        load_policy(_user(tmp_path, "xid:\n  79: gpu_gone\n"))


@pytest.mark.parametrize("text, match", [
    ("categories:\n  cuda_oom: {severity: info, actions: [reformat_disk]}\n", "reformat_disk|literal_error|Input should be"),
    ("categories:\n  cuda_oom: {severity: urgent}\n", "severity"),
    ("timing:\n  settle_seconds: 5\n", "settle_seconds"),
    ("restart_policy: {}\n", "restart_policy"),
])
def test_bad_values_and_unknown_keys_are_refused(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        load_policy(_user(tmp_path, text))


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mapping"):
        load_policy(_user(tmp_path, "- just\n- a list\n"))


def test_user_file_merges_key_by_key(tmp_path: Path) -> None:
    p = load_policy(_user(tmp_path, "categories:\n  cuda_oom: {actions: [notify, restart_job]}\n"
                                    "timing:\n  settle_s: 120\n"))
    assert p.rule("cuda_oom").severity == "info"  # kept from the defaults
    assert p.rule("cuda_oom").actions == ["notify", "restart_job"]
    assert p.timing.settle_s == 120 and p.timing.max_settle_s == Timing().max_settle_s
    assert p.rule("gpu_off_bus") == load_policy().rule("gpu_off_bus")
    assert isinstance(p, Policy)


# --- a user's policy changes decisions --------------------------------------------------------
def test_cuda_oom_restarts_when_the_policy_says_so(tmp_path: Path) -> None:
    plain, _ = _decide("cuda_oom_config_not_hardware")
    assert "restart_job" not in _types(plain)
    out, _ = _decide("cuda_oom_config_not_hardware",
                     _user(tmp_path, "categories:\n  cuda_oom: {actions: [notify, restart_job]}\n"))
    assert "restart_job" in _types(out, "sft")


def test_xid79_mapped_to_another_category(tmp_path: Path) -> None:
    """A site that treats XID 79 as a firmware hang: its category and actions follow."""
    out, _ = _decide("xid79_fixed_job", _user(tmp_path, "xid:\n  79: gpu_firmware_fault\n"))
    assert [i["category"] for i in out["incidents"]] == ["gpu_firmware_fault"]
    resets = [c for c in out["commands"] if c["type"] == "reset_gpu"]
    assert resets and all(c["requires_approval"] for c in resets)


def test_gpu_off_bus_action_list_replaced(tmp_path: Path) -> None:
    """Fence and tell, but let the owner restart: no restart_job, a notify instead."""
    out, _ = _decide("xid79_fixed_job", _user(
        tmp_path, "categories:\n  gpu_off_bus: {actions: [quarantine_gpu, open_ticket, notify]}\n"))
    types = _types(out)
    assert "restart_job" not in types and "notify" in types and "quarantine_gpu" in types


def test_settle_time_moves_the_restart(tmp_path: Path) -> None:
    plain, _ = _decide("xid79_fixed_job")
    slow, _ = _decide("xid79_fixed_job", _user(tmp_path, "timing:\n  settle_s: 200\n  max_settle_s: 400\n"))

    def gap(out: dict[str, Any]) -> float:
        fault = _ts(out["incidents"][0]["opened_at"])
        return (_ts(next(c for c in out["commands"] if c["type"] == "restart_job")["issued_at"]) - fault).total_seconds()

    assert gap(plain) == pytest.approx(30, abs=1)
    assert gap(slow) == pytest.approx(200, abs=1)


def test_temperature_limit_is_the_policys(tmp_path: Path) -> None:
    plain, _ = _decide("thermal_sustained")
    assert [i["category"] for i in plain["incidents"]] == ["gpu_thermal"]
    relaxed, _ = _decide("thermal_sustained", _user(tmp_path, "thresholds:\n  temperature_c: 95\n"))
    assert relaxed["incidents"] == []


def test_unknown_cause_restarts_need_approval_from_the_first(tmp_path: Path) -> None:
    out, _ = _decide("python_exception_crash", _user(tmp_path, "unknown_cause_auto_restarts: 0\n"))
    restarts = [c for c in out["commands"] if c["type"] == "restart_job"]
    assert restarts and all(c["requires_approval"] for c in restarts)


def test_the_unknown_cause_window_is_the_policys(tmp_path: Path) -> None:
    # seven hours between two software crashes: outside the default 6 h window both restart on their own
    # (scenario software_crash_a_quiet_day_later_restarts_on_its_own); inside a 8 h one the second waits
    out, _ = _decide("software_crash_a_quiet_day_later_restarts_on_its_own",
                     _user(tmp_path, "restarts:\n  unknown_cause_window_s: 28800\n"))
    restarts = [c["requires_approval"] for c in out["commands"] if c["type"] == "restart_job"]
    assert restarts == [False, True]
    assert "in the last 8 h" in [c for c in out["commands"] if c["type"] == "restart_job"][1]["reason"]


def test_restart_rate_limit_is_the_policys(tmp_path: Path) -> None:
    out, _ = _decide("recovery_storm_staggered", _user(tmp_path, "restarts:\n  burst: 3\n  per_s: 120\n"))
    times = sorted(_ts(c["issued_at"]) for c in out["commands"] if c["type"] == "restart_job")
    assert len(times) == 12
    for k, t in enumerate(times):
        assert sum(1 for u in times[k:] if (u - t).total_seconds() < 120) <= 3
    assert (times[-1] - times[0]).total_seconds() >= 3 * 120


def test_reopen_window_is_the_policys(tmp_path: Path) -> None:
    """With no reopen window a restart loop becomes one incident per failure."""
    plain, _ = _decide("software_crash_loop_needs_approval")
    assert [i["category"] for i in plain["incidents"]] == ["software_crash"]
    split, _ = _decide("software_crash_loop_needs_approval", _user(tmp_path, "timing:\n  reopen_within_s: 0\n"))
    assert [i["category"] for i in split["incidents"]] == ["software_crash", "software_crash"]


# --- the knobs of the restart gate, checkpoints, hangs and verification (issues 14 and 21) ---------------------
def test_new_sections_agree_with_the_shipped_file() -> None:
    data = yaml.safe_load(DEFAULT_POLICY.read_text(encoding="utf-8"))
    assert Gate(**data["gate"]) == Gate()
    assert Checkpoints(**data["checkpoints"]) == Checkpoints()


def test_a_load_failure_pattern_that_is_no_regular_expression_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="not a regular expression"):
        load_policy(_user(tmp_path, "checkpoints:\n  load_failure_patterns: ['state_dict(']\n"))


def _restarts(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in out["commands"] if c["type"] == "restart_job"]


def _excluded(restart: dict[str, Any]) -> dict[str, str]:
    return {x["node"] + (f":{x['gpu']}" if x["gpu"] else ""): x["verdict"]
            for x in (restart["params"].get("gate") or {}).get("excluded", [])}


def _opened(out: dict[str, Any], job: str) -> datetime:
    return min(_ts(i["opened_at"]) for i in out["incidents"] if i["job"] == job)


def _state(out: dict[str, Any], job: str) -> str:
    return str(next(i for i in out["incidents"] if i["job"] == job)["state"])


def test_gate_bound_is_the_policys(tmp_path: Path) -> None:
    """Past the bound the unjudged node is left out; with a longer bound the restart waits for its verdict."""
    plain, _ = _decide("gate_bound_excludes_what_is_still_unjudged")
    [first] = _restarts(plain)
    assert _excluded(first) == {"n2": "no_verdict"}
    longer, _ = _decide("gate_bound_excludes_what_is_still_unjudged", _user(tmp_path, "gate:\n  max_wait_s: 900\n"))
    [waited] = _restarts(longer)
    assert _excluded(waited) == {} and "n2" in waited["params"]["exclude"]["nodes"]
    kinds = [c["type"] for c in longer["commands"]]
    assert kinds.index("cordon_node") < kinds.index("restart_job")  # judged and fenced first
    assert _ts(waited["issued_at"]) > _ts(first["issued_at"])


def _late_nvlink() -> list[str]:
    """A crash; the NVLink XID naming the rank's GPU (NVML sees nothing of it) arrives 45 s late."""
    cap = (Capture(duration=1800).node("n1").node("n2").node("n3").heartbeats(15).nvml(30).job("pt", ["n1", "n2"]))
    cap.crash(900.5, "pt", rank=5, error="RuntimeError: CUDA error: unspecified launch failure")
    cap.xid(900, "n1", 5, 74).late(45)
    return cap.lines()


def test_late_line_tolerance_is_the_policys(tmp_path: Path) -> None:
    """Waited for a minute, the late XID names the GPU before the restart; with 30 s it comes too late."""
    [one] = _restarts(decide_offline(_late_nvlink()))
    assert len(one["params"]["exclude"]["gpus"]) == 1
    hasty = decide_offline(_late_nvlink(), _user(tmp_path, "gate:\n  late_line_s: 30\n"))
    assert len(_restarts(hasty)) == 2 and _restarts(hasty)[0]["params"]["exclude"]["gpus"] == []


def test_bmc_cadence_factor_is_the_policys(tmp_path: Path) -> None:
    """n2's BMC stops reporting (its siblings' go on): after two poll intervals it is not answering (suspect);
    allowed ten, it is still pending when the gate's bound comes (left out without a verdict, later)."""
    cap = Capture(duration=2400).node("n1").node("n2").node("n3").heartbeats(15).nvml(30).bmc_polls(60)
    cap.job("pt", ["n1", "n2"]).bmc_down(880, "n2", quiet=True)
    cap.crash(913, "pt", rank=2, error="ValueError: expected a batch of 16")
    lines = cap.lines()
    [plain] = _restarts(decide_offline(lines))
    assert _excluded(plain) == {"n2": "suspect"}
    [patient] = _restarts(decide_offline(lines, _user(tmp_path, "gate:\n  cadence_factor: 10\n")))
    assert _excluded(patient) == {"n2": "no_verdict"}
    assert (_ts(patient["issued_at"]) - _ts(plain["issued_at"])).total_seconds() > 100


def test_gpu_lost_factor_is_the_policys(tmp_path: Path) -> None:
    """With a very patient NVML judge the gone GPU is still unjudged at the bound: left out without a verdict."""
    plain, _ = _decide("gpu_gone_from_nvml_without_xid")
    first = _restarts(plain)[0]
    assert _excluded(first) == {} and len(first["params"]["exclude"]["gpus"]) == 1
    patient, _ = _decide("gpu_gone_from_nvml_without_xid", _user(tmp_path, "thresholds:\n  gpu_lost_factor: 12\n"))
    assert list(_excluded(_restarts(patient)[0]).values()) == ["no_verdict"]


def test_hang_floor_and_factor_are_the_policys(tmp_path: Path) -> None:
    plain, _ = _decide("hang_learned_from_the_cadence")
    floor, _ = _decide("hang_learned_from_the_cadence", _user(tmp_path, "thresholds:\n  hang_min_s: 600\n"))
    assert (_opened(floor, "pt") - _opened(plain, "pt")).total_seconds() > 400
    regular, _ = _decide("slow_regular_steps_are_not_a_hang")
    assert regular["incidents"] == []
    eager, _ = _decide("slow_regular_steps_are_not_a_hang", _user(tmp_path, "thresholds:\n  hang_factor: 0.9\n"
                                                                             "  hang_min_s: 60\n"))
    assert [i["category"] for i in eager["incidents"]] == ["training_hang"]


@pytest.mark.parametrize("knob", ["hang_busy_min_s: 400", "hang_busy_factor: 40\n  hang_busy_min_s: 1",
                                  "busy_util_pct: 100.5", "low_power_fraction: 0.1"])
def test_busy_low_power_corroboration_is_the_policys(tmp_path: Path, knob: str) -> None:
    """Each of the corroboration's knobs, set so that it does not corroborate: the plain timeout, later."""
    plain, _ = _decide("hang_spinning_in_a_collective_found_fast")
    other, _ = _decide("hang_spinning_in_a_collective_found_fast", _user(tmp_path, f"thresholds:\n  {knob}\n"))
    assert (_opened(other, "pt") - _opened(plain, "pt")).total_seconds() > 30


def test_fence_breach_bound_is_the_policys(tmp_path: Path) -> None:
    plain, _ = _decide("fence_not_enforced_loop_escalates")
    assert _state(plain, "pt") == "escalated" and len(_restarts(plain)) == 2
    patient, _ = _decide("fence_not_enforced_loop_escalates", _user(tmp_path, "restarts:\n  fence_breaches: 5\n"))
    assert _state(patient, "pt") != "escalated" and len(_restarts(patient)) == 3


def test_node_local_prefixes_are_the_policys(tmp_path: Path) -> None:
    plain, _ = _decide("node_local_checkpoint_lost_with_its_node")
    assert _restarts(plain)[0]["params"]["checkpoint"]["step"] == 690
    shared, _ = _decide("node_local_checkpoint_lost_with_its_node",
                        _user(tmp_path, "checkpoints:\n  node_local_prefixes: [/scratch]\n"))
    assert _restarts(shared)[0]["params"]["checkpoint"]["step"] > 690


def test_load_failure_patterns_and_bound_are_the_policys(tmp_path: Path) -> None:
    plain, cap = _decide("checkpoint_fails_to_load_missing_keys")
    steps = [r["params"]["checkpoint"]["step"] for r in _restarts(plain)]
    assert steps[1] < steps[0]
    blind, _ = _decide("checkpoint_fails_to_load_missing_keys",
                       _user(tmp_path, "checkpoints:\n  load_failure_patterns: ['no such text at all']\n"))
    assert [r["params"]["checkpoint"]["step"] for r in _restarts(blind)] == [steps[0], steps[0]]
    twice, _ = _decide("checkpoint_load_fails_twice_stops_for_a_person")
    assert _state(twice, "pt") == "escalated" and len(_restarts(twice)) == 2
    more, _ = _decide("checkpoint_load_fails_twice_stops_for_a_person",
                      _user(tmp_path, "restarts:\n  load_failures: 3\n"))
    assert len(_restarts(more)) == 3


def test_verification_fraction_hold_and_shortfall_are_the_policys(tmp_path: Path) -> None:
    plain, _ = _decide("slow_recovery_that_never_catches_up")
    assert _state(plain, "pt") == "escalated"
    lenient, _ = _decide("slow_recovery_that_never_catches_up", _user(tmp_path, "timing:\n  progress_throughput: 0.4\n"))
    assert _state(lenient, "pt") == "resolved"

    def shortfall_at(out: dict[str, Any]) -> datetime:
        return next(_ts(c["issued_at"]) for c in out["commands"]
                    if c["type"] == "notify" and "samples/s" in str(c["params"].get("message")))

    later, _ = _decide("slow_recovery_that_never_catches_up", _user(tmp_path, "timing:\n  verify_shortfall_s: 1500\n"))
    assert (shortfall_at(later) - shortfall_at(plain)).total_seconds() >= 500

    def resolved_at(out: dict[str, Any]) -> datetime:
        inc = next(i for i in out["incidents"] if i["job"] == "pt")
        assert inc["state"] == "resolved"
        return _ts(inc["updated_at"])

    quick, _ = _decide("recovery_at_full_speed_resolves_once_it_holds")
    held, _ = _decide("recovery_at_full_speed_resolves_once_it_holds", _user(tmp_path, "timing:\n  verify_hold_s: 900\n"))
    assert (resolved_at(held) - resolved_at(quick)).total_seconds() >= 500


# --- lemons: threshold, decay, jobs and weights are the policy's -----------------------------------
def _lemon_fences(out: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(c["type"], c["target"]["gpu"]) for c in out["commands"]
            if c["params"].get("reason") == "lemon" and c["type"] in ("quarantine_gpu", "cordon_node")]


def test_lemon_defaults_agree_with_the_shipped_file() -> None:
    data = yaml.safe_load(DEFAULT_POLICY.read_text(encoding="utf-8"))
    assert Lemons(**data["lemons"]) == Lemons()


def test_lemon_threshold_is_the_policys(tmp_path: Path) -> None:
    """Three crashes over six days score 2.6: fenced at the default 2.5, not at 3."""
    plain, _ = _decide("lemon_gpu_three_jobs_in_a_week")
    assert len(_lemon_fences(plain)) == 1
    strict, _ = _decide("lemon_gpu_three_jobs_in_a_week", _user(tmp_path, "lemons:\n  threshold: 3.0\n"))
    assert _lemon_fences(strict) == []
    eager, _ = _decide("lemon_gpu_once_is_not_a_lemon", _user(tmp_path, "lemons:\n  node_threshold: 2.5\n"))
    assert [t for t, _ in _lemon_fences(eager)] == ["cordon_node"]  # the node's three crashes, then


def test_lemon_decay_is_the_policys(tmp_path: Path) -> None:
    """With a one-day half-life the first two crashes have faded by the third: no lemon."""
    fast, _ = _decide("lemon_gpu_three_jobs_in_a_week", _user(tmp_path, "lemons:\n  half_life_s: 86400\n"))
    assert _lemon_fences(fast) == []
    slow, _ = _decide("lemon_gpu_three_jobs_in_a_week",
                      _user(tmp_path, "lemons:\n  half_life_s: 604800000\n  threshold: 2.999\n"))
    assert len(_lemon_fences(slow)) == 1  # no decay: three crashes score 3


def test_lemon_jobs_and_weights_are_the_policys(tmp_path: Path) -> None:
    one_job, _ = _decide("lemon_one_jobs_own_bug_is_not_a_lemon", _user(tmp_path, "lemons:\n  min_jobs: 1\n"))
    assert len(_lemon_fences(one_job)) == 1
    unweighted, _ = _decide("lemon_gpu_three_jobs_in_a_week",
                            _user(tmp_path, "lemons:\n  weights: {software_crash: 0}\n"))
    assert _lemon_fences(unweighted) == []
    off, _ = _decide("lemon_gpu_three_jobs_in_a_week", _user(tmp_path, "lemons:\n  enabled: false\n"))
    assert _lemon_fences(off) == [] and "validate_gpu" not in _types(off)


def test_lemon_weights_name_only_failures_not_blamed_on_hardware(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="gpu_off_bus.*cannot count"):
        load_policy(_user(tmp_path, "lemons:\n  weights: {gpu_off_bus: 1}\n"))
    with pytest.raises(ValidationError, match="half_life_s"):
        load_policy(_user(tmp_path, "lemons:\n  half_life_s: 0\n"))
