"""The node's health as Prometheus metrics, from the same events the agent publishes.

These are the names ``deploy/prometheus/alerts.yml`` alerts on (listed in
:data:`common.metrics.AGENT_METRICS`): GPU temperature, XIDs, volatile ECC counts, clock event
reasons, and per training job the latest loss and checkpoint age and interval. A training job is
labelled ``training_job`` (Prometheus' own ``job`` label would overwrite ``job``).

**GPU series carry dcgm-exporter's labels** next to faultline's ``node`` and ``gpu`` (the index),
so that a query joins them with NVIDIA's ``DCGM_FI_*`` series without relabelling:
``UUID``, ``pci_bus_id`` (NVML's ``00000000:3A:00.0``; the events keep the bus and device only,
so domain 0 and function 0 are assumed, as on every GPU server we know), ``device``
(``nvidia3``), ``modelName`` (``NVIDIA H100 80GB HBM3``) and ``Hostname`` (the node). They come
from the node's inventory; a GPU seen before its inventory has them empty until it arrives, and
its series then carry the full set (the labels are filled at each scrape, so no stale
half-labelled series is left behind).

**Counters are counters**: NVML keeps the volatile ECC counts itself (they reset when the driver
reloads, which ``rate``/``increase`` handle), so they are exposed as counters with NVML's value
at each scrape (a custom collector: a prometheus_client ``Counter`` cannot be set), not as gauges
named ``_total``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.metrics import GPU_SERIES_LABELS
from streams import events as ev

__all__ = ["ExportedMetrics", "GPU_LABELS", "nvml_pci_bus_id"]

GPU_LABELS = GPU_SERIES_LABELS
"""Every GPU series' labels, in order: ``node``, ``gpu``, then dcgm-exporter's (common.metrics)."""

_LOSS = Gauge("faultline_job_loss", "The job's latest reported loss.", ["training_job"])
_CKPT_AGE = Gauge("faultline_job_checkpoint_age_seconds", "Seconds since the job's newest good checkpoint.",
                  ["training_job"])
_CKPT_INTERVAL = Gauge("faultline_job_checkpoint_interval_seconds", "The job's configured checkpoint interval.",
                       ["training_job"])


def nvml_pci_bus_id(short: str | None) -> str:
    """``3a:00`` (the events' bus:device) as NVML and dcgm-exporter write it: ``00000000:3A:00.0``."""
    return f"00000000:{short.upper()}.0" if short else ""


class _GpuSeries(Collector):
    """The GPU families, rebuilt at each scrape from the latest values and the GPUs' identities."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.identity: dict[tuple[str, str], tuple[str, str, str]] = {}  # (node, gpu) -> UUID, pci, model
        self.temperature: dict[tuple[str, str], float] = {}
        self.sbe: dict[tuple[str, str], float] = {}
        self.dbe: dict[tuple[str, str], float] = {}
        self.reasons: dict[tuple[str, str], dict[str, float]] = {}
        self.xids: dict[tuple[str, str, str], float] = {}

    def labels(self, node: str, gpu: str) -> list[str]:
        uuid, pci, model = self.identity.get((node, gpu), ("", "", ""))
        return [node, gpu, uuid, pci, f"nvidia{gpu}" if gpu.isdigit() else "", model, node]

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            temp = GaugeMetricFamily("faultline_gpu_temperature_celsius", "GPU temperature (NVML).",
                                     labels=GPU_LABELS)
            for key, value in self.temperature.items():
                temp.add_metric(self.labels(*key), value)
            sbe = CounterMetricFamily("faultline_gpu_ecc_volatile_sbe", "Volatile single-bit ECC errors (NVML's "
                                      "count; resets with the driver).", labels=GPU_LABELS)
            for key, value in self.sbe.items():
                sbe.add_metric(self.labels(*key), value)
            dbe = CounterMetricFamily("faultline_gpu_ecc_volatile_dbe", "Volatile double-bit ECC errors (NVML's "
                                      "count; resets with the driver).", labels=GPU_LABELS)
            for key, value in self.dbe.items():
                dbe.add_metric(self.labels(*key), value)
            reasons = GaugeMetricFamily("faultline_gpu_clock_event_reasons",
                                        "1 while NVML reports this clock event reason, else 0.",
                                        labels=(*GPU_LABELS, "reason"))
            for key, by_reason in self.reasons.items():
                for reason, on in by_reason.items():
                    reasons.add_metric([*self.labels(*key), reason], on)
            xid = CounterMetricFamily("faultline_gpu_xid", "XID lines seen, by code.", labels=(*GPU_LABELS, "code"))
            for (node, gpu, code), n in self.xids.items():
                xid.add_metric([*self.labels(node, gpu), code], n)
        yield from (temp, sbe, dbe, reasons, xid)


_GPUS = _GpuSeries()
REGISTRY.register(_GPUS)


def _age_since(at: float) -> Callable[[], float]:
    return lambda: time.time() - at


class ExportedMetrics:
    """Updates the series above from canonical events (one instance per agent)."""

    def __init__(self) -> None:
        self._index_of_pci: dict[tuple[str, str], int] = {}
        self._checkpoint_at: dict[str, float] = {}

    def observe(self, e: ev.Event) -> None:
        node, b = e.node or "", e.body
        if isinstance(b, ev.Inventory):
            with _GPUS.lock:
                for g in b.gpus:
                    if g.pci:
                        self._index_of_pci[(node, g.pci)] = g.index
                    _GPUS.identity[(node, str(g.index))] = (g.uuid or "", nvml_pci_bus_id(g.pci), g.name or "")
        elif isinstance(b, ev.GpuSample):
            self._sample(node, b)
        elif isinstance(b, ev.Xid):
            key = (node, self._gpu_label(node, b.gpu), str(b.code))
            with _GPUS.lock:
                _GPUS.xids[key] = _GPUS.xids.get(key, 0) + 1
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
        if b.gpu.index is not None and b.gpu.pci:
            self._index_of_pci[(node, b.gpu.pci)] = b.gpu.index
        key, m = (node, self._gpu_label(node, b.gpu)), b.metrics
        with _GPUS.lock:
            if m.temperature_c is not None:
                _GPUS.temperature[key] = m.temperature_c
            if m.ecc_sbe_volatile is not None:
                _GPUS.sbe[key] = m.ecc_sbe_volatile
            if m.ecc_dbe_volatile is not None:
                _GPUS.dbe[key] = m.ecc_dbe_volatile
            if m.clocks_event_reasons is not None:
                now, before = set(m.clocks_event_reasons), _GPUS.reasons.get(key, {})
                _GPUS.reasons[key] = {reason: 1.0 if reason in now else 0.0 for reason in now | set(before)}
