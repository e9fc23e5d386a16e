"""The in-process judge-path measurement runs on a small fleet and accounts for every event it judged."""

from __future__ import annotations

from faultline.bench.judge_path import measure
from faultline.bench.runner import _fleet_events


def test_every_event_of_the_fleet_is_decoded_and_judged_and_each_rate_is_reported() -> None:
    out = measure(nodes=2, seconds=30, repeat=2)
    assert out["events"] == 2 * len(_fleet_events(2, 30))
    assert out["records"] < out["events"], "batch records, several events each"
    assert min(out["decode_events_per_s"], out["judge_events_per_s"], out["decode_and_judge_events_per_s"]) > 0
