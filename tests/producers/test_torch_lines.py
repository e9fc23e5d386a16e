"""Training-process lines: NCCL watchdog, NCCL errors, CUDA OOM / errors, Python exceptions."""

from __future__ import annotations

import pytest

from producers.framework import classify_message, parse_framework_line
from streams.events import AppError, CudaError, CudaOom, NcclError, NcclProgress, NcclTimeout

# --- real lines copied from the scenarios --------------------------------------------

SCENARIO_WATCHDOG = (
    "[rank0]:[E0422 03:25:00.000000 4000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation"
    " timeout: WorkNCCL(SeqNum=5120, OpType=ALLREDUCE, NumelIn=268435456, NumelOut=268435456, Timeout(ms)=600000)"
    " ran for 600169 milliseconds before timing out."
)
SCENARIO_PROGRESS = (
    "[rank0]:[E0422 03:25:00.000000 4000 ProcessGroupNCCL.cpp:2317] [PG ID 0 PG GUID 0(default_pg) Rank 0] Timeout"
    " at NCCL work: 5120, last enqueued NCCL work: 5120, last completed NCCL work: 5119."
)
SCENARIO_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.11 GiB"
    " of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. Of the"
    " allocated memory 75.12 GiB is allocated by PyTorch, and 1.43 GiB is reserved by PyTorch but unallocated. If"
    " reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid"
    " fragmentation.  See documentation for Memory Management "
    " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def test_scenario_watchdog_line() -> None:
    assert parse_framework_line(SCENARIO_WATCHDOG) == NcclTimeout(
        seq=5120, op_type="ALLREDUCE", timeout_ms=600000, ran_ms=600169
    )


def test_scenario_progress_line() -> None:
    assert parse_framework_line(SCENARIO_PROGRESS) == NcclProgress(
        timeout_at=5120, last_enqueued=5120, last_completed=5119
    )


def test_scenario_oom_line() -> None:
    body = parse_framework_line(SCENARIO_OOM)
    assert isinstance(body, CudaOom)
    assert body.gpu_index == 5
    assert body.message == SCENARIO_OOM.strip()


# --- NCCL watchdog ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout:"
            " WorkNCCL(SeqNum=842, OpType=ALLGATHER, NumelIn=1, NumelOut=8, Timeout(ms)=1800000) ran for 1800464"
            " milliseconds before timing out.",
            NcclTimeout(seq=842, op_type="ALLGATHER", timeout_ms=1800000, ran_ms=1800464),
        ),
        (
            # torch 1.x: no SeqNum
            "[E ProcessGroupNCCL.cpp:587] [Rank 1] Watchdog caught collective operation timeout:"
            " WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1806493 milliseconds before timing out.",
            NcclTimeout(seq=None, op_type="BROADCAST", timeout_ms=1800000, ran_ms=1806493),
        ),
        (
            # the exception raised afterwards
            "RuntimeError: [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12,"
            " OpType=_ALLGATHER_BASE, NumelIn=4, NumelOut=32, Timeout(ms)=600000) ran for 600042 milliseconds"
            " before timing out.",
            NcclTimeout(seq=12, op_type="_ALLGATHER_BASE", timeout_ms=600000, ran_ms=600042),
        ),
        (
            "[rank3]:[E0422 03:25:00.000000 4000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 3]"
            " Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=REDUCE_SCATTER, NumelIn=8,"
            " NumelOut=1, Timeout(ms)=60000) ran for 60001 milliseconds before timing out.",
            NcclTimeout(seq=5, op_type="REDUCE_SCATTER", timeout_ms=60000, ran_ms=60001),
        ),
    ],
)
def test_watchdog_timeouts(line: str, expected: NcclTimeout) -> None:
    assert parse_framework_line(line) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[E0422 03:25:00.000000 4000 ProcessGroupNCCL.cpp:2317] [Rank 9] Timeout at NCCL work: 842, last"
            " enqueued NCCL work: 843, last completed NCCL work: 841.",
            NcclProgress(timeout_at=842, last_enqueued=843, last_completed=841),
        ),
        (
            "[Rank 9] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last completed NCCL work: -1.",
            NcclProgress(timeout_at=1, last_enqueued=1, last_completed=-1),
        ),
        (
            "[Rank 2] last enqueued NCCL work: 10, last completed NCCL work: 9.",
            NcclProgress(timeout_at=None, last_enqueued=10, last_completed=9),
        ),
    ],
)
def test_nccl_progress(line: str, expected: NcclProgress) -> None:
    assert parse_framework_line(line) == expected


