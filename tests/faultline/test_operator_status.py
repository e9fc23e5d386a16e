"""The status view over a real chDB archive, without a broker: what is out of service, and until when."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.deadletters import dead_letter
from faultline.operator_views import print_status, status_data
from sinks.archive.store import Archive
from tests.sinks.records import sample_records


def test_a_gpu_under_validation_is_still_out_of_service(tmp_path: Path) -> None:
    """Quarantined, then sent to diagnostics: still fenced in the status until it is released."""
    commands = sample_records().commands
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive:
        archive.write_commands([c for c in commands if c.type in ("quarantine_gpu", "validate_gpu")])
        assert [(g["node"], g["gpu"], g["state"]) for g in status_data(archive)["quarantined_gpus"]] == [
            ("n1", "GPU-3", "validating")]
        archive.write_commands([c for c in commands if c.type == "release_gpu"])
        assert status_data(archive)["quarantined_gpus"] == []


def test_status_says_what_an_agents_spool_lost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A spool's losses reach the archive as a dead letter of stage ``spool`` (producers/spool/losses.py)."""
    lost = dead_letter("spool", "the spool lost 2,726 events (disk_full 2,726) between ...: node_agent/agent_heartbeat "
                                "2,726", "{}")
    with Archive.open(f"chdb://{tmp_path / 'archive'}") as archive:
        archive.write_deadletters([lost, dead_letter("agent", "bad line", "x")])
        data = status_data(archive)
    assert [row["reason"] for row in data["spool_losses"]] == [lost.reason]
    print_status(data)
    assert "Spool losses" in capsys.readouterr().out
