"""Issue #26's clock jump through the real pipeline: `faultline replay` (broker, worker process, archive).

The public ``nccl_network_timeout`` capture cut at 03:12 is healthy (no incident, no command); one node's lines
between 03:04 and 03:05 stamped ten minutes ahead (NTP stepping back, a bad RTC, a VM resumed) gave, before the
cell clock, ``node_down`` and a cordon and reboot for four nodes and a restart. Through the live path the worker
judges on its own events topic, so this is the same rule (``correlators/clock.py``) where it runs for real; the
offline family is ``tests/correlators/test_clock.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.settings import Settings
from faultline.pipeline import replay
from tests.harness.shared import needs_shared, scenario
from tests.harness.skew import jump, restamp

pytestmark = pytest.mark.broker
NCCL = scenario("nccl_network_timeout")


@needs_shared(NCCL)
@pytest.mark.parametrize("by", [600.0, -600.0])
def test_one_node_ten_minutes_off_for_a_minute_opens_nothing_through_replay(
        kafka_bootstrap: str, tmp_path: Path, unique_name: str, by: float) -> None:
    lines = [x for x in NCCL.read_text().splitlines() if json.loads(x)["ts"] < "2026-04-22T03:12"]
    capture = tmp_path / "skewed.jsonl"
    capture.write_text("\n".join(restamp(lines, "n12", jump(240, 60, by))) + "\n")
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name,
                        archive=f"chdb://{tmp_path / 'archive'}")
    run = replay(capture, settings)
    assert run.bad == 0 and run.lines == len(lines)
    assert run.incidents == [] and run.commands == [], [(i.category, i.culprit) for i in run.incidents[:3]]
