"""Which causes of the Llama 3 record warn before they fail, and whether the real engine acts on the warning.

``checkpoint_now`` asks a running job to save before hardware that warns may fail
(:mod:`correlators.planner`); a save that lands before the failure leaves only the save to lose. The goodput
model (:mod:`faultline.bench.goodput`) lets a share of a cause's occurrences be so forewarned
(``Assumptions.predicted_share``). *How many* occurrences have a precursor is an assumption; *whether the
engine answers one with* ``checkpoint_now`` *in time* is not: :func:`verify` writes each precursor of
:data:`PRECURSORS` into a running job's capture, the failure after it, and runs the real engine over it
(:func:`faultline.bench.interruptions.measure`'s machinery). A cause whose precursor the engine does not
answer with a ``checkpoint_now`` at least :data:`LEAD_S` before the failure keeps a share of 0
(:func:`forewarned`).

The precursors are models of what the hardware says first, stated per cause:

* ``gpu_hbm3_memory``: single-bit ECC counts rising ever faster over six hours (six readings), rows pending
  remap, then the double-bit error (XID 48) and the crash;
* ``gpu_thermal_interface_sensor``: the GPU held at 96 C in thermal slowdown for 10 minutes while the job
  still steps, then its rank's crash;
* ``faulty_gpu``: the PCIe replay counter rising for an hour, then off the bus (XID 79);
* ``gpu_sram_memory``: a contained ECC error (XID 94), then the uncontained one (XID 95) an hour later.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from functools import cache

from faultline.bench.interruptions import (
    JOB,
    T0,
    Obs,
    gpu_lost,
    gpu_uuid,
    judge,
    observed_at,
    running_job,
    telemetry,
    xid_line,
)
from streams.decisions import Command

__all__ = ["LEAD_S", "PRECURSORS", "forewarned", "verify"]

LEAD_S = 60.0
"""The engine's ``checkpoint_now`` must come this long before the failure to count as in time: the job's
next step (10 s here) plus a save of ``Assumptions.checkpoint_save_s`` (30 s) with room to spare."""

FAIL_AT = T0 + timedelta(hours=7)  # six hours of precursor after the job's first hour


def _nvml(t: datetime, n: int, gpu: int, **metrics: object) -> tuple[datetime, Obs]:
    return observed_at(t, {"source": "nvml", "node": f"node-{n:02d}", "gpu": {"index": gpu, "uuid": gpu_uuid(n, gpu)},
                   "metrics": metrics})


def _hbm(fail: datetime) -> Iterator[tuple[datetime, Obs]]:
    sbe = 0
    for ago_h in (6, 4, 2.5, 1.5, 0.75, 0.25):  # ever shorter gaps: the rising trend the engine looks for
        sbe += 3
        yield _nvml(fail - timedelta(hours=ago_h), 2, 3, ecc_sbe_aggregate=sbe, ecc_sbe_volatile=sbe,
                    remapped_rows_pending=1)
    yield _nvml(fail, 2, 3, ecc_dbe_volatile=1, ecc_dbe_aggregate=1, remapped_rows_pending=1)
    yield from gpu_lost(fail, 2, 3, 48, "An uncorrectable double bit error (DBE) has been detected on GPU in the "
                         "framebuffer at partition 6, subpartition 0.")


def _thermal(fail: datetime) -> Iterator[tuple[datetime, Obs]]:
    for s in range(600, 0, -10):
        yield _nvml(fail - timedelta(seconds=s), 1, 2, temperature_c=96.0, clocks_event_reasons=["HW_THERMAL_SLOWDOWN"])
    yield from gpu_lost(fail, 1, 2, 43, "GPU stopped processing")


def _pcie(fail: datetime) -> Iterator[tuple[datetime, Obs]]:
    for k, s in enumerate(range(3600, 0, -300)):
        yield _nvml(fail - timedelta(seconds=s), 1, 5, pcie_replay_counter=100 * (k + 1) ** 2)
    yield from gpu_lost(fail, 1, 5, 79, "GPU has fallen off the bus.")


def _sram(fail: datetime) -> Iterator[tuple[datetime, Obs]]:
    yield xid_line(fail - timedelta(hours=1), 0, 6, 94, "Contained: SM (0x1). RST: No, D-RST: No")
    yield from gpu_lost(fail, 0, 6, 95, "Uncontained: FBHUB. RST: Yes, D-RST: No")


#: cause -> its precursor and failure, ending at the failure's moment
PRECURSORS: dict[str, Callable[[datetime], Iterator[tuple[datetime, Obs]]]] = {
    "gpu_hbm3_memory": _hbm,
    "gpu_thermal_interface_sensor": _thermal,
    "faulty_gpu": _pcie,
    "gpu_sram_memory": _sram,
}


def _lines(cause: str) -> list[bytes]:
    end = FAIL_AT + timedelta(minutes=20)
    obs = [*telemetry(T0, end, {}, True), *running_job(T0 + timedelta(seconds=5), FAIL_AT, True),
           *PRECURSORS[cause](FAIL_AT)]
    obs.sort(key=lambda x: x[0])
    return [json.dumps(o).encode() for _, o in obs]


@cache
def verify() -> dict[str, float | None]:
    """Per cause of :data:`PRECURSORS`: how long before the failure the engine asked the job to save
    (``checkpoint_now`` for it), in seconds; None where it did not ask before the failure."""
    out: dict[str, float | None] = {}
    for cause in PRECURSORS:
        asks = [d for d in judge(_lines(cause)) if isinstance(d, Command) and d.type == "checkpoint_now"
                and d.target.job == JOB and d.issued_at < FAIL_AT]
        out[cause] = round((FAIL_AT - asks[0].issued_at).total_seconds(), 1) if asks else None
    return out


def forewarned() -> tuple[str, ...]:
    """The causes whose precursor the engine answers with ``checkpoint_now`` at least :data:`LEAD_S` before the
    failure: the only ones a predicted share may be given."""
    return tuple(c for c, lead in verify().items() if lead is not None and lead >= LEAD_S)