# --- NCCL errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system"
        " error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275,"
        " internal error - please report this issue to the NCCL developers, NCCL version 2.21.5",
        "ncclInternalError: Internal check failed.",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "node12:4567:4890 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.14<45678> with error 12,"
        " opcode 0, len 0, vendor err 129 (Recv)",
        "[rank5]: node12:4567:4890 [5] NCCL WARN Connect to 10.0.0.14<43211> failed : Connection refused",
        "torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0]"
        " via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer",
        "RuntimeError: NCCL communicator was aborted on rank 3.",
        "NCCL Error 2: unhandled system error",
    ],
)
def test_nccl_errors(line: str) -> None:
    body = parse_framework_line(line)
    assert isinstance(body, NcclError)
    assert body.message == line.removeprefix("[rank5]: ")


# --- CUDA OOM -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "gpu"),
    [
        (SCENARIO_OOM, 5),
        (
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 3; 79.15 GiB total"
            " capacity; 77.01 GiB already allocated; 11.25 MiB free; 78.10 GiB reserved in total by PyTorch)",
            3,
        ),
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 1024.00 MiB (GPU 0; 15.78 GiB total capacity;"
            " 13.20 GiB already allocated; 1.02 GiB free; 13.50 GiB reserved in total by PyTorch)",
            0,
        ),
        ("[rank2]: OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB.", None),
        ("RuntimeError: CUDA error: out of memory", None),
        ("node1:11:22 [1] NCCL WARN Cuda failure 'out of memory'", None),
    ],
)
def test_cuda_oom(line: str, gpu: int | None) -> None:
    body = parse_framework_line(line)
    assert isinstance(body, CudaOom)
    assert body.gpu_index == gpu


# --- CUDA errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "an illegal memory access was encountered",
        ),
        ("RuntimeError: CUDA error: unspecified launch failure", "unspecified launch failure"),
        (
            "RuntimeError: CUDA error: uncorrectable ECC error encountered",
            "uncorrectable ECC error encountered",
        ),
        ("RuntimeError: CUDA error: unknown error", "unknown error"),
        ("[rank4]: RuntimeError: CUDA error: device-side assert triggered", "device-side assert triggered"),
        ("torch.AcceleratorError: CUDA error: misaligned address", "misaligned address"),
        ("RuntimeError: CUDA driver error: invalid device ordinal", "invalid device ordinal"),
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb,"
            " m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F,"
            " CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
            "CUBLAS_STATUS_EXECUTION_FAILED",
        ),
        # a CUDA failure reported through NCCL is a CUDA error
        (
            "node3:77:88 [2] NCCL WARN Cuda failure 'an illegal memory access was encountered'",
            "an illegal memory access was encountered",
        ),
        (
            "include/alloc.h:99 NCCL WARN Cuda failure 700 'an illegal memory access was encountered'",
            "an illegal memory access was encountered",
        ),
    ],
)
def test_cuda_errors(line: str, error: str) -> None:
    body = parse_framework_line(line)
    assert isinstance(body, CudaError)
    assert body.error == error


