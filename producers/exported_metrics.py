"""The node's health as Prometheus metrics, from the same events the agent publishes.

These are the names ``deploy/prometheus/alerts.yml`` alerts on (listed in
:data:`common.metrics.AGENT_METRICS`): GPU temperature, XIDs, volatile ECC counts,
clock event reasons, and per training job the latest loss and checkpoint age
and interval. A training job is labelled ``training_job`` (Prometheus' own
``job`` label would overwrite ``job``). NVML keeps the ECC counts itself, so
they are exported as the values NVML reports (gauges named ``*_total``) rather
than counted here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from prometheus_client import Counter, Gauge

from streams import events as ev

__all__ = ["ExportedMetrics"]

_TEMP = Gauge("faultline_gpu_temperature_celsius", "GPU temperature (NVML).", ["node", "gpu"])
_XID = Counter("faultline_gpu_xid", "XID lines seen, by code.", ["node", "gpu", "code"])
_SBE = Gauge("faultline_gpu_ecc_volatile_sbe_total", "Volatile single-bit ECC errors (NVML).", ["node", "gpu"])
_DBE = Gauge("faultline_gpu_ecc_volatile_dbe_total", "Volatile double-bit ECC errors (NVML).", ["node", "gpu"])
_REASONS = Gauge("faultline_gpu_clock_event_reasons", "1 while NVML reports this clock event reason.",
                 ["node", "gpu", "reason"])
_LOSS = Gauge("faultline_job_loss", "The job's latest reported loss.", ["training_job"])
_CKPT_AGE = Gauge("faultline_job_checkpoint_age_seconds", "Seconds since the job's newest good checkpoint.",
                  ["training_job"])
_CKPT_INTERVAL = Gauge("faultline_job_checkpoint_interval_seconds", "The job's configured checkpoint interval.",
                       ["training_job"])


def _age_since(at: float) -> Callable[[], float]:
    return lambda: time.time() - at


class ExportedMetrics:
    """Updates the gauges above from canonical events (one instance per agent)."""

    def __init__(self) -> None:
        self._index_of_pci: dict[tuple[str, str], int] = {}
        self._reasons: dict[tuple[str, str], set[str]] = {}
        self._checkpoint_at: dict[str, float] = {}

    def observe(self, e: ev.Event) -> None:
        node, b = e.node or "", e.body
        if isinstance(b, ev.Inventory):
            for g in b.gpus:
                if g.pci:
                    self._index_of_pci[(node, g.pci)] = g.index
        elif isinstance(b, ev.GpuSample):
            self._sample(node, b)
        elif isinstance(b, ev.Xid):
            _XID.labels(node, self._gpu_label(node, b.gpu), str(b.code)).inc()
        elif isinstance(b, ev.TrainStep) and e.job and b.loss is not None:
            _LOSS.labels(e.job).set(b.loss if math.isfinite(b.loss) else float("nan"))
        elif isinstance(b, ev.CheckpointSaved) and e.job:
            job, at = e.job, e.ts.timestamp()
            if at > self._checkpoint_at.get(job, 0):
                self._checkpoint_at[job] = at
                _CKPT_AGE.labels(job).set_function(_age_since(at))
        elif isinstance(b, ev.JobStarted) and e.job and b.checkpoint and b.checkpoint.interval_s:
            _CKPT_INTERVAL.labels(e.job).set(b.checkpoint.interval_s)

    def _gpu_label(self, node: str, ref: ev.GpuRef) -> str:
        if ref.index is not None:
            return str(ref.index)
        index = self._index_of_pci.get((node, ref.pci or ""))
        return str(index) if index is not None else (ref.pci or "?")

    def _sample(self, node: str, b: ev.GpuSample) -> None:
        gpu, m = self._gpu_label(node, b.gpu), b.metrics
        if b.gpu.index is not None and b.gpu.pci:
            self._index_of_pci[(node, b.gpu.pci)] = b.gpu.index
        if m.temperature_c is not None:
            _TEMP.labels(node, gpu).set(m.temperature_c)
        if m.ecc_sbe_volatile is not None:
            _SBE.labels(node, gpu).set(m.ecc_sbe_volatile)
        if m.ecc_dbe_volatile is not None:
            _DBE.labels(node, gpu).set(m.ecc_dbe_volatile)
        if m.clocks_event_reasons is not None:
            now, before = set(m.clocks_event_reasons), self._reasons.get((node, gpu), set())
            for reason in now | before:
                _REASONS.labels(node, gpu, reason).set(1 if reason in now else 0)
            self._reasons[(node, gpu)] = now
