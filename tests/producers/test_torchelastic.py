"""torchelastic worker failures: exit codes, signals, error files in every form."""

from __future__ import annotations

import json

import pytest

from producers.framework.torchelastic import (
    error_message,
    parse_worker_exit,
    parse_worker_failure,
    signal_name,
)
from streams.events import AppError, CudaError, CudaOom, NcclError, WorkerExit

CALLSTACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 211, in <module>\n'
    "    main()\n"
    "RuntimeError: CUDA error: unspecified launch failure\n"
)


def error_file(message: object, callstack: str | None = CALLSTACK) -> dict[str, object]:
    """An error file as torchelastic's @record writes it."""
    return {
        "message": {"message": message, "extraInfo": {"py_callstack": callstack, "timestamp": "1776828302"}}
    }


@pytest.mark.parametrize(
    ("exitcode", "name"),
    [
        (0, None),
        (1, None),
        (137, None),
        (-6, "SIGABRT"),
        (-9, "SIGKILL"),
        (-15, "SIGTERM"),
        (-11, "SIGSEGV"),
        (-7, "SIGBUS"),
        (-2, "SIGINT"),
    ],
)
def test_signal_name(exitcode: int, name: str | None) -> None:
    assert signal_name(exitcode) == name


def test_unknown_signal_number() -> None:
    assert signal_name(-200) == "signal 200"


def test_scenario_error_file() -> None:
    exit_, classified = parse_worker_failure(
        1, error_file("RuntimeError: CUDA error: unspecified launch failure")
    )
    assert exit_ == WorkerExit(
        exitcode=1, signal=None, error="RuntimeError: CUDA error: unspecified launch failure"
    )
    assert classified == CudaError(
        error="unspecified launch failure", message="RuntimeError: CUDA error: unspecified launch failure"
    )


def test_signal_without_error_file() -> None:
    missing_files: list[object] = [
        None,
        {},
        {"message": None},
        {"message": {}},
        {"message": {"message": ""}},
        [],
        42,
    ]
    for missing in missing_files:
        exit_, classified = parse_worker_failure(-6, missing)
        assert exit_ == WorkerExit(exitcode=-6, signal="SIGABRT", error=None)
        assert classified is None
    assert parse_worker_exit(-9) == WorkerExit(exitcode=-9, signal="SIGKILL", error=None)


def test_cuda_oom_message() -> None:
    message = (
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.11 GiB"
        " of which 1.06 GiB is free."
    )
    exit_, classified = parse_worker_failure(1, error_file(message, callstack=None))
    assert exit_.error == message
    assert isinstance(classified, CudaOom) and classified.gpu_index == 5


def test_nccl_error_message() -> None:
    message = "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error"
    _, classified = parse_worker_failure(1, error_file(message))
    assert isinstance(classified, NcclError)


def test_app_error_message() -> None:
    _, classified = parse_worker_failure(1, error_file("ValueError: bad config: lr < 0"))
    assert classified == AppError(exception="ValueError", message="bad config: lr < 0")


def test_plain_string_message() -> None:
    exit_, classified = parse_worker_failure(1, {"message": "RuntimeError: CUDA error: unknown error"})
    assert exit_.error == "RuntimeError: CUDA error: unknown error"
    assert isinstance(classified, CudaError) and classified.error == "unknown error"


def test_raw_json_text_is_accepted() -> None:
    raw = json.dumps(error_file("KeyError: 'x'"))
    exit_, classified = parse_worker_failure(1, raw)
    assert exit_.error == "KeyError: 'x'"
    assert classified == AppError(exception="KeyError", message="'x'")
    assert error_message(raw.encode()) == "KeyError: 'x'"


def test_non_json_text_is_the_message() -> None:
    assert error_message("worker crashed: segfault in libfoo.so") == "worker crashed: segfault in libfoo.so"
    assert parse_worker_failure(-11, "worker crashed")[1] is None


def test_callstack_used_when_message_is_missing() -> None:
    exit_, classified = parse_worker_failure(1, error_file(None))
    assert exit_.error == "RuntimeError: CUDA error: unspecified launch failure"
    assert isinstance(classified, CudaError)


def test_callstack_classifies_when_the_message_says_nothing() -> None:
    exit_, classified = parse_worker_failure(1, error_file("worker failed", callstack=CALLSTACK))
    assert exit_.error == "worker failed"
    assert isinstance(classified, CudaError)


def test_unclassifiable_message() -> None:
    exit_, classified = parse_worker_failure(1, error_file("something odd happened", callstack=None))
    assert exit_.error == "something odd happened"
    assert classified is None


def test_wrong_types_inside_the_file_are_tolerated() -> None:
    odd = {"message": {"message": 12, "extraInfo": {"py_callstack": ["not", "text"]}}}
    assert parse_worker_failure(1, odd) == (WorkerExit(exitcode=1, error=None), None)
    assert parse_worker_failure(1, {"message": {"message": "x", "extraInfo": "nope"}})[0].error == "x"
