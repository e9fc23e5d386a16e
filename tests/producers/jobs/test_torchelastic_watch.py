"""torchelastic: each new error file reported once, as-is; worker exits without one."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from producers.capture import parse_capture_line
from producers.jobs.identity import JobIdentity
from producers.jobs.torchelastic_watch import TorchelasticWatch, create, worker_exit
from producers.registry import SourceContext
from streams.events import CudaError, CudaOom, WorkerExit

NOW = datetime(2026, 4, 22, 3, 10, tzinfo=UTC)
STAMP = datetime(2026, 4, 22, 3, 4, 20, tzinfo=UTC)
IDENTITY = JobIdentity(job="sft-13b", node="n02")


def error_json(message: str, stamp: datetime = STAMP) -> dict[str, object]:
    """What torchelastic's @record writes."""
    return {"message": {"message": message, "extraInfo": {
        "py_callstack": f"Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n{message}\n",
        "timestamp": str(int(stamp.timestamp())),
    }}}


def write_error(root: Path, local_rank: int, content: object, attempt: int = 0) -> Path:
    path = root / "run_abc" / f"attempt_{attempt}" / str(local_rank) / "error.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_each_new_error_file_is_reported_once(tmp_path: Path) -> None:
    old = write_error(tmp_path, 0, error_json("ValueError: from a previous run"))
    watch = TorchelasticWatch(IDENTITY, tmp_path, rank_base=8)
    assert watch.poll(NOW) == []  # there before the watch started: history
    oom = error_json("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity")
    write_error(tmp_path, 5, oom)
    obs = watch.poll(NOW)
    assert obs == [{"ts": "2026-04-22T03:04:20.000+00:00", "source": "torchelastic", "job": "sft-13b", "node": "n02",
                    "rank": 13, "local_rank": 5, "exitcode": 1, "error_file": oom}]
    assert watch.poll(NOW) == []  # once
    exit_, cause = parse_capture_line(json.dumps(obs[0]))
    assert isinstance(exit_.body, WorkerExit) and exit_.body.exitcode == 1
    assert isinstance(cause.body, CudaOom) and cause.body.gpu_index == 5

    old.unlink()  # a new attempt reusing the same place is a new failure
    write_error(tmp_path, 0, error_json("RuntimeError: CUDA error: an illegal memory access was encountered"))
    [again] = watch.poll(NOW)
    assert again["rank"] == 8
    assert isinstance(parse_capture_line(json.dumps(again))[1].body, CudaError)


def test_a_restart_reports_what_appeared_meanwhile(tmp_path: Path) -> None:
    logs, state = tmp_path / "logs", tmp_path / "state.json"
    write_error(logs, 0, error_json("ValueError: old"))
    TorchelasticWatch(IDENTITY, logs, state_path=state).close()
    write_error(logs, 1, error_json("ValueError: while the agent was down"))
    watch = TorchelasticWatch(IDENTITY, logs, state_path=state, report_existing=True)  # state wins
    assert [o["local_rank"] for o in watch.poll(NOW)] == [1]
    assert TorchelasticWatch(IDENTITY, logs, state_path=state).poll(NOW) == []


def test_a_half_written_file_gets_time_then_goes_as_text(tmp_path: Path) -> None:
    watch = TorchelasticWatch(IDENTITY, tmp_path, settle_s=5)
    path = write_error(tmp_path, 2, '{"message": {"message": "RuntimeError: CUDA er')
    assert watch.poll(datetime.fromtimestamp(path.stat().st_mtime, UTC)) == []  # still being written
    later = datetime.fromtimestamp(path.stat().st_mtime, UTC) + timedelta(seconds=6)
    [obs] = watch.poll(later)
    assert obs["error_file"] == '{"message": {"message": "RuntimeError: CUDA er'
    assert obs["ts"] <= later.isoformat()
    parse_capture_line(json.dumps(obs))  # a string error_file is accepted


def test_a_missing_directory_is_waited_for(tmp_path: Path) -> None:
    watch = TorchelasticWatch(IDENTITY, tmp_path / "not-yet")
    assert watch.poll(NOW) == []
    write_error(tmp_path / "not-yet", 0, error_json("KeyError: 'x'"))
    assert len(watch.poll(NOW)) == 1


def test_the_error_time_is_never_in_the_future(tmp_path: Path) -> None:
    watch = TorchelasticWatch(IDENTITY, tmp_path)
    write_error(tmp_path, 0, error_json("ValueError: x", stamp=NOW + timedelta(hours=1)))
    assert watch.poll(NOW)[0]["ts"] == "2026-04-22T03:10:00.000+00:00"


@pytest.mark.parametrize(("kwargs", "exitcode", "signal"), [
    ({"signal": "SIGKILL"}, -9, "SIGKILL"),
    ({"signal": 6}, -6, "SIGABRT"),
    ({"exitcode": -15}, -15, "SIGTERM"),
    ({"exitcode": 137}, 137, None),
])
def test_worker_exit_without_an_error_file(kwargs: dict[str, object], exitcode: int, signal: str | None) -> None:
    obs = worker_exit("sft-13b", "n02", 3, NOW, **kwargs)  # type: ignore[arg-type]
    assert obs == {"ts": "2026-04-22T03:10:00.000+00:00", "source": "torchelastic", "job": "sft-13b", "node": "n02",
                   "rank": 3, "exitcode": exitcode, "error_file": None}
    [event] = parse_capture_line(json.dumps(obs))
    assert event.body == WorkerExit(exitcode=exitcode, signal=signal)
    with pytest.raises(ValueError):
        worker_exit("j", "n", 0, NOW)


def test_create_uses_the_agent_state_dir(tmp_path: Path) -> None:
    ctx = SourceContext(node="n02", state_dir=tmp_path / "state")
    watch = create(ctx, {"directory": str(tmp_path / "logs"), "job": "sft-13b", "rank_base": 4})
    write_error(tmp_path / "logs", 1, error_json("ValueError: x"))
    [obs] = watch.poll(NOW)
    assert (obs["node"], obs["rank"]) == ("n02", 5)
    assert (tmp_path / "state" / "torchelastic.json").exists()
    assert watch.name == "torchelastic" and watch.interval_s == 2.0
    watch.close()
    assert os.listdir(tmp_path / "state") == ["torchelastic.json"]
