"""Policy edits whose backtest must show exactly the expected difference (scenario_book.POLICY_EDITS), and
agree with independent replays of the same capture under each policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scenario_book import POLICY_EDITS, SCENARIOS

from correlators.policy import load_policy
from faultline.backtest.diff import compare
from faultline.backtest.judge import in_window
from faultline.backtest.run import backtest
from faultline.backtest.source import from_capture
from faultline.outcome import decide_offline


@pytest.mark.parametrize("name", sorted(POLICY_EDITS))
def test_a_policy_edit_shows_exactly_the_expected_difference(name: str, tmp_path: Path) -> None:
    scenario, text, want = POLICY_EDITS[name]
    cap, _ = SCENARIOS[scenario]()
    capture = tmp_path / "capture.jsonl"
    lines = cap.write(capture)
    policy = tmp_path / "candidate.yaml"
    policy.write_text(text, encoding="utf-8")
    bt = backtest(from_capture(capture, None, None), load_policy(policy), load_policy())
    d = bt.diff
    inc = d["incidents"]
    assert [(p["candidate"]["job"], p["baseline"]["category"], p["candidate"]["category"])
            for p in inc["recategorised"]] == want["recategorised"]
    assert [p["candidate"]["job"] for p in inc["reblamed"]] == want["reblamed"]
    assert (inc["added"], inc["removed"]) == (want["added"], want["removed"])
    assert d["commands"]["by_type"] == want["commands"]
    b, c = d["costs"]["baseline"], d["costs"]["candidate"]
    assert (b["gpus_fenced"], c["gpus_fenced"]) == want["gpus_fenced"]
    assert (b["approvals_asked"], c["approvals_asked"]) == want.get("approvals", (b["approvals_asked"],) * 2)
    assert (b["lemon_fences"], c["lemon_fences"]) == want.get("lemons", (0, 0))

    def per(key: str) -> dict[str, tuple[int, int]]:
        return {r["name"]: (r["baseline"]["incidents"], r["candidate"]["incidents"]) for r in d["costs"][key]}

    assert per("by_category") == want["by_category"]
    assert per("by_xid") == want["by_xid"]
    assert bt.differs

    # the same capture replayed independently under each policy gives the same decisions and the same diff
    base, cand = decide_offline(lines), decide_offline(lines, str(policy))
    assert cand == {"incidents": bt.candidate.incidents, "commands": bt.candidate.commands}
    assert base == {"incidents": bt.baseline.incidents, "commands": bt.baseline.commands}
    assert compare(in_window(base, None, None), in_window(cand, None, None), bt.judged.xids,
                   timeline=bt.judged.timeline) == d


def test_the_current_policy_against_itself_differs_in_nothing(tmp_path: Path) -> None:
    cap, _ = SCENARIOS["lemon_gpu_three_jobs_in_a_week"]()
    capture = tmp_path / "capture.jsonl"
    cap.write(capture)
    bt = backtest(from_capture(capture, None, None), load_policy(), load_policy())
    d: dict[str, Any] = bt.diff
    assert not bt.differs and d["incidents"]["unchanged"] == d["incidents"]["baseline"] == 3
    assert d["costs"]["baseline"] == d["costs"]["candidate"]
