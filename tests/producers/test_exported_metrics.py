"""The agent's Prometheus metrics follow the events it publishes (the names the alert rules use)."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import REGISTRY

from producers.exported_metrics import ExportedMetrics
from streams import events as ev

T = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _e(body: ev.Body, node: str = "mx1", job: str | None = None) -> ev.Event:
    return ev.Event(id=f"id-{body.kind}-{id(body)}", ts=T, source="t", node=node, job=job, body=body)


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
    assert get("faultline_gpu_temperature_celsius", {"node": "mx1", "gpu": "3"}) == 91.0
    assert get("faultline_gpu_ecc_volatile_sbe_total", {"node": "mx1", "gpu": "3"}) == 4
    assert get("faultline_gpu_ecc_volatile_dbe_total", {"node": "mx1", "gpu": "3"}) == 1
    assert get("faultline_gpu_xid_total", {"node": "mx1", "gpu": "3", "code": "79"}) == 1  # kernel PCI → index
    assert get("faultline_gpu_clock_event_reasons", {"node": "mx1", "gpu": "3", "reason": "HW_THERMAL_SLOWDOWN"}) == 0
    assert get("faultline_job_loss", {"training_job": "llm"}) == 2.5
    assert get("faultline_job_checkpoint_interval_seconds", {"training_job": "llm"}) == 600
    age = get("faultline_job_checkpoint_age_seconds", {"training_job": "llm"})
    assert age is not None and age > 0
