"""Training-process evidence: PyTorch/NCCL/CUDA output lines and torchelastic worker failures."""

from __future__ import annotations

from producers.framework.torch_lines import FrameworkBody, classify_message, parse_framework_line
from producers.framework.torchelastic import (
    error_message,
    parse_worker_exit,
    parse_worker_failure,
    signal_name,
)

__all__ = [
    "FrameworkBody",
    "classify_message",
    "error_message",
    "parse_framework_line",
    "parse_worker_exit",
    "parse_worker_failure",
    "signal_name",
]
