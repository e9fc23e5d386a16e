"""The seam between GPU telemetry and NVML: :class:`NvmlBackend`, and the real one over ``pynvml``.

A backend names the node's GPUs (:meth:`NvmlBackend.gpus`), reads one GPU's
metrics under the contract's names (:meth:`NvmlBackend.read`, ``None`` for
what the GPU or driver does not support) and hands over NVML's critical XID
events (:meth:`NvmlBackend.xid_events`). A GPU that is gone raises
:class:`GpuLostError` from ``read``. :class:`PynvmlBackend` is the real
backend (nvidia-ml-py); :mod:`producers.node.nvml_recorded` replays readings
for tests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pynvml

__all__ = ["METRICS", "GpuIdentity", "GpuLostError", "NvmlBackend", "PynvmlBackend"]

log = logging.getLogger("faultline.agent.nvml")

T = TypeVar("T")

#: The contract's NVML metric names, in the order a reading lists them.
METRICS: tuple[str, ...] = (
    "temperature_c",
    "power_w",
    "power_limit_w",
    "utilization_pct",
    "memory_used_mib",
    "memory_total_mib",
    "ecc_sbe_volatile",
    "ecc_dbe_volatile",
    "ecc_sbe_aggregate",
    "ecc_dbe_aggregate",
    "retired_pages_sbe",
    "retired_pages_dbe",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "clocks_event_reasons",
    "pcie_replay_counter",
)

_MIB = 1 << 20
_MAX_EVENTS_PER_CALL = 64

# NVML's clock event reason bits, under the names the correlator policy uses.
_REASONS: tuple[tuple[int, str], ...] = (
    (pynvml.nvmlClocksEventReasonGpuIdle, "GPU_IDLE"),
    (pynvml.nvmlClocksEventReasonApplicationsClocksSetting, "APPLICATIONS_CLOCKS_SETTING"),
    (pynvml.nvmlClocksEventReasonSwPowerCap, "SW_POWER_CAP"),
    (pynvml.nvmlClocksEventReasonHwSlowdown, "HW_SLOWDOWN"),
    (pynvml.nvmlClocksEventReasonSyncBoost, "SYNC_BOOST"),
    (pynvml.nvmlClocksEventReasonSwThermalSlowdown, "SW_THERMAL_SLOWDOWN"),
    (pynvml.nvmlClocksEventReasonHwThermalSlowdown, "HW_THERMAL_SLOWDOWN"),
    (pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown, "HW_POWER_BRAKE_SLOWDOWN"),
    (pynvml.nvmlClocksEventReasonDisplayClockSetting, "DISPLAY_CLOCK_SETTING"),
)

# A field the GPU or driver cannot report reads as None.
_UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_NoPermission, pynvml.NVMLError_FunctionNotFound)


@dataclass(frozen=True)
class GpuIdentity:
    """One GPU as NVML names it; ``pci_bus_id`` in NVML's form (``00000000:C1:00.0``)."""

    index: int
    uuid: str | None = None
    pci_bus_id: str | None = None
    name: str | None = None

    def ref(self) -> dict[str, Any]:
        """The capture's ``gpu`` object of an ``nvml`` line."""
        return {"index": self.index, "uuid": self.uuid, "pci_bus_id": self.pci_bus_id}


class GpuLostError(RuntimeError):
    """The GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST)."""


class NvmlBackend(Protocol):
    """Where GPU readings come from."""

    def gpus(self) -> list[GpuIdentity]:
        """The node's GPUs."""
        ...

    def read(self, index: int) -> dict[str, Any]:
        """Every name of :data:`METRICS` for GPU ``index`` (``None`` where unsupported);
        raises :class:`GpuLostError` for a lost GPU."""
        ...

    def xid_events(self, timeout_ms: int) -> list[tuple[int, int]]:
        """``(gpu index, XID code)`` of the critical XID events since the last call,
        waiting at most ``timeout_ms`` for the first; ``[]`` where the driver offers none."""
        ...

    def close(self) -> None:
        """Release NVML."""
        ...


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _field(read: Callable[[], T]) -> T | None:
    """One NVML query: unsupported -> ``None``; a lost GPU -> :class:`GpuLostError`."""
    try:
        return read()
    except pynvml.NVMLError_GpuIsLost as exc:
        raise GpuLostError(str(exc)) from exc
    except _UNSUPPORTED:
        return None


