"""Two cells at once on the 3-broker cluster: `faultline bench --cells 2 --quick` runs a storm in each
namespace at the same moment, two workers per namespace, and reports both cells' figures from one run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streams.bounds import MAX_RECORD_BYTES

pytestmark = pytest.mark.broker


def test_two_cells_each_get_their_restart_with_every_record_under_the_cap(kafka_cluster: Any,
                                                                          tmp_path: Path) -> None:
    env = {"FAULTLINE_KAFKA": kafka_cluster.bootstrap, "FAULTLINE_DATA_DIR": str(tmp_path),
           "FAULTLINE_NAMESPACE": f"cells-{tmp_path.name}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "faultline.cli", "bench", "--cells", "2", "--quick", "--json"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["brokers"] == 3 and summary["cells"] == 2 and summary["workers_per_cell"] == 2
    cells = summary["per_cell"]
    assert len(cells) == 2 and cells[0]["namespace"] != cells[1]["namespace"]
    for cell in cells:
        restart = cell["restart_job"]
        assert restart is not None, cell
        assert restart["gpus"] == cell["gpus"] and restart["excludes_failed_gpu"] and restart["restarts"] == 1
        assert cell["xids_without_command"] == [], cell
        assert 0 < max(cell["largest_record_bytes"].values()) <= MAX_RECORD_BYTES, cell["largest_record_bytes"]
        # the namespace's two workers are one consumer group sharing its two events partitions, and both lived
        assert cell["group_events_partitions"] == [[0], [1]] and cell["workers_alive"] == 2
        assert all(cell[f] is not None for f in ("first_signal_to_restart_event_s", "first_signal_to_restart_wall_s",
                                                   "storm_backlog_drained_after_s", "worker_rss_mib"))
