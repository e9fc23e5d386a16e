"""The quick bench runs end to end on the real broker and prints every field (so the bench never rots)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker

FIELDS = ("detect_to_command_ms", "correlator_events_per_s", "consumer_baseline_events_per_s",
          "correlator_to_baseline_ratio", "archive_rows_per_s", "archive_bare_insert_rows_per_s",
          "archive_sink_cpu_s", "replay_lines_per_s", "agent_cpu_pct", "goodput")


def test_quick_bench_prints_every_field_as_its_last_line(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = {"FAULTLINE_KAFKA": kafka_bootstrap, "FAULTLINE_DATA_DIR": str(tmp_path),
           "FAULTLINE_NAMESPACE": f"bench-{tmp_path.name}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "faultline.cli", "bench", "--quick", "--json"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(f in summary for f in FIELDS), sorted(summary)
    assert set(summary["detect_to_command_ms"]) == {"p50", "p99", "n"} and summary["detect_to_command_ms"]["n"] > 0
    assert summary["correlator_events_per_s"] > 0 and summary["archive_rows_per_s"] > 0
    assert summary["archive_sink_cpu_s"] > 0
    assert summary["goodput"]["faultline_lost_gpu_hours"] < summary["goodput"]["baseline_lost_gpu_hours"]
    assert "assumptions" in summary["goodput"]
    assert "bench: 6/6" in done.stderr  # progress is shown
    storm = summary["storm"]  # the real storm: XID 79 on the job, every rank's watchdog, the restart gate
    assert storm["restart_job"]["gpus"] == storm["gpus"] and storm["restart_job"]["excludes_failed_gpu"]
    assert storm["restart_job"]["restarts"] == 1
    assert all(storm[f] is not None for f in ("first_signal_to_restart_event_s", "first_signal_to_restart_wall_s",
                                                "storm_backlog_drained_after_s", "worker_rss_mib", "snapshot_bytes",
                                                "takeover_restore_and_catch_up_s"))
    assert 0 < max(storm["largest_record_bytes"].values())
