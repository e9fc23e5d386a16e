"""The status view over a real chDB archive, without a broker: what is out of service, and until when."""

from __future__ import annotations

from pathlib import Path

from faultline.operator_views import status_data
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
