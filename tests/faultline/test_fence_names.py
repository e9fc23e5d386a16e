"""``faultline quarantine`` of hardware the inventory does not list: refused, with what is there (issue 28 item 2)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from common.settings import Settings
from faultline import preflight
from faultline.cli import main
from faultline.commands.actions import _not_in_inventory
from faultline.errors import Failure, Unavailable, UsageError
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


@pytest.mark.parametrize("raised", [Unavailable("no archive here"), Failure("no namespace fences"),
                                    ImportError("No module named 'chdb'"), DatabaseError("UNKNOWN_TABLE")])
def test_an_archive_that_cannot_tell_leaves_the_check_to_the_correlator(
        raised: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    """No archive, no chDB, no inventory table yet: the command cannot tell, and says nothing (the correlator
    checks again). Only these: a bug while reading the inventory is not taken for 'cannot tell'."""
    monkeypatch.setattr(preflight, "open_archive", _raising(raised))
    assert _not_in_inventory(Settings(), "nosuchnode", "1") is None


@pytest.mark.parametrize("raised", [RuntimeError("a bug"), UsageError("FAULTLINE_ARCHIVE: not a URL")])
def test_any_other_error_reading_the_inventory_is_raised(raised: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "open_archive", _raising(raised))
    with pytest.raises(type(raised)):
        _not_in_inventory(Settings(), "nosuchnode", "1")


def _raising(exc: Exception) -> Callable[..., object]:
    def open_archive(*args: object, **kwargs: object) -> object:
        raise exc
    return open_archive
