"""The incident page's labels stay inside its drawing, wherever a mark falls and however wide the window.

The rule (faultline/timeline_html.py ``_label_rows``): a label starts at its mark if it fits, else ends
at it, else slides until it fits; longer than the drawing, it is cut with an ellipsis. Checked in
headless Chromium at window widths 800-2400 px, with the demo's long restart_job sentence on a mark in
the middle of the drawing (where it fitted neither side and ran off the left edge).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from faultline.timeline_html import render_timeline
from tests.faultline.test_operator_views import CHROMIUM, _rendered_layout

RESTART = ("restart demo/llama-70b from checkpoint s3://ckpt/demo/step_0000300 (newest complete, 12 min "
           "of work lost) on 32 GPUs, excluding gpu-node-07 GPUs 3, 5 (fenced first); it resumes at "
           "step 300 of 10000 and its owner is told")


def _story() -> tuple[dict[str, object], list[dict[str, object]]]:
    entries: list[dict[str, object]] = [
        {"ts": f"2026-04-22T03:10:{s:02d}.000Z", "entry_type": lane, "what": what, "text": text, "count": 1}
        for s, lane, what, text in [
            (0, "signal", "xid", "XID 79 on gpu-node-07 GPU 3: fallen off the bus"),
            (2, "incident", "opened", "gpu_off_bus opened, severity page"),
            (30, "command", "quarantine_gpu", "fence gpu-node-07 GPUs 3, 5"),
            (31, "command", "restart_job", RESTART),
            (32, "command", "notify", "tell the owner of demo/llama-70b " + "and the on-call rotation " * 12),
            (59, "signal", "step", "step 301 reached"),
        ]]
    return {"id": "inc-1", "category": "gpu_off_bus", "state": "open", "severity": "page"}, entries


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (deploy/local/setup.sh installs it)")
@pytest.mark.parametrize("width", [800, 1400, 2400])
def test_every_label_stays_inside_the_drawing(width: int, tmp_path: Path) -> None:
    incident, entries = _story()
    layout = _rendered_layout(render_timeline(incident, entries), tmp_path, width=width)
    box = layout["svg"]
    assert isinstance(box, list)
    left, top, right, bottom = (float(v) for v in box)
    marks = layout["marks"]
    assert isinstance(marks, list) and len(marks) == len(entries)
    for m in marks:
        x0, y0, x1, y1 = m["t"]
        assert left <= x0 and x1 <= right and top <= y0 and y1 <= bottom, f"label outside the drawing: {m}"
    for a, b in itertools.combinations(marks, 2):
        overlap = min(a["t"][2], b["t"][2]) - max(a["t"][0], b["t"][0]) > 1 and \
            min(a["t"][3], b["t"][3]) - max(a["t"][1], b["t"][1]) > 1
        assert not overlap, f"labels overlap: {a['label']!r} and {b['label']!r}"
    restart = next(m for m in marks if m["what"] == "restart_job")
    assert restart["label"].startswith("restart_job: restart demo/llama-70b")  # whole from its start
