"""The slurm source against a real Slurm controller and node (started by the session fixture)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Literal

import pytest

from producers.capture import parse_capture_line
from producers.scheduler.slurm import SlurmSource
from producers.source import Observation
from streams.events import JobStarted
from tests.producers.scheduler.slurm_cluster import SlurmCluster

POLL_DEADLINE_S = 30.0


class Watcher:
    """Polls a source as the agent would (fast), keeping every observation."""

    def __init__(self, source: SlurmSource) -> None:
        self.source = source
        self.seen: list[Observation] = []

    def until(self, event: str, key: str, value: str) -> Observation:
        """Poll until ``event`` about ``value`` has been seen (now or before)."""
        deadline = time.monotonic() + POLL_DEADLINE_S
        while True:
            for obs in self.seen:
                if obs["event"] == event and obs.get(key) == value:
                    return obs
            if time.monotonic() > deadline:
                raise AssertionError(f"no {event} for {value} within {POLL_DEADLINE_S} s: {self.seen}")
            time.sleep(0.2)
            self.seen.extend(self.source.poll(datetime.now(UTC)))


@pytest.mark.parametrize("form", ["json", "text"])
def test_a_gpu_job_starts_and_is_cancelled(slurm_cluster: SlurmCluster, form: Literal["json", "text"]) -> None:
    watch = Watcher(SlurmSource(slurm_cluster.runner(), format=form, nodes=False))
    job = slurm_cluster.sbatch("--gres=gpu:2", "--job-name=fl-test", "--comment=faultline: checkpoint_dir=/ck",
                               "--wrap", "sleep 30")
    started = watch.until("job_started", "job", job)
    [alloc] = started["allocation"]
    assert alloc["node"] == slurm_cluster.node and alloc["ranks"] == [0, 1]
    assert len(alloc["gpus"]) == 2 and set(alloc["gpus"]) <= set(range(slurm_cluster.gpus))
    assert (started["world_size"], started["elastic"], started["owner"], started["max_restarts"]) == (
        2, {"min_gpus": 2, "max_gpus": 2}, "root", 3)
    assert started["checkpoint"] == {"dir": "/ck"}
    [event] = parse_capture_line(json.dumps(started))
    assert isinstance(event.body, JobStarted) and event.job == job and event.ts <= datetime.now(UTC)

    slurm_cluster.run("scancel", job)
    cancelled = watch.until("job_cancelled", "job", job)
    assert cancelled["ts"] >= started["ts"]


def test_jobs_that_end_by_themselves(slurm_cluster: SlurmCluster) -> None:
    watch = Watcher(SlurmSource(slurm_cluster.runner(), nodes=False, job_key="name"))
    slurm_cluster.sbatch("--gres=gpu:1", "--job-name=fl-ok", "--wrap", "sleep 2")
    slurm_cluster.sbatch("--gres=gpu:1", "--job-name=fl-bad", "--wrap", "sleep 2; exit 3")
    watch.until("job_finished", "job", "fl-ok")
    watch.until("job_failed", "job", "fl-bad")
    assert [(o["event"], o["job"]) for o in watch.seen if o["job"] == "fl-ok"] == [
        ("job_started", "fl-ok"), ("job_finished", "fl-ok")]


def test_a_drained_node_is_not_ready_until_resumed(slurm_cluster: SlurmCluster) -> None:
    source = SlurmSource(slurm_cluster.runner(), jobs=False)
    assert source.poll(datetime.now(UTC)) == []  # ready: nothing to say
    watch = Watcher(source)
    node = slurm_cluster.node
    slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=faultline test")
    try:
        drained = watch.until("node_not_ready", "node", node)
        assert drained["reason"].startswith("faultline test")
    finally:
        slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=resume")
    watch.until("node_ready", "node", node)
