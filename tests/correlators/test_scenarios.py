"""Decision scenarios of our own, scored by the contract's scorer (contract §3) and held to a full score.

The scenarios live in :mod:`scenario_book`; every one is a capture
built with :mod:`builder` and the expectation an SRE would
write for it. Together they name every root-cause category and every command
type of the contract but ``release_gpu`` (no capture source can ask for it).
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from scenario_book import SCENARIOS, decisions

from faultline.outcome import decide_offline
from streams.decisions import CATEGORIES, COMMAND_TYPES
from tests.harness.shared import CONTRACT, missing_message, needs_shared, scenario_files

SCORER_PATH = CONTRACT / "score_replay.py"


@functools.cache
def _scorer() -> ModuleType:
    """The contract's scorer, loaded when a test first needs it (missing, that test fails; see needs_shared)."""
    if not SCORER_PATH.is_file():
        pytest.fail(missing_message([SCORER_PATH]), pytrace=False)
    spec = importlib.util.spec_from_file_location("score_replay", SCORER_PATH)
    assert spec is not None and spec.loader is not None, SCORER_PATH
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod



def _summary(out: dict[str, Any]) -> str:
    rows = [f"  incident {i['job']} {i['category']} {i['culprit']} opened {i['opened_at']} {i['state']}"
            for i in out["incidents"]]
    rows += [f"  {c['issued_at']} {c['type']} {c['target']} approval={c['requires_approval']} "
             f"{ {k: v for k, v in c['params'].items() if k in ('checkpoint', 'gpus', 'exclude')} }"
             for c in out["commands"]]
    return "\n".join(rows)


def run_scenario(name: str, tmp_path: Path) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    cap, exp = SCENARIOS[name]()
    capture = tmp_path / f"{name}.jsonl"
    lines = cap.write(capture)
    out = decide_offline(lines)
    check = exp.pop("_check", None)
    score_replay = _scorer()
    scorer = score_replay.Scorer(score_replay.load_inventory(str(capture)), out)
    scorer.score(exp)
    failed = list(scorer.failed) + (check(out, cap) if check else [])
    return out, failed, exp


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_scores_full(name: str, tmp_path: Path) -> None:
    out, failed, _ = run_scenario(name, tmp_path)
    assert not failed, f"{name}: failed checks:\n  " + "\n  ".join(failed) + "\ndecisions:\n" + _summary(out)


@pytest.mark.parametrize("name", ["clock_skew_kernel_ahead", "clock_skew_kernel_behind",
                                  "clock_skew_torchelastic_behind"])
def test_clock_skew_changes_no_decision(name: str, tmp_path: Path) -> None:
    """±30 s on one source's clock: the same incidents and the same commands as with true clocks."""
    skewed, _, _ = run_scenario(name, tmp_path)
    plain, _, _ = run_scenario("xid79_fixed_job", tmp_path)
    assert decisions(skewed) == decisions(plain), _summary(skewed) + "\n---\n" + _summary(plain)


def test_scenarios_cover_the_contract(tmp_path: Path) -> None:
    """Every category is expected somewhere, every command type (but release_gpu) is required somewhere."""
    categories: set[str] = set()
    commands: set[str] = set()
    for fn in SCENARIOS.values():
        _, exp = fn()
        categories |= {e["category"] for e in exp.get("incidents", [])}
        commands |= {m["type"] for m in exp.get("must", [])}
        commands |= {m["type"] for alts in exp.get("must_any", []) for m in alts}
    assert len(SCENARIOS) >= 30
    assert categories == set(CATEGORIES)
    assert commands == set(COMMAND_TYPES) - {"release_gpu"}


def test_output_is_json_and_ids_unique(tmp_path: Path) -> None:
    out, _, _ = run_scenario("rack_outage", tmp_path)
    json.dumps(out)
    ids = [c["id"] for c in out["commands"]]
    assert len(ids) == len(set(ids))


@needs_shared(SCORER_PATH)
@pytest.mark.parametrize("capture", scenario_files(), ids=lambda p: p.stem)
def test_public_scenarios_still_score_full(capture: Path) -> None:
    """The shared examples stay at full score while the engine grows more general."""
    exp = json.loads(capture.with_suffix(".expect.json").read_text(encoding="utf-8"))
    out = decide_offline(capture.read_bytes().splitlines())
    score_replay = _scorer()
    scorer = score_replay.Scorer(score_replay.load_inventory(str(capture)), out)
    scorer.score(exp)
    assert not scorer.failed, "\n".join(scorer.failed) + "\n" + _summary(out)
