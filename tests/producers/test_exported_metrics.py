"""The agent's Prometheus metrics follow the events it publishes (the names the alert rules use)."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import REGISTRY, generate_latest

from producers.exported_metrics import ExportedMetrics
from streams import events as ev

T = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _e(body: ev.Body, node: str = "mx1", job: str | None = None) -> ev.Event:
    return ev.Event(id=f"id-{body.kind}-{id(body)}", ts=T, source="t", node=node, job=job, body=body)


def _gpu(node: str, index: int, uuid: str = "", pci: str = "", model: str = "") -> dict[str, str]:
    return {"node": node, "gpu": str(index), "UUID": uuid, "pci_bus_id": pci, "device": f"nvidia{index}",
            "modelName": model, "Hostname": node}


def test_gpu_and_job_metrics() -> None:
    m = ExportedMetrics()
    m.observe(_e(ev.Inventory(gpus=[ev.GpuInfo(index=3, pci="3a:00")])))
    m.observe(_e(ev.GpuSample(gpu=ev.GpuRef(index=3, pci="3a:00"), metrics=ev.GpuMetrics(
        temperature_c=91.0, ecc_sbe_volatile=4, ecc_dbe_volatile=1, clocks_event_reasons=["HW_THERMAL_SLOWDOWN"]))))
    m.observe(_e(ev.Xid(code=79, gpu=ev.GpuRef(pci="3a:00"))))
    m.observe(_e(ev.GpuSample(gpu=ev.GpuRef(index=3), metrics=ev.GpuMetrics(clocks_event_reasons=[]))))
    m.observe(_e(ev.TrainStep(step=1, loss=2.5), job="llm"))
    m.observe(_e(ev.CheckpointSaved(step=1), job="llm"))
    m.observe(_e(ev.JobStarted(checkpoint=ev.CheckpointPolicy(interval_s=600)), job="llm"))
    get = REGISTRY.get_sample_value
    g3 = _gpu("mx1", 3, pci="00000000:3A:00.0")  # dcgm-exporter's labels too (the inventory had no UUID or name)
    assert get("faultline_gpu_temperature_celsius", g3) == 91.0
    assert get("faultline_gpu_ecc_volatile_sbe_total", g3) == 4
    assert get("faultline_gpu_ecc_volatile_dbe_total", g3) == 1
    assert get("faultline_gpu_xid_total", {**g3, "code": "79"}) == 1  # kernel PCI → index
    assert get("faultline_gpu_clock_event_reasons", {**g3, "reason": "HW_THERMAL_SLOWDOWN"}) == 0
    assert get("faultline_job_loss", {"training_job": "llm"}) == 2.5
    assert get("faultline_job_checkpoint_interval_seconds", {"training_job": "llm"}) == 600
    age = get("faultline_job_checkpoint_age_seconds", {"training_job": "llm"})
    assert age is not None and age > 0


def test_gpu_series_carry_dcgm_exporter_labels_once_the_inventory_names_the_gpu() -> None:
    m = ExportedMetrics()
    m.observe(_e(ev.GpuSample(gpu=ev.GpuRef(index=0), metrics=ev.GpuMetrics(temperature_c=40.0)), node="dx1"))
    assert REGISTRY.get_sample_value("faultline_gpu_temperature_celsius", _gpu("dx1", 0)) == 40.0
    m.observe(_e(ev.Inventory(gpus=[ev.GpuInfo(index=0, uuid="GPU-abc", pci="c1:00", name="NVIDIA H100 80GB HBM3")]),
                 node="dx1"))
    named = _gpu("dx1", 0, uuid="GPU-abc", pci="00000000:C1:00.0", model="NVIDIA H100 80GB HBM3")
    assert REGISTRY.get_sample_value("faultline_gpu_temperature_celsius", named) == 40.0
    assert REGISTRY.get_sample_value("faultline_gpu_temperature_celsius", _gpu("dx1", 0)) is None  # none left behind


def test_nvml_counts_are_counters_not_gauges_named_total() -> None:
    m = ExportedMetrics()
    m.observe(_e(ev.GpuSample(gpu=ev.GpuRef(index=1), metrics=ev.GpuMetrics(ecc_sbe_volatile=7)), node="cx1"))
    text = generate_latest(REGISTRY).decode()
    for name in ("faultline_gpu_ecc_volatile_sbe_total", "faultline_gpu_ecc_volatile_dbe_total", "faultline_gpu_xid_total"):
        assert f"# TYPE {name} counter" in text, name
    assert not [line for line in text.splitlines() if line.startswith("# TYPE") and line.split()[2].endswith("_total")
                and line.split()[3] == "gauge"]
