"""The correlator policy: a YAML file users edit (see ``policy.yaml`` beside this module)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from correlators.blast_radius import BlastLimits
from correlators.restart_mode import RestartModes
from streams.decisions import CATEGORIES

__all__ = ["Policy", "CategoryRule", "Timing", "Thresholds", "RestartLimits", "Gate", "Checkpoints", "Lemons", "load_policy",
           "DEFAULT_POLICY"]

DEFAULT_POLICY = Path(__file__).with_name("policy.yaml")

Action = Literal[
    "quarantine_gpu", "cordon_node", "drain_node", "restart_job", "validate_gpu",
    "open_ticket", "notify", "reset_gpu", "reboot_node", "checkpoint_now",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CategoryRule(_Strict):
    severity: Literal["page", "ticket", "info"]
    actions: list[Action]


class Timing(_Strict):
    fence_debounce_s: float = 0.1
    settle_s: float = 30
    max_settle_s: float = 90
    hardware_lookback_s: float = 120
    confirm_window_s: float = 120
    power_window_s: float = 60
    silence_min_s: float = 60
    silence_factor: float = 3
    rack_window_s: float = 120
    bmc_wait_s: float = 60
    clock_skew_tolerance_s: float = 30
    verify_timeout_s: float = 1800
    reopen_within_s: float = 21600
    progress_steps: int = 10
    progress_throughput: float = 0.7
    verify_hold_s: float = 300
    verify_shortfall_s: float = 900
    notify_min_interval_s: float = 30


class Thresholds(_Strict):
    temperature_c: float = 85
    temperature_sustain_s: float = 300
    thermal_reasons: list[str] = Field(
        default_factory=lambda: ["HW_THERMAL_SLOWDOWN", "HW_SLOWDOWN", "SW_THERMAL_SLOWDOWN"])
    ecc_window_s: float = 259200
    ecc_min_signals: int = 4
    ecc_rising: bool = True
    checkpoint_stale_factor: float = 3
    hang_min_s: float = 120
    hang_factor: float = 5
    hang_busy_min_s: float = 30
    hang_busy_factor: float = 3
    busy_util_pct: float = 90
    low_power_fraction: float = 0.6
    hang_min_intervals: int = Field(default=3, ge=0)  # cold start: correlators/rules/hang_witness.py
    hang_idle_util_pct: float = 5
    gpu_lost_factor: float = 2.5
    loss_plateau_s: float = 7200
    loss_min_improvement: float = 0.001


class RestartLimits(_Strict):
    burst: int = 8
    per_s: float = 60
    fence_breaches: int = 2
    load_failures: int = 2
    unknown_cause_window_s: float = Field(default=21_600, gt=0)


#: Error texts of a checkpoint that does not load (truncated shards, missing keys, unreadable archives).
LOAD_FAILURE_PATTERNS = (
    r"state_dict", r"missing key", r"unexpected key", r"size mismatch for", r"PytorchStreamReader",
    r"central directory", r"UnpicklingError", r"SafetensorError", r"deserializ", r"truncated",
    r"unexpected end of (file|data)", r"EOFError", r"CheckpointException", r"checkpoint.*(corrupt|not found|load)",
    r"(load|loading).*checkpoint", r"No such file or directory.*(ckpt|checkpoint|step_)",
)


class Gate(_Strict):
    """The restart gate (:mod:`correlators.restart_gate`): how long hardware may take to be judged."""

    max_wait_s: float = 300
    late_line_s: float = 60
    cadence_factor: float = 2


class Checkpoints(_Strict):
    """Which checkpoints are restart points (:mod:`correlators.checkpoints`)."""

    node_local_prefixes: list[str] = Field(
        default_factory=lambda: ["/mnt/nvme", "/mnt/local", "/local", "/scratch/local", "/tmp", "/dev/shm"])
    load_failure_patterns: list[str] = Field(default_factory=lambda: list(LOAD_FAILURE_PATTERNS))

    @field_validator("load_failure_patterns")
    @classmethod
    def _patterns_compile(cls, v: list[str]) -> list[str]:
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"load_failure_patterns: {pattern!r} is not a regular expression ({exc})") from exc
        return v


# --- lemons: hardware that keeps hurting jobs (correlators/rules/lemons.py) -------------------------
#: Failure categories that do not blame hardware: the only ones a lemon score counts.
UNEXPLAINED_CATEGORIES = ("software_crash", "network_timeout", "training_hang", "cuda_oom")


class Lemons(_Strict):
    """When a GPU (or node) implicated in repeated failures blamed on software or unknown causes is fenced
    and sent to deep diagnostics. ``policy.yaml`` documents each knob."""

    enabled: bool = True
    threshold: float = 2.5
    node_threshold: float = 4.0
    half_life_s: float = Field(default=1_209_600, gt=0)
    min_jobs: int = Field(default=2, ge=1)
    weights: dict[str, float] = Field(
        default_factory=lambda: {"software_crash": 1.0, "network_timeout": 0.5, "training_hang": 0.5})
    forget_below: float = Field(default=0.05, ge=0)
    diagnostic: str = "dcgmi diag -r 3"

    @field_validator("weights")
    @classmethod
    def _unexplained_only(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(set(v) - set(UNEXPLAINED_CATEGORIES))
        if bad:
            raise ValueError(f"lemons.weights: {bad} cannot count: only failures not blamed on hardware do "
                             f"(one of {list(UNEXPLAINED_CATEGORIES)}); hardware faults fence by their own rule")
        if any(w < 0 for w in v.values()):
            raise ValueError("lemons.weights: a weight is at least 0")
        return v


class Policy(_Strict):
    xid: dict[int, str]
    xid_needs_pending_remap: list[int] = Field(default_factory=list)
    categories: dict[str, CategoryRule]
    unknown_cause_auto_restarts: int = 1
    timing: Timing = Timing()
    thresholds: Thresholds = Thresholds()
    restarts: RestartLimits = RestartLimits()
    gate: Gate = Gate()
    checkpoints: Checkpoints = Checkpoints()
    lemons: Lemons = Lemons()
    blast_radius: BlastLimits = BlastLimits()
    restart_modes: RestartModes = RestartModes()

    @field_validator("xid")
    @classmethod
    def _known_xid_categories(cls, v: dict[int, str]) -> dict[int, str]:
        bad = {code: c for code, c in v.items() if c != "software" and c not in CATEGORIES}
        if bad:
            raise ValueError(f"xid: unknown categories {bad}; use one of {list(CATEGORIES)} or 'software'")
        return v

    @field_validator("categories")
    @classmethod
    def _every_category(cls, v: dict[str, CategoryRule]) -> dict[str, CategoryRule]:
        unknown = set(v) - set(CATEGORIES)
        if unknown:
            raise ValueError(f"categories: unknown {sorted(unknown)}; known: {list(CATEGORIES)}")
        missing = set(CATEGORIES) - set(v)
        if missing:
            raise ValueError(f"categories: no rule for {sorted(missing)}")
        return v

    def rule(self, category: str) -> CategoryRule:
        return self.categories[category]


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_policy(path: str | Path | None = None) -> Policy:
    """The default policy, with the user's file (if any) merged over it key by key."""
    data = yaml.safe_load(DEFAULT_POLICY.read_text(encoding="utf-8"))
    if path:
        user = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(user, dict):
            raise ValueError(f"policy file {path} must be a YAML mapping")
        data = _merge(data, user)
    return Policy.model_validate(data)
