"""The trainer reporter: contract lines, NaN kept, never blocking or raising into the loop."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import pytest

from producers.capture import parse_capture_line
from producers.jobs.reporter import Reporter
from streams.events import CheckpointFailed, CheckpointLoaded, CheckpointSaved, TrainerHeartbeat, TrainStep


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_every_event_is_a_contract_line(tmp_path: Path) -> None:
    path = tmp_path / "trainer.jsonl"
    with Reporter("llama", 3, node="n07", path=path) as rep:
        rep.step(10, 2.5, 431.5)
        rep.step(11, float("nan"), 430.0)
        rep.step(12, float("inf"))
        rep.checkpoint_saved(500, "/ckpt/step-500.pt", 123_456, 12.5)
        rep.checkpoint_failed(1000, "/ckpt/step-1000.pt", OSError(28, "No space left on device"))
        rep.checkpoint_loaded(500, Path("/ckpt/step-500.pt"))
        rep.heartbeat()
    lines = read_lines(path)
    assert '"loss": NaN' in lines[1] and '"loss": Infinity' in lines[2]  # as Python's json writes them
    first = json.loads(lines[0])
    assert list(first)[:6] == ["ts", "source", "job", "rank", "node", "event"]
    assert first | {"ts": None} == {"ts": None, "source": "trainer", "job": "llama", "rank": 3, "node": "n07",
                                    "event": "step", "step": 10, "loss": 2.5, "samples_per_s": 431.5}
    bodies = [parse_capture_line(line)[0].body for line in lines]
    assert isinstance(bodies[0], TrainStep) and bodies[0].loss == 2.5
    assert isinstance(bodies[1], TrainStep) and bodies[1].loss is not None and math.isnan(bodies[1].loss)
    assert isinstance(bodies[2], TrainStep) and bodies[2].loss == math.inf and bodies[2].samples_per_s is None
    assert bodies[3] == CheckpointSaved(step=500, path="/ckpt/step-500.pt", bytes=123_456, seconds=12.5)
    assert bodies[4] == CheckpointFailed(step=1000, path="/ckpt/step-1000.pt",
                                         error="OSError: [Errno 28] No space left on device")
    assert bodies[5] == CheckpointLoaded(step=500, path="/ckpt/step-500.pt")
    assert bodies[6] == TrainerHeartbeat()


def test_the_path_and_node_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTLINE_TRAINER_LOG", str(tmp_path / "sub" / "t.jsonl"))
    monkeypatch.setenv("FAULTLINE_NODE", "n11")
    rep = Reporter("j", 0)
    rep.heartbeat()
    rep.close()
    assert json.loads(read_lines(tmp_path / "sub" / "t.jsonl")[0])["node"] == "n11"


def test_ranks_sharing_a_file_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    reporters = [Reporter("j", rank, node="n", path=path) for rank in range(4)]
    for step in range(500):
        for rep in reporters:
            rep.step(step, 1.0 / (step + 1), 100.0)
    for rep in reporters:
        rep.close()
    lines = read_lines(path)
    assert len(lines) == 2000
    assert all(json.loads(line)["source"] == "trainer" for line in lines)


def test_a_stuck_writer_never_blocks_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    entered = threading.Event()
    held: list[int] = []  # the lines the stuck writer holds in its one batch
    real_write = Reporter._write

    def stuck(self: Reporter, data: bytes) -> None:
        held.append(data.count(b"\n"))
        entered.set()
        release.wait(60)
        real_write(self, data)

    monkeypatch.setattr(Reporter, "_write", stuck)
    rep = Reporter("j", 0, node="n", path=tmp_path / "t.jsonl", max_queue=10)
    rep.step(0, 0.5)
    assert entered.wait(30), "the writer never picked up the first line"

    def loop() -> None:
        for step in range(1, 1000):
            rep.step(step, 0.5)

    # The training loop runs to its end while the writer is still stuck: nothing it calls waits.
    training = threading.Thread(target=loop)
    training.start()
    training.join(30)
    assert not training.is_alive(), "the training loop waited on a stuck writer"
    assert not release.is_set()
    # Every line is either held by the stuck write, queued (10 at most), or dropped and counted.
    assert len(held) == 1
    assert rep.dropped == 1000 - held[0] - rep._queue.qsize()
    assert rep._queue.qsize() == 10
    assert not rep.flush(timeout=0.05)
    release.set()
    rep.close()
    assert len(read_lines(tmp_path / "t.jsonl")) == 1000 - rep.dropped


def test_nothing_raises_into_the_loop(tmp_path: Path) -> None:
    rep = Reporter("j", 0, node="n", path=tmp_path)  # a directory: every write fails
    rep.step(1, 0.5)
    rep.step("not a number", "x")  # type: ignore[arg-type]
    rep.checkpoint_saved(2, "p", bytes="many")  # type: ignore[arg-type]
    assert rep.flush(timeout=5)
    assert rep.errors == 3  # the failed write, and two calls that could not be turned into lines
    rep.close()
    rep.close()
    rep.step(3, 0.1)  # after close: ignored


def test_a_rotated_file_is_reopened(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rep = Reporter("j", 0, node="n", path=path)
    rep.step(1, 1.0)
    assert rep.flush()
    os.rename(path, tmp_path / "t.jsonl.1")
    rep.step(2, 1.0)
    rep.close()
    assert [json.loads(x)["step"] for x in read_lines(path)] == [2]
    assert [json.loads(x)["step"] for x in read_lines(tmp_path / "t.jsonl.1")] == [1]
