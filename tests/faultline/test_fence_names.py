"""``faultline quarantine`` of hardware the inventory does not list: refused, with what is there (issue 28 item 2)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from faultline.cli import main
from sinks.archive.store import Archive
from streams.events import Event, GpuInfo, Inventory


@pytest.fixture
def inventoried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTLINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("FAULTLINE_NAMESPACE", "fences")
    monkeypatch.setenv("FAULTLINE_KAFKA", "127.0.0.1:1")  # never reached: the check comes before the broker
    monkeypatch.delenv("FAULTLINE_ARCHIVE", raising=False)
    with Archive.open(f"chdb://{(tmp_path / 'archive').resolve()}", "fences") as archive:
        archive.write_events([Event(id="inv-1", ts=datetime.now(UTC), source="inventory", node="gpu-node-01",
                                    body=Inventory(gpus=[GpuInfo(index=i, uuid=f"GPU-{i}") for i in range(8)]))])


@pytest.mark.parametrize(("hardware", "says"), [
    ("gpu-node-01:99", "gpu-node-01 has no GPU 99 in the inventory (its GPUs: 0, 1, 2, 3, 4, 5, 6, 7)"),
    ("gpu-node-01:GPU-typo", "gpu-node-01 has no GPU GPU-typo in the inventory"),
    ("nosuchnode:1", "no node nosuchnode in the inventory (1 node known)"),
    ("nosuchnode", "no node nosuchnode in the inventory"),
])
def test_a_fence_of_hardware_the_inventory_does_not_list_is_refused(
        inventoried: None, hardware: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quarantine", hardware, "--reason", "bad index", "--by", "alice"]) == 1
    err = capsys.readouterr().err
    assert says in err and "nothing was fenced" in err, err
