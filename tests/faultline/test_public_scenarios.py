"""Every public scenario, replayed through the real broker and correlator worker, scores full."""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType

import pytest

from tests.sinks.replayed import SCENARIOS, Replayed

pytest_plugins = ["tests.sinks.replayed"]
pytestmark = pytest.mark.broker


def _scorer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("score_replay", SCENARIOS.parent / "contract" / "score_replay.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.jsonl")) or ["(none)"])
def test_scores_full_through_the_broker(replayed_archive: Replayed, name: str) -> None:
    score = _scorer()
    capture = SCENARIOS / f"{name}.jsonl"
    expect = json.loads((SCENARIOS / f"{name}.expect.json").read_text())
    scorer = score.Scorer(score.load_inventory(str(capture)), replayed_archive.runs[name].contract())
    passed, total = scorer.score(expect)
    assert passed == total, scorer.failed
