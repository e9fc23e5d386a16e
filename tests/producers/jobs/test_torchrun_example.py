"""The example training job under a real torchrun (2 CPU workers, gloo), crashed on purpose.

The job-side sources watch it live -- the reporter's file (``trainer_file``),
each worker's stderr (``framework_log``) and the torchelastic error files
(``torchelastic``) -- and what they saw, after a ``job_started`` line such
as the scheduler would send, must make the correlator open the right
incident for the job.

Needs torch, which is not a default dependency (it is large): it is skipped
where ``import torch`` fails. To run it::

    .venv/bin/pip install -e '.[torch]'        # the PyPI wheel; CPU is enough
    .venv/bin/pytest tests/producers/jobs/test_torchrun_example.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from faultline.outcome import decide_offline
from producers.jobs.framework_log import FollowedLog, FrameworkLog
from producers.jobs.identity import JobIdentity
from producers.jobs.torchelastic_watch import TorchelasticWatch
from producers.jobs.trainer_file import TrainerFile
from producers.node.follow import FileFollower
from producers.source import Observation, observation

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (an optional dependency): pip install -e '.[torch]' to run the torchrun example",
)

ROOT = Path(__file__).resolve().parents[3]
TRAIN = ROOT / "producers" / "jobs" / "examples" / "train.py"
JOB, NODE = "torchrun-example", "node-a"
RUN_DEADLINE_S = 240


def torchrun(out: Path, crash: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "FAULTLINE_TRAINER_LOG": str(out / "trainer.jsonl"), "FAULTLINE_JOB": JOB,
           "FAULTLINE_NODE": NODE, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", "2",
            "--max-restarts", "0", "--monitor-interval", "0.2", "--log-dir", str(out / "logs"), "--redirects", "3",
            str(TRAIN), "--steps", "12", "--checkpoint-every", "3", "--checkpoint-dir", str(out / "ckpt"),
            "--crash-rank", "1", "--crash-step", "7", "--crash", crash]
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def watch_run(out: Path, proc: subprocess.Popen[bytes]) -> list[Observation]:
    """Poll the job-side sources while the job runs (and a little after), as the agent would."""
    trainer = TrainerFile(FileFollower(out / "trainer.jsonl", out / "trainer.state"))
    errors = TorchelasticWatch(JobIdentity(JOB, NODE), out / "logs")
    framework: FrameworkLog | None = None
    seen: list[Observation] = []
    deadline = time.monotonic() + RUN_DEADLINE_S
    after_exit = 3  # polls after the job ended: a held traceback line is released on the second
    while after_exit > 0 and time.monotonic() < deadline:
        if proc.poll() is not None:
            after_exit -= 1
        now = datetime.now(UTC)
        attempts = sorted((out / "logs").glob("*/attempt_0"))
        if framework is None and attempts:  # torchrun made the workers' log folder: follow their stderr
            framework = FrameworkLog([
                FollowedLog(FileFollower(attempts[0] / str(r) / "stderr.log", out / f"fw{r}.state"),
                            JobIdentity(JOB, NODE, rank=r, local_rank=r))
                for r in (0, 1)
            ])
        for source in (trainer, errors, framework):
            if source is not None:
                seen.extend(source.poll(now))
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
        pytest.fail(f"torchrun did not finish within {RUN_DEADLINE_S} s")
    for source in (trainer, errors, framework):
        if source is not None:
            source.close()
    return seen


@pytest.mark.parametrize(("crash", "category", "line"), [
    ("cuda_error", "software_crash", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    ("oom", "cuda_oom", "torch.OutOfMemoryError: CUDA out of memory."),
])
def test_a_crashed_worker_opens_an_incident(tmp_path: Path, crash: str, category: str, line: str) -> None:
    started = datetime.now(UTC) - timedelta(seconds=1)
    proc = torchrun(tmp_path, crash)
    seen = watch_run(tmp_path, proc)
    assert proc.returncode != 0, "torchrun should report the failed worker"

    by_source: dict[str, list[Observation]] = {}
    for obs in seen:
        by_source.setdefault(obs["source"], []).append(obs)
    steps = [o for o in by_source.get("trainer", []) if o["event"] == "step"]
    assert {o["rank"] for o in steps} == {0, 1} and max(o["step"] for o in steps) >= 6
    assert any(o["event"] == "checkpoint_saved" for o in by_source["trainer"])
    crashed = [o["line"] for o in by_source.get("framework", []) if o["rank"] == 1]
    assert len(crashed) == 1 and crashed[0].startswith(f"[rank1]: {line}")  # the traceback's last line, verbatim
    failed = [o for o in by_source.get("torchelastic", []) if o["rank"] == 1]
    assert len(failed) == 1 and line in json.dumps(failed[0]["error_file"])

    job_started = observation("scheduler", started, event="job_started", job=JOB,
                              allocation=[{"node": NODE, "gpus": [0, 1], "ranks": [0, 1]}], world_size=2,
                              elastic={"min_gpus": 2, "max_gpus": 2}, max_restarts=0)
    capture = sorted([job_started, *seen], key=lambda o: o["ts"])
    decided = decide_offline(json.dumps(o) for o in capture)
    assert [(i["job"], i["category"]) for i in decided["incidents"]] == [(JOB, category)], decided
