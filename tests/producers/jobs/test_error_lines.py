"""Which training-log lines are evidence: tracebacks end in one line, their frames are not evidence."""

from __future__ import annotations

from producers.jobs.error_lines import ErrorLineSelector

CHAINED = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "train.py", line 10, in load
[rank1]:     return table[key]
[rank1]: KeyError: 'weights'
[rank1]:
[rank1]: During handling of the above exception, another exception occurred:
[rank1]:
[rank1]: Traceback (most recent call last):
[rank1]:   File "train.py", line 20, in <module>
[rank1]:     raise RuntimeError("CUDA error: an illegal memory access was encountered")
[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered"""


def feed_all(selector: ErrorLineSelector[int], text: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for n, line in enumerate(text.splitlines()):
        out.extend(selector.feed(line, n))
    return out


def test_only_the_last_exception_of_a_chained_traceback_counts() -> None:
    sel: ErrorLineSelector[int] = ErrorLineSelector()
    assert feed_all(sel, CHAINED) == []  # held: the chain might go on
    assert sel.tick() == []  # one read without more: still held
    assert sel.tick() == [("[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered", 10)]
    assert sel.tick() == []


def test_the_next_line_releases_a_held_exception_line() -> None:
    sel: ErrorLineSelector[int] = ErrorLineSelector()
    feed_all(sel, CHAINED)
    assert sel.feed("epoch 3 done", 99) == [
        ("[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered", 10)
    ]


def test_a_traceback_cut_by_a_new_one_keeps_only_the_new_exception() -> None:
    sel: ErrorLineSelector[str] = ErrorLineSelector()
    for line in ["Traceback (most recent call last):", '  File "a.py", line 1', "ValueError: bad"]:
        sel.feed(line, "a")
    for line in ["Traceback (most recent call last):", '  File "b.py", line 2', "OSError: disk"]:
        sel.feed(line, "b")
    assert sel.flush() == [("OSError: disk", "b")]


def test_exception_looking_lines_outside_a_traceback_are_not_evidence() -> None:
    sel: ErrorLineSelector[int] = ErrorLineSelector()
    assert sel.feed("ValueError: learning rate 3.0 clipped", 0) == []
    assert sel.feed("loss 2.31 step 100", 1) == []
    assert sel.flush() == []


def test_nccl_and_cuda_lines_are_kept_as_they_come() -> None:
    sel: ErrorLineSelector[int] = ErrorLineSelector()
    lines = [
        "[rank3]:[E422 03:14:17.123 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=4512, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600012 milliseconds before timing out.",
        "[rank3]:[E422 03:14:17.124 ProcessGroupNCCL.cpp:1664] [PG 0 Rank 3] Timeout at NCCL work: 4512, "
        "last enqueued NCCL work: 4512, last completed NCCL work: 4511.",
        "node07:1234:1250 [3] NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.11 GiB",
    ]
    kept = [line for n, text in enumerate(lines) for line, _ in sel.feed(text, n)]
    assert kept == lines


def test_frames_that_quote_an_error_are_not_evidence() -> None:
    sel: ErrorLineSelector[int] = ErrorLineSelector()
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        '    raise RuntimeError("CUDA error: misaligned address")\n'
        "RuntimeError: CUDA error: misaligned address\n"
        "CUDA kernel errors might be asynchronously reported at some other API call\n"
    )
    out = feed_all(sel, text) + sel.flush()
    assert out == [("RuntimeError: CUDA error: misaligned address", 3)]
