"""framework_log: training logs (file or pipe) to framework observations, verbatim."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from producers.capture import parse_capture_line
from producers.jobs.framework_log import FollowedLog, FrameworkLog, create
from producers.jobs.identity import JobIdentity
from producers.jobs.pipe import PipeReader
from producers.node.follow import FileFollower
from producers.registry import SourceContext
from streams.events import CudaError, CudaOom, NcclProgress, NcclTimeout

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
WATCHDOG = (
    "[rank1]:[E422 03:14:17.123 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=4512, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds "
    "before timing out."
)
PROGRESS = (
    "[rank1]:[E422 03:14:17.124 ProcessGroupNCCL.cpp:1664] [PG 0 Rank 1] Timeout at NCCL work: 4512, "
    "last enqueued NCCL work: 4512, last completed NCCL work: 4511."
)
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.11 GiB"
IDENTITY = JobIdentity(job="llama", node="n07", rank=9, local_rank=1)


def ticks() -> Iterator[datetime]:
    now = T0
    while True:
        yield now
        now += timedelta(seconds=1)


def append(path: Path, *lines: str) -> None:
    with path.open("a") as fh:
        fh.write("".join(line + "\n" for line in lines))


def test_file_lines_become_framework_observations(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    source = FrameworkLog([FollowedLog(FileFollower(log, tmp_path / "state.json"), IDENTITY)])
    clock = ticks()
    assert source.poll(next(clock)) == []  # no file yet: it is new from its first byte when it appears
    append(log, "step 1 loss 2.3", WATCHDOG, PROGRESS, "step 2 loss 2.2")
    obs = source.poll(now := next(clock))
    assert obs == [
        {"ts": "2026-04-22T03:00:01.000+00:00", "source": "framework", "job": "llama", "node": "n07",
         "rank": 9, "local_rank": 1, "line": line}
        for line in (WATCHDOG, PROGRESS)
    ]
    events = [e for o in obs for e in parse_capture_line(json.dumps(o))]
    assert isinstance(events[0].body, NcclTimeout) and events[0].body.seq == 4512
    assert isinstance(events[1].body, NcclProgress) and events[1].body.last_completed == 4511
    assert events[0].ts == now and events[0].rank == 9
    source.close()


def test_rotation_and_restart_lose_nothing(tmp_path: Path) -> None:
    log, state = tmp_path / "stderr.log", tmp_path / "state.json"
    log.write_text("history that is not news: " + OOM + "\n")
    source = FrameworkLog([FollowedLog(FileFollower(log, state), IDENTITY)])
    clock = ticks()
    assert source.poll(next(clock)) == []  # first start: from the end
    cuda = "RuntimeError: CUDA error: an illegal memory access was encountered"  # a CUDA error counts anywhere
    append(log, "ValueError: lr clipped", cuda)  # the ValueError is not in a traceback: a log message
    os.rename(log, tmp_path / "stderr.log.1")
    append(log, OOM)
    assert [o["line"] for o in source.poll(next(clock))] == [cuda, OOM]  # the old file's rest first
    source.close()

    append(log, WATCHDOG)  # written while the agent was down
    again = FrameworkLog([FollowedLog(FileFollower(log, state), IDENTITY)])
    assert [o["line"] for o in again.poll(next(clock))] == [WATCHDOG]
    again.close()


def test_a_traceback_split_across_reads_ends_in_one_observation(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    log.touch()
    source = FrameworkLog([FollowedLog(FileFollower(log, tmp_path / "s.json"), IDENTITY)])
    clock = ticks()
    source.poll(next(clock))
    append(log, "[rank1]: Traceback (most recent call last):", '[rank1]:   File "train.py", line 3, in <module>')
    assert source.poll(next(clock)) == []
    append(log, "[rank1]:     step()", "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered")
    assert source.poll(read_at := next(clock)) == []  # held for one more read: a chained traceback may follow
    obs = source.poll(next(clock))
    assert [o["line"] for o in obs] == ["[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered"]
    assert obs[0]["ts"] == read_at.isoformat(timespec="milliseconds")  # when it was read, not when released
    body = parse_capture_line(json.dumps(obs[0]))[0].body
    assert isinstance(body, CudaError) and body.error == "an illegal memory access was encountered"


def test_a_pipe_is_read_without_blocking_until_its_end() -> None:
    r, w = os.pipe()
    source = FrameworkLog([FollowedLog(PipeReader(r, close_fd=True), IDENTITY)])
    clock = ticks()
    assert source.poll(next(clock)) == []  # nothing written: returns at once
    os.write(w, (OOM + "\npartial ").encode())
    assert [o["line"] for o in source.poll(next(clock))] == [OOM]
    os.write(w, b"line\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad shape")
    os.close(w)
    obs = source.poll(next(clock))
    assert [o["line"] for o in obs] == ["ValueError: bad shape"]  # end of input releases the held line
    assert parse_capture_line(json.dumps(obs[0]))[0].body.kind == "app_error"
    source.close()


def test_create_reads_the_config_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = SourceContext(node="n07", state_dir=tmp_path / "state")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("RANK", "9")
    monkeypatch.setenv("LOCAL_RANK", "1")
    log = tmp_path / "train.log"
    source = create(ctx, {"path": str(log), "interval_s": 0.5})
    assert source.interval_s == 0.5 and source.name == "framework_log"
    assert source.poll(T0) == []  # the file does not exist yet: it will be read from its start
    append(log, OOM)
    obs = source.poll(T0)
    assert obs == [{"ts": "2026-04-22T03:00:00.000+00:00", "source": "framework", "job": "4242", "node": "n07",
                    "rank": 9, "local_rank": 1, "line": OOM}]
    assert isinstance(parse_capture_line(json.dumps(obs[0]))[0].body, CudaOom)
    source.close()

    several = create(ctx, {"job": "llama", "logs": [{"path": str(tmp_path / "0.log"), "rank": 0, "local_rank": 0},
                                                    {"path": str(tmp_path / "1.log"), "rank": 1, "local_rank": 1}]})
    several.poll(T0)
    append(tmp_path / "1.log", OOM)
    assert [(o["job"], o["rank"]) for o in several.poll(T0)] == [("llama", 1)]
    several.close()


def test_create_refuses_bad_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = SourceContext(node="n07", state_dir=tmp_path)
    with pytest.raises(ValidationError):
        create(ctx, {"job": "j"})  # neither path nor logs
    with pytest.raises(ValidationError):
        create(ctx, {"job": "j", "path": "x.log", "colour": "blue"})  # a typo
    for name in ("FAULTLINE_JOB", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="no job name"):
        create(ctx, {"path": "x.log"})
