"""GPU telemetry: change detection and snapshot cadence on a recorded 8x H100 set, lost GPUs, XIDs."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from producers.capture import parse_capture_line
from producers.node.gpu_telemetry import GpuTelemetry, fallen_off_line, kernel_pci, xid_line
from producers.node.nvml import METRICS, GpuLostError, PynvmlBackend
from producers.node.nvml_recorded import RecordedBackend
from producers.registry import SourceContext
from producers.source import Observation
from streams.events import GpuLost, GpuSample, Inventory, Xid

FIXTURE = Path(__file__).resolve().parents[3] / "producers" / "node" / "recordings" / "nvml_8xh100.json"
T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
ROUNDS = 60
STEADY = (0, 1, 2, 4, 6)


def _run(telemetry: GpuTelemetry, rounds: int = ROUNDS) -> list[tuple[int, Observation]]:
    return [(i, obs) for i in range(rounds) for obs in telemetry.poll(T0 + timedelta(seconds=i))]


def _telemetry(**kwargs: Any) -> GpuTelemetry:
    return GpuTelemetry("n17", RecordedBackend(FIXTURE), rack="r12", **kwargs)


def _nvml_rounds(seen: list[tuple[int, Observation]], index: int) -> list[int]:
    return [i for i, obs in seen if obs["source"] == "nvml" and obs["gpu"]["index"] == index]


def _kernel(seen: list[tuple[int, Observation]]) -> list[tuple[int, str]]:
    return [(i, obs["line"]) for i, obs in seen if obs["source"] == "kernel"]


def test_publishes_on_change_not_every_sample() -> None:
    seen = _run(_telemetry())

    assert len(seen) < 40, "a change-driven source sends far fewer lines than 480 samples"
    first = [obs["source"] for i, obs in seen if i == 0]
    assert first == ["inventory"] + ["nvml"] * 8
    for index in STEADY:
        assert _nvml_rounds(seen, index) == [0], f"GPU {index} only drifts within tolerance"
    assert _nvml_rounds(seen, 3) == [0, 20], "the DBE step is news once"
    dbe = next(obs for i, obs in seen if i == 20 and obs["source"] == "nvml")
    assert dbe["metrics"]["ecc_dbe_volatile"] == 1 and dbe["metrics"]["remapped_rows_pending"] is True


def test_temperature_excursion_is_followed_and_its_end_reported() -> None:
    seen = _run(_telemetry())
    rounds = _nvml_rounds(seen, 5)
    hot = [obs["metrics"] for i, obs in seen if obs["source"] == "nvml" and obs["gpu"]["index"] == 5]

    assert rounds[0] == 0 and all(30 <= r <= 43 for r in rounds[1:])
    assert 4 <= len(rounds) - 1 < 13, "the climb is reported in steps, not every second"
    assert max(m["temperature_c"] for m in hot) >= 87
    assert any("HW_THERMAL_SLOWDOWN" in m["clocks_event_reasons"] for m in hot)
    assert hot[-1]["clocks_event_reasons"] == ["SW_POWER_CAP"], "the return to normal is news too"


def test_lost_gpu_becomes_one_fallen_off_the_bus_line_and_xids_become_nvrm_lines() -> None:
    seen = _run(_telemetry())

    assert _kernel(seen) == [
        (20, xid_line("00000000:5D:00.0", 48)),
        (21, xid_line("00000000:5D:00.0", 63)),
        (45, xid_line("00000000:DB:00.0", 79)),
        (45, fallen_off_line("00000000:DB:00.0")),
    ]
    assert _nvml_rounds(seen, 7) == [0], "no samples of a lost GPU"
    bodies = [parse_capture_line(json.dumps(obs))[0].body for _, obs in seen if obs["source"] == "kernel"]
    assert [(type(b), b.gpu.pci) for b in bodies] == [
        (Xid, "5d:00"), (Xid, "5d:00"), (Xid, "db:00"), (GpuLost, "db:00")
    ]
    assert [b.code for b in bodies if isinstance(b, Xid)] == [48, 63, 79]


def test_every_observation_is_a_valid_capture_line() -> None:
    seen = _run(_telemetry(power_domains={0: "psu-A", 7: "psu-B"}))
    events = [e for _, obs in seen for e in parse_capture_line(json.dumps(obs))]

    inventory = next(e.body for e in events if isinstance(e.body, Inventory))
    assert inventory.rack == "r12" and len(inventory.gpus) == 8
    assert inventory.gpus[0].power_domain == "psu-A" and inventory.gpus[7].pci == "db:00"
    samples = [e.body for e in events if isinstance(e.body, GpuSample)]
    assert samples[0].metrics.memory_total_mib == 81559 and samples[0].metrics.remapped_rows_pending == 0
    assert {e.node for e in events} == {"n17"}


def test_snapshot_cadence_resends_unchanged_gpus() -> None:
    seen = _run(_telemetry(snapshot_interval_s=10))
    for index in STEADY:
        assert _nvml_rounds(seen, index) == [0, 10, 20, 30, 40, 50]


def test_kernel_pci_form() -> None:
    assert kernel_pci("00000000:C1:00.0") == "0000:c1:00"
    assert fallen_off_line("00000000:C1:00.0") == "NVRM: GPU at PCI:0000:c1:00: GPU has fallen off the bus."


def test_recorded_backend_config_through_the_factory(tmp_path: Path) -> None:
    ctx = SourceContext(node="n17", state_dir=tmp_path, rack="r12")
    source = GpuTelemetry.create(ctx, {"backend": "recorded", "path": str(FIXTURE), "interval_s": 0.5})
    assert source is not None and source.interval_s == 0.5
    assert len(source.poll(T0)) == 9
    with pytest.raises(ValueError, match="needs 'path'"):
        GpuTelemetry.create(ctx, {"backend": "recorded"})


def test_without_a_driver_create_says_so_once_and_returns_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    with caplog.at_level(logging.WARNING):
        assert GpuTelemetry.create(SourceContext(node="n17", state_dir=tmp_path), {}) is None
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "no NVIDIA driver" in messages[0] and "other producers keep running" in messages[0]


# --- the pynvml backend against a stand-in NVML -------------------------------------------------


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, lost: int) -> None:
    """Two GPUs; retired pages and PCIe replays unsupported; GPU ``lost`` is gone."""

    def unsupported(*_args: Any) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def temperature(h: int, _sensor: int) -> int:
        if h == lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return 61 + h

    fakes: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h}",
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0".encode()),
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetTemperature": temperature,
        "nvmlDeviceGetPowerUsage": lambda h: 548_123,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700_000,
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=97, memory=40),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(used=70_211 << 20, total=81_559 << 20),
        "nvmlDeviceGetTotalEccErrors": lambda h, err, counter: 1 if err == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0,
        "nvmlDeviceGetRetiredPages": unsupported,
        "nvmlDeviceGetRemappedRows": lambda h: (0, 1, 1, 0),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0x4 | 0x40,
        "nvmlDeviceGetPcieReplayCounter": unsupported,
        "nvmlEventSetCreate": lambda: "set",
        "nvmlDeviceRegisterEvents": unsupported,
        "nvmlEventSetFree": lambda s: None,
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(pynvml, name, fake)


def test_pynvml_backend_maps_fields_unsupported_to_none_and_lost_to_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_nvml(monkeypatch, lost=1)
    backend = PynvmlBackend()
    gpus = backend.gpus()
    assert [(g.uuid, g.pci_bus_id, g.name) for g in gpus] == [
        ("GPU-0", "00000000:18:00.0", "NVIDIA H100 80GB HBM3"),
        ("GPU-1", "00000000:19:00.0", "NVIDIA H100 80GB HBM3"),
    ]
    reading = backend.read(0)
    assert list(reading) == list(METRICS)
    assert reading["temperature_c"] == 61.0 and reading["power_w"] == 548.1 and reading["power_limit_w"] == 700.0
    assert reading["memory_used_mib"] == 70_211 and reading["memory_total_mib"] == 81_559
    assert reading["ecc_dbe_volatile"] == 1 and reading["ecc_sbe_aggregate"] == 0
    assert reading["retired_pages_sbe"] is None and reading["pcie_replay_counter"] is None
    assert reading["remapped_rows_pending"] is True and reading["remapped_rows_failure"] is False
    assert reading["clocks_event_reasons"] == ["SW_POWER_CAP", "HW_THERMAL_SLOWDOWN"]
    with pytest.raises(GpuLostError):
        backend.read(1)
    assert backend.xid_events(0) == [], "no XID events where the driver offers none"
    backend.close()


@pytest.mark.gpu
def test_real_nvml() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVIDIA driver: {exc}")
    pynvml.nvmlShutdown()
    telemetry = GpuTelemetry("real", PynvmlBackend())
    try:
        first = telemetry.poll(datetime.now(UTC))
        events = [e for obs in first for e in parse_capture_line(json.dumps(obs))]
        samples = [e.body for e in events if isinstance(e.body, GpuSample)]
        assert isinstance(events[0].body, Inventory) and events[0].body.gpus
        assert samples and all(s.metrics.memory_total_mib for s in samples)
        assert all(s.gpu.uuid and s.gpu.pci for s in samples)
        assert telemetry.poll(datetime.now(UTC) + timedelta(seconds=1)) is not None
    finally:
        telemetry.close()