def _reason_names(mask: int) -> list[str]:
    return [name for bit, name in _REASONS if mask & bit]


class PynvmlBackend:
    """The real backend: NVML through nvidia-ml-py. ``__init__`` raises ``pynvml.NVMLError``
    where there is no usable driver."""

    def __init__(self) -> None:
        pynvml.nvmlInit()
        self._handles: dict[int, Any] = {}
        self._event_set: Any = None
        self._events_supported = True

    def gpus(self) -> list[GpuIdentity]:
        return [self._identity(index) for index in range(pynvml.nvmlDeviceGetCount())]

    def _identity(self, index: int) -> GpuIdentity:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        self._handles[index] = h
        return GpuIdentity(
            index=index,
            uuid=_field(lambda: _text(pynvml.nvmlDeviceGetUUID(h))),
            pci_bus_id=_field(lambda: _text(pynvml.nvmlDeviceGetPciInfo(h).busId)),
            name=_field(lambda: _text(pynvml.nvmlDeviceGetName(h))),
        )

    def read(self, index: int) -> dict[str, Any]:
        h = self._handles[index]
        memory = _field(lambda: pynvml.nvmlDeviceGetMemoryInfo(h))
        remapped = _field(lambda: pynvml.nvmlDeviceGetRemappedRows(h))
        return {
            "temperature_c": _field(lambda: float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))),
            "power_w": _field(lambda: round(pynvml.nvmlDeviceGetPowerUsage(h) / 1000, 1)),
            "power_limit_w": _field(lambda: round(pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000, 1)),
            "utilization_pct": _field(lambda: int(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)),
            "memory_used_mib": None if memory is None else int(memory.used // _MIB),
            "memory_total_mib": None if memory is None else int(memory.total // _MIB),
            "ecc_sbe_volatile": self._ecc(h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC),
            "ecc_dbe_volatile": self._ecc(h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
            "ecc_sbe_aggregate": self._ecc(h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC),
            "ecc_dbe_aggregate": self._ecc(h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC),
            "retired_pages_sbe": self._retired(h, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
            "retired_pages_dbe": self._retired(h, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
            "remapped_rows_pending": None if remapped is None else bool(remapped[2]),
            "remapped_rows_failure": None if remapped is None else bool(remapped[3]),
            "clocks_event_reasons": self._reasons(h),
            "pcie_replay_counter": _field(lambda: int(pynvml.nvmlDeviceGetPcieReplayCounter(h))),
        }

    @staticmethod
    def _ecc(h: Any, error_type: int, counter_type: int) -> int | None:
        return _field(lambda: int(pynvml.nvmlDeviceGetTotalEccErrors(h, error_type, counter_type)))

    @staticmethod
    def _retired(h: Any, cause: int) -> int | None:
        return _field(lambda: len(pynvml.nvmlDeviceGetRetiredPages(h, cause)))

    @staticmethod
    def _reasons(h: Any) -> list[str] | None:
        mask = _field(lambda: int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)))
        if mask is None:  # drivers before the 'event reasons' rename
            mask = _field(lambda: int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)))
        return None if mask is None else _reason_names(mask)

    def xid_events(self, timeout_ms: int) -> list[tuple[int, int]]:
        if self._event_set is None and self._events_supported and self._handles:
            self._register_events()
        if self._event_set is None:
            return []
        found: list[tuple[int, int]] = []
        for _ in range(_MAX_EVENTS_PER_CALL):
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, timeout_ms)
            except pynvml.NVMLError_Timeout:
                break
            timeout_ms = 0
            if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                found.append((int(pynvml.nvmlDeviceGetIndex(data.device)), int(data.eventData)))
        return found

    def _register_events(self) -> None:
        """Register every GPU for critical XID events; none supported -> no event set."""
        event_set = pynvml.nvmlEventSetCreate()
        registered = 0
        for index, handle in self._handles.items():
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
                registered += 1
            except _UNSUPPORTED:
                log.info("GPU %d offers no XID events; the kernel log still reports its XIDs", index)
        if registered:
            self._event_set = event_set
        else:
            pynvml.nvmlEventSetFree(event_set)
            self._events_supported = False

    def close(self) -> None:
        if self._event_set is not None:
            pynvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        pynvml.nvmlShutdown()