# --- application errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "exception", "message"),
    [
        ("ValueError: expected 3 dims, got 2", "ValueError", "expected 3 dims, got 2"),
        ("KeyError: 'input_ids'", "KeyError", "'input_ids'"),
        ("some.module.CustomError: the shard is corrupt", "some.module.CustomError", "the shard is corrupt"),
        ("[rank0]: AssertionError", "AssertionError", ""),
        ("AssertionError: ", "AssertionError", ""),
        ("[default3]:ZeroDivisionError: division by zero", "ZeroDivisionError", "division by zero"),
        (
            "OSError: [Errno 28] No space left on device: '/mnt/ckpt/x/model.safetensors'",
            "OSError",
            "[Errno 28] No space left on device: '/mnt/ckpt/x/model.safetensors'",
        ),
        (
            "RuntimeError: Expected all tensors to be on the same device",
            "RuntimeError",
            "Expected all tensors to be on the same device",
        ),
        ("KeyboardInterrupt", "KeyboardInterrupt", ""),
        (
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
            "",
        ),
        ("Exception: boom", "Exception", "boom"),
        (
            "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
            "json.decoder.JSONDecodeError",
            "Expecting value: line 1 column 1 (char 0)",
        ),
    ],
)
def test_app_errors(line: str, exception: str, message: str) -> None:
    assert parse_framework_line(line) == AppError(exception=exception, message=message)


# --- lines that report nothing wrong ------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "",
        "step 1200 | loss 2.3140 | lr 3.0e-4 | 431 samples/s",
        "[rank0]: Epoch 3: 100%|##########| 500/500 [01:02<00:00,  8.01it/s]",
        "node12:4567:4567 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.12<0>",
        "node12:4567:4567 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.12<0>",
        "[W ProcessGroupNCCL.cpp:1856] Warning: 0NCCL_AVOID_RECORD_STREAMS=1 has no effect",
        "/usr/lib/python3/site-packages/torch/nn/modules/module.py:1501: UserWarning: something deprecated",
        "UserWarning: TypedStorage is deprecated.",
        "Traceback (most recent call last):",
        '  File "train.py", line 211, in <module>',
        "    main()",
        "Saved checkpoint to /mnt/ckpt/step_600 (Error handling: none)",
        "INFO: Error rate is 0.0%",
        "Error: not a Python exception line",
        "valueError: lower-case is not a class",
        "ValueError is mentioned in the middle of a sentence",
    ],
)
def test_non_error_lines_give_none(line: str) -> None:
    assert parse_framework_line(line) is None


# --- whole messages (torchelastic error files, tracebacks) ------------------------------------------


def test_multiline_cuda_error_message() -> None:
    message = (
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below"
        " might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    )
    assert classify_message(message) == CudaError(
        error="an illegal memory access was encountered",
        message="RuntimeError: CUDA error: an illegal memory access was encountered",
    )


def test_nccl_error_wrapping_a_cuda_failure_is_the_cuda_error() -> None:
    message = (
        "DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda"
        " error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "Last error:\n"
        "Cuda failure 'uncorrectable ECC error encountered'"
    )
    body = classify_message(message)
    assert isinstance(body, CudaError)
    assert body.error == "uncorrectable ECC error encountered"


def test_traceback_takes_the_last_exception() -> None:
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 10, in load\n'
        "    return shards[name]\n"
        "KeyError: 'shard-7'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 211, in <module>\n'
        "    main()\n"
        "data.ShardMissingError: shard-7 is missing\n"
    )
    assert classify_message(traceback) == AppError(
        exception="data.ShardMissingError", message="shard-7 is missing"
    )


def test_message_takes_the_first_exception_line() -> None:
    message = "ValueError: bad batch\nKeyError: this line is part of the message text\n"
    assert classify_message(message) == AppError(exception="ValueError", message="bad batch")


def test_framework_line_and_message_classify_the_same() -> None:
    for line in (
        SCENARIO_WATCHDOG,
        SCENARIO_PROGRESS,
        SCENARIO_OOM,
        "ValueError: x",
        "RuntimeError: CUDA error: unknown error",
    ):
        assert parse_framework_line(line) == classify_message(line)


def test_crlf_line_ending() -> None:
    assert parse_framework_line("ValueError: x\r\n") == AppError(exception="ValueError", message="x")
