"""The real storm through `faultline replay`: a whole-cell job's XID 79 and every rank's watchdog after it.

:class:`faultline.storm_capture.StormCapture` writes the capture (``STORM_NODES`` nodes x 8 GPUs, one
fixed-size job on all of them resuming mid-life, one GPU off the bus, then every other rank's two
ProcessGroupNCCL lines and torchelastic failure, ``job_failed``, the scheduler's relaunch); the real
pipeline replays it (real broker, a real worker process, the embedded archive). Every record the
pipeline published -- incidents, commands, dead letters, control -- must fit the one cap of
:data:`streams.bounds.MAX_RECORD_BYTES`, and the decision must be the right one: one ``gpu_off_bus``
incident blaming that GPU, its quarantine before the one restart, a ticket, the restart requesting
every GPU of the job, excluding the failed one, from the newest checkpoint.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from common.kafka_admin import delete_namespace_topics
from common.kafka_reader import read_topic
from common.settings import Settings
from faultline.pipeline import replay
from faultline.storm_capture import StormCapture
from streams.bounds import MAX_RECORD_BYTES
from streams.topics import topic_name

pytestmark = pytest.mark.broker

# 1,024 nodes (88,674 lines) replayed in 53-108 s on the shared 2-core machine (load ~15). The cell, 2,048
# nodes and 16,384 ranks, by hand: FAULTLINE_STORM_NODES=2048 pytest -q -s tests/faultline/test_storm_replay.py
# (2026-12-02, same machine, load ~3: 176,775 lines in 73.5 s, largest incident 8,369 B, command 550 B).
STORM_NODES = int(os.environ.get("FAULTLINE_STORM_NODES", "1024"))
PUBLISHED = ("incidents", "commands", "deadletters", "control")


def _gpu_ids(c: StormCapture, node: str, gpu: int) -> set[str]:
    return {c.uuid(node, gpu), str(gpu), f"00000000:{0x18 + 0x10 * gpu:02X}:00.0"}


def test_a_whole_cell_jobs_watchdog_storm_is_one_bounded_decision(kafka_bootstrap: str, tmp_path: Path,
                                                                   unique_name: str) -> None:
    cap = StormCapture(nodes=STORM_NODES, duration_s=1320.0)
    want = cap.expected()
    capture = tmp_path / "storm.jsonl"
    lines = cap.write(capture)
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name,
                        archive=f"chdb://{tmp_path / 'archive'}")
    t0 = time.monotonic()
    run = replay(capture, settings, keep_topics=True)
    took = time.monotonic() - t0
    conf = settings.kafka_config(kafka_bootstrap)
    try:
        sizes = {t: [len(v) for v in read_topic(conf, topic_name(run.namespace, t))] for t in PUBLISHED}
    finally:
        delete_namespace_topics(conf, run.namespace)
    largest = {t: max(s, default=0) for t, s in sizes.items()}
    print(f"storm of {STORM_NODES} nodes: {lines:,} lines replayed in {took:.1f}s; largest records {largest}")
    assert run.lines == lines and run.bad == 0

    over = {t: m for t, m in largest.items() if m > MAX_RECORD_BYTES}
    assert not over, f"records over the {MAX_RECORD_BYTES:,}-byte cap: {over}"

    incidents = {i.id: i for i in run.incidents}  # every version: the latest wins
    off_bus = [i for i in incidents.values() if i.category == "gpu_off_bus"]
    assert len(off_bus) == 1, sorted({(i.category, i.job) for i in incidents.values()})
    inc = off_bus[0]
    assert inc.job == want.job and inc.culprit.node == want.node
    assert set(inc.culprit.gpus) & _gpu_ids(cap, want.node, want.gpu)
    assert len(incidents) == 1, sorted({(i.category, i.job) for i in incidents.values()})

    cmds = [c for c in run.commands if c.incident == inc.id]
    kinds = [c.type for c in cmds]
    quarantine = [k for k, c in enumerate(cmds) if c.type == "quarantine_gpu" and c.target.node == want.node
                  and str(c.target.gpu) in _gpu_ids(cap, want.node, want.gpu)]
    restarts = [k for k, c in enumerate(cmds) if c.type == "restart_job"]
    assert quarantine, kinds
    assert "open_ticket" in kinds, kinds
    assert len(restarts) == 1, kinds
    assert quarantine[0] < restarts[0], kinds
    restart = cmds[restarts[0]]
    assert restart.target.job == want.job
    assert restart.params["gpus"] == want.gpus
    assert (restart.params["checkpoint"] or {}).get("step") == want.checkpoint_step
    excluded = restart.params["exclude"]
    assert want.node in excluded.get("nodes", []) or any(
        g.get("node") == want.node and str(g.get("gpu")) in _gpu_ids(cap, want.node, want.gpu)
        for g in excluded.get("gpus", []) if isinstance(g, dict)) or any(
        str(g) in _gpu_ids(cap, want.node, want.gpu) for g in excluded.get("gpus", [])), excluded
    # nothing else is left out: the rest of the job's hardware was heard from after the failure
    assert set(excluded.get("nodes", [])) <= {want.node}, excluded
    assert {str(g) for g in excluded.get("gpus", [])} <= _gpu_ids(cap, want.node, want.gpu), excluded
