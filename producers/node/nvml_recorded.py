"""A :class:`~producers.node.nvml.NvmlBackend` that replays recorded NVML readings.

The recording is a JSON object::

    {"gpus": [{"index": 0, "uuid": "GPU-...", "pci_bus_id": "00000000:18:00.0", "name": "NVIDIA H100 80GB HBM3"}, ...],
     "samples": [{"readings": {"0": {<metric>: value, ...}, ..., "7": "lost"},
                  "xids": [[3, 48]]},
                 ...]}

A sample is one sampling round of every GPU: ``"lost"`` in place of a
reading means NVML said GPU_IS_LOST; ``xids`` are the XID events NVML
delivered during that round. The backend moves to the next sample when a GPU
is read a second time (a new round); after the last sample it stays there
(``loop=False``) or starts over (``loop=True``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from producers.node.nvml import GpuIdentity, GpuLostError

__all__ = ["RecordedBackend"]

LOST = "lost"


class RecordedBackend:
    """Replays a recording written in the format above."""

    def __init__(self, path: Path, loop: bool = False) -> None:
        data = json.loads(Path(path).read_text())
        self._gpus = [GpuIdentity(**gpu) for gpu in data["gpus"]]
        self._samples: list[dict[str, Any]] = data["samples"]
        if not self._samples:
            raise ValueError(f"{path}: no samples")
        self.loop = loop
        self._step = 0
        self._read_this_round: set[int] = set()
        self._xids_taken = False

    def gpus(self) -> list[GpuIdentity]:
        return list(self._gpus)

    def read(self, index: int) -> dict[str, Any]:
        if index in self._read_this_round:
            self._advance()
        self._read_this_round.add(index)
        reading = self._samples[self._step]["readings"][str(index)]
        if reading == LOST:
            raise GpuLostError(f"GPU {index}: GPU is lost (recorded)")
        return dict(reading)

    def xid_events(self, timeout_ms: int) -> list[tuple[int, int]]:
        if self._read_this_round:  # events are read before the round's GPUs
            self._advance()
        if self._xids_taken:
            return []
        self._xids_taken = True
        return [(int(index), int(code)) for index, code in self._samples[self._step].get("xids", [])]

    def _advance(self) -> None:
        last = len(self._samples) - 1
        if self._step < last or self.loop:
            self._step = 0 if self._step == last else self._step + 1
            self._xids_taken = False
        self._read_this_round.clear()

    def close(self) -> None:
        """Nothing to release."""
