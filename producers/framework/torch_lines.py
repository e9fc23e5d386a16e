"""Classify what a training process writes: PyTorch, NCCL and CUDA messages (and, for a line, the
torchelastic launch configuration: :mod:`producers.framework.launch_config`).

One function, :func:`classify_message`, reads either a single output line or
a whole message (a torchelastic error file's ``message``, a Python traceback)
and returns the one body that best names what went wrong, checked in this
order (the first match wins, so the most specific evidence is kept)::

    NcclTimeout   Watchdog caught collective operation timeout: WorkNCCL(...) ran for N milliseconds
    NcclProgress  Timeout at NCCL work: X, last enqueued NCCL work: Y, last completed NCCL work: Z
    CudaOom       CUDA out of memory (torch.OutOfMemoryError, RuntimeError), CUDA error: out of memory
    CudaError     CUDA error: <error>; NCCL's Cuda failure '<error>'
    NcclError     NCCL error in: ..., ncclInternalError..., NCCL WARN ..., DistBackendError
    AppError      the exception line of a traceback: ValueError: ..., pkg.mod.CustomError: ...

A CUDA error reported through NCCL is a :class:`CudaError`: the CUDA error is
the cause, NCCL only passed it on. Lines that report nothing wrong give ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from producers.framework.launch_config import parse_launch_config
from streams.events import AppError, CudaError, CudaOom, LaunchConfig, NcclError, NcclProgress, NcclTimeout

__all__ = ["FrameworkBody", "classify_message", "parse_framework_line"]

FrameworkBody = NcclTimeout | NcclProgress | CudaOom | CudaError | NcclError | AppError

# Prefixes launchers put before a worker's output: torchrun's '[rank0]:' / '[default0]:',
# mpirun's '[1,0]<stderr>:', srun -l's '0: '.
_LAUNCHER_PREFIX = re.compile(r"(?:\[(?:rank|default)\d+\]:|\[\d+,\d+\]<std(?:out|err)>:|\d+: )\s?")

_WATCHDOG = "Watchdog caught collective operation timeout"
_SEQ = re.compile(r"SeqNum=(\d+)")
_OP_TYPE = re.compile(r"OpType=(\w+)")
_TIMEOUT_MS = re.compile(r"Timeout\(ms\)=(\d+)")
_RAN_MS = re.compile(r"ran for (\d+) milliseconds")

_PROGRESS = re.compile(
    r"(?:Timeout at NCCL work: (?P<at>-?\d+), )?"
    r"last enqueued NCCL work: (?P<enq>-?\d+), last completed NCCL work: (?P<done>-?\d+)"
)

_OOM = re.compile(r"CUDA out of memory|CUDA error: out of memory|Cuda failure (?:\d+ )?'out of memory'")
_OOM_GPU = re.compile(r"\bGPU (\d+)(?: has a total capacity|;)")

_CUDA_ERROR = re.compile(r"CUDA (?:driver )?error: (?P<err>[^\n]+)|Cuda failure (?:\d+ )?'(?P<nccl>[^'\n]+)'")
_CUDA_ERROR_TAIL = re.compile(r" when calling .*$")

_NCCL_ERROR = re.compile(
    r"\bNCCL [Ee]rror\b|\bnccl(?:InternalError|SystemError|RemoteError|UnhandledCudaError|InvalidUsage|InvalidArgument)\b"
    r"|\bNCCL WARN\b|DistBackendError|NCCL communicator was aborted"
)

_EXCEPTION = re.compile(
    r"(?P<exc>(?:[A-Za-z_]\w*\.)*"
    r"(?:[A-Z]\w*(?:Error|Exception)|Exception|BaseException|KeyboardInterrupt|SystemExit"
    r"|StopIteration|StopAsyncIteration|GeneratorExit))"
    r"(?::(?P<msg>.*))?"
)
_TRACEBACK = "Traceback (most recent call last):"


def _strip_launcher(line: str) -> str:
    m = _LAUNCHER_PREFIX.match(line)
    return line[m.end() :].strip() if m else line.strip()


def _line_at(text: str, pos: int) -> str:
    """The line of ``text`` holding position ``pos``, without launcher prefix."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return _strip_launcher(text[start : end if end >= 0 else len(text)])


def _int(m: re.Match[str] | None) -> int | None:
    return int(m.group(1)) if m else None


def _nccl_timeout(text: str) -> NcclTimeout | None:
    pos = text.find(_WATCHDOG)
    if pos < 0:
        return None
    line = _line_at(text, pos)
    op = _OP_TYPE.search(line)
    return NcclTimeout(
        seq=_int(_SEQ.search(line)),
        op_type=op.group(1) if op else None,
        timeout_ms=_int(_TIMEOUT_MS.search(line)),
        ran_ms=_int(_RAN_MS.search(line)),
    )


def _nccl_progress(text: str) -> NcclProgress | None:
    if "NCCL work" not in text:
        return None
    m = _PROGRESS.search(text)
    if m is None:
        return None
    at = m.group("at")
    return NcclProgress(
        timeout_at=int(at) if at is not None else None,
        last_enqueued=int(m.group("enq")),
        last_completed=int(m.group("done")),
    )


def _cuda_oom(text: str) -> CudaOom | None:
    m = _OOM.search(text)
    if m is None:
        return None
    line = _line_at(text, m.start())
    gpu = _OOM_GPU.search(line)
    return CudaOom(gpu_index=int(gpu.group(1)) if gpu else None, message=line)


def _cuda_error(text: str) -> CudaError | None:
    m = _CUDA_ERROR.search(text)
    if m is None:
        return None
    error = m.group("err") or m.group("nccl") or ""
    error = _CUDA_ERROR_TAIL.sub("", error).strip().rstrip(".")
    return CudaError(error=error, message=_line_at(text, m.start()))


def _nccl_error(text: str) -> NcclError | None:
    m = _NCCL_ERROR.search(text)
    return NcclError(message=_line_at(text, m.start())) if m else None


def _exception_line(text: str) -> re.Match[str] | None:
    """The exception line: the first one of a message, the last one of a traceback."""
    is_traceback = _TRACEBACK in text
    found: re.Match[str] | None = None
    for raw in text.splitlines():
        line = _strip_launcher(raw)
        if line.startswith(_TRACEBACK):
            found = None  # a (chained) traceback follows: its last exception line counts
            continue
        m = _EXCEPTION.fullmatch(line)
        if m is not None:
            if not is_traceback:
                return m
            found = m
    return found


def _app_error(text: str) -> AppError | None:
    m = _exception_line(text)
    if m is None:
        return None
    return AppError(exception=m.group("exc"), message=(m.group("msg") or "").strip())


_CLASSIFIERS: tuple[Callable[[str], FrameworkBody | None], ...] = (
    _nccl_timeout,
    _nccl_progress,
    _cuda_oom,
    _cuda_error,
    _nccl_error,
    _app_error,
)


def classify_message(text: str) -> FrameworkBody | None:
    """Classify a training process's message (one line or several), or ``None``.

    Used for framework output lines and for torchelastic error-file messages
    and tracebacks alike, so both sources name the same failure the same way.
    """
    for classify in _CLASSIFIERS:
        body = classify(text)
        if body is not None:
            return body
    return None


def parse_framework_line(line: str) -> FrameworkBody | LaunchConfig | None:
    """Parse one line written by a training process: what went wrong, else the launcher's configuration
    (:mod:`producers.framework.launch_config`); ``None`` for other lines."""
    text = line.rstrip("\r\n")
    return classify_message(text) or parse_launch_config(_strip_launcher(text))
