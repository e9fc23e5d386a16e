"""Producer-side parsers: raw observations in, canonical :class:`streams.events.Event` out.

Everything here is a pure function over text and JSON values; nothing talks to
Kafka. The layout follows the capture sources (see the contract, section 1):

- :mod:`producers.kernel` -- kernel log lines: NVIDIA XIDs, GPUs fallen off
  the bus, PCIe AER, machine checks, the host OOM killer.
- :mod:`producers.framework` -- one line of a training process
  (PyTorch / NCCL / CUDA) and torchelastic worker failures.
- :mod:`producers.bmc` -- ``ipmitool sel elist`` lines.
- :mod:`producers.capture` -- one capture line (JSON) to zero or more events,
  or :class:`producers.capture.BadInput` with the reason.

(:mod:`producers.delivery` puts the events on the bus; it is the only part
that talks to Kafka.)
"""

from producers.capture import BadInput, parse_capture_line

__all__ = ["BadInput", "parse_capture_line"]
