"""torchelastic worker failures: an exit code plus the worker's error file.

torchelastic's ``@record`` writes ``TORCHELASTIC_ERROR_FILE`` as::

    {"message": {"message": "<ExcType>: <str(exc)>",
                 "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1776828201"}}}

Older or hand-written files put a plain string in ``message``; a worker killed
by a signal writes none (``null``). A negative exit code is death by signal
(``-6`` SIGABRT, ``-9`` SIGKILL, ``-15`` SIGTERM).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Mapping
from typing import Any

from producers.framework.torch_lines import FrameworkBody, classify_message
from streams.events import WorkerExit

__all__ = ["error_message", "parse_worker_exit", "parse_worker_failure", "signal_name"]


def signal_name(exitcode: int) -> str | None:
    """``-9`` -> ``'SIGKILL'``; ``None`` for a normal exit; ``'signal N'`` if unknown."""
    if exitcode >= 0:
        return None
    number = -exitcode
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _load(error_file: object) -> object:
    """Accept the file's parsed JSON or its raw text."""
    if isinstance(error_file, str | bytes):
        try:
            return json.loads(error_file)
        except (ValueError, RecursionError):
            return error_file.decode("utf-8", "replace") if isinstance(error_file, bytes) else error_file
    return error_file


def _text(value: object) -> str | None:
    """A non-empty string, made valid UTF-8 (JSON text may escape lone surrogates)."""
    if not isinstance(value, str):
        return None
    return value.strip().encode("utf-8", "replace").decode("utf-8") or None


def _message_and_callstack(error_file: object) -> tuple[str | None, str | None]:
    data = _load(error_file)
    if isinstance(data, str):
        return _text(data), None
    if not isinstance(data, Mapping):
        return None, None
    outer: Any = data.get("message")
    if isinstance(outer, str):
        return _text(outer), None
    if not isinstance(outer, Mapping):
        return None, None
    extra = outer.get("extraInfo")
    callstack = _text(extra.get("py_callstack")) if isinstance(extra, Mapping) else None
    return _text(outer.get("message")), callstack


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1].strip()


def _error(message: str | None, callstack: str | None) -> str | None:
    if message is None and callstack is not None:
        return _last_line(callstack)
    return message


def error_message(error_file: object) -> str | None:
    """The worker's error message from its error file, or ``None`` without one.

    Falls back to the last line of ``py_callstack`` when ``message`` is empty.
    """
    return _error(*_message_and_callstack(error_file))


def parse_worker_exit(exitcode: int, error_file: object = None) -> WorkerExit:
    """A :class:`WorkerExit` from the exit code and the error file (any form, or ``None``)."""
    return WorkerExit(exitcode=exitcode, signal=signal_name(exitcode), error=error_message(error_file))


def parse_worker_failure(exitcode: int, error_file: object = None) -> tuple[WorkerExit, FrameworkBody | None]:
    """The :class:`WorkerExit` plus what its error names, classified like a
    framework line (CudaOom, CudaError, NcclError, AppError...), or ``None``.

    The message is classified first; the traceback only when the message says nothing.
    """
    message, callstack = _message_and_callstack(error_file)
    classified = classify_message(message) if message else None
    if classified is None and callstack:
        classified = classify_message(callstack)
    exit_ = WorkerExit(exitcode=exitcode, signal=signal_name(exitcode), error=_error(message, callstack))
    return exit_, classified
