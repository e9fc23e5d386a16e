"""Slurm's outputs of several versions and shapes -> jobs, allocations, nodes (no controller needed)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from producers.scheduler.hostlist import expand_hostlist
from producers.scheduler.scontrol_text import parse_records
from producers.scheduler.slurm import SlurmSource
from producers.scheduler.slurm_jobs import gpu_gres, job_hints, job_view, jobs_from_json, jobs_from_text
from producers.scheduler.slurm_nodes import node_ready, nodes_from_json, nodes_from_text

# scontrol show job -d of Slurm 22.05, a two-node job (node groups with equal GRES share one line).
TWO_NODE_TEXT = """\
JobId=4242 JobName=llama-70b
   UserId=alice(1000) GroupId=ml(1000) MCS_label=N/A
   Priority=1 Nice=0 Account=(null) QOS=(null)
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0
   StartTime=2026-04-22T03:00:10 EndTime=2026-04-23T03:00:10 Deadline=N/A
   NodeList=gpu[07-09]
   JOB_GRES=gpu:h100:12
     Nodes=gpu[07-08] CPU_IDs=0-31 Mem=0 GRES=gpu:h100:4(IDX:0-3)
     Nodes=gpu09 CPU_IDs=0-31 Mem=0 GRES=gpu:h100:4(IDX:4-7)
   Comment=faultline: elastic=8:12 max_restarts=5 checkpoint_dir=/ckpt/llama checkpoint_interval_s=900
   Command=/home/alice/train.sh --lr=3e-4 --name=x
   WorkDir=/home/alice

JobId=4243 JobName=cpu-only
   UserId=bob(1001) GroupId=ml(1000) MCS_label=N/A
   JobState=COMPLETED Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   StartTime=2026-04-22T02:00:00 EndTime=2026-04-22T02:10:00 Deadline=N/A
   NodeList=cpu01
     Nodes=cpu01 CPU_IDs=0 Mem=0 GRES=
   Comment=(null)
"""

# squeue --json of Slurm 22.05 (openapi v0.0.38; trimmed to the fields that matter).
JSON_2205 = {"jobs": [{
    "job_id": 17, "name": "sft", "job_state": "RUNNING", "user_name": "carol", "comment": "gpu_class=H100-80GB",
    "restart_cnt": 0, "start_time": 1776826810, "end_time": 1808362810, "nodes": "n[01-02]",
    "gres_detail": ["gpu:2(IDX:0-1)", "gpu:2(IDX:2-3)"],
    "job_resources": {"allocated_nodes": [{"nodename": "n01"}, {"nodename": "n02"}]},
}]}

# squeue --json of Slurm 23.11+ (data_parser v0.0.40: lists and {"set", "number"} objects).
JSON_2311 = {"jobs": [{
    "job_id": 18, "name": "sft", "job_state": ["FAILED"], "user_name": "carol",
    "comment": {"administrator": "", "job": "elastic=2:4", "system": ""},
    "restart_cnt": {"set": True, "infinite": False, "number": 2},
    "start_time": {"set": True, "infinite": False, "number": 1776826810},
    "end_time": {"set": True, "infinite": False, "number": 1776827000},
    "nodes": "n03", "gres_detail": ["gpu:a100:4(IDX:0-3)"],
    "job_resources": {"nodes": {"allocation": [{"name": "n03"}]}},
}]}


def test_hostlists() -> None:
    assert expand_hostlist("gpu[07-09]") == ["gpu07", "gpu08", "gpu09"]
    assert expand_hostlist("n[1-2,5],m01,r[1-2]-n[1-2]") == ["n1", "n2", "n5", "m01", "r1-n1", "r1-n2", "r2-n1",
                                                             "r2-n2"]
    assert expand_hostlist("") == []
    with pytest.raises(ValueError):
        expand_hostlist("n[3-1]")


@pytest.mark.parametrize(("gres", "indices", "kind"), [
    ("gpu:2(IDX:0-1)", [0, 1], None),
    ("gpu(IDX:0,2)", [0, 2], None),
    ("gpu:a100:4(IDX:0-3)", [0, 1, 2, 3], "a100"),
    ("gpu:a100:1(IDX:0),gpu:v100:2(IDX:2-3),nic:1(IDX:0)", [0, 2, 3], "a100"),
    ("gpu:2(IDX:N/A)", [], None),
    ("", [], None),
])
def test_gpu_indices_from_detailed_gres(gres: str, indices: list[int], kind: str | None) -> None:
    assert gpu_gres(gres) == (indices, kind)


def test_free_text_fields_keep_their_spaces_and_equals_signs() -> None:
    [job, _] = parse_records(TWO_NODE_TEXT, "JobId")
    assert job.fields["Comment"].startswith("faultline: elastic=8:12 max_restarts=5")
    assert job.fields["Command"] == "/home/alice/train.sh --lr=3e-4 --name=x"
    assert job.get("Reason") is None and job.fields["JobState"] == "RUNNING"
    assert [d["Nodes"] for d in job.details] == ["gpu[07-08]", "gpu09"]


def test_a_multi_node_text_job_is_ranked_node_by_node() -> None:
    job, cpu_job = jobs_from_text(TWO_NODE_TEXT)
    assert (job.job_id, job.name, job.state, job.user, job.restarts, job.gpu_type) == (
        "4242", "llama-70b", "RUNNING", "alice", 1, "h100")
    view = job_view(job, "name", max_restarts=3)
    assert view.job == "llama-70b" and view.state == "running"
    assert view.started_at == datetime.fromisoformat("2026-04-22T03:00:10").astimezone(UTC)
    assert view.details == {
        "allocation": [{"node": "gpu07", "gpus": [0, 1, 2, 3], "ranks": [0, 1, 2, 3]},
                       {"node": "gpu08", "gpus": [0, 1, 2, 3], "ranks": [4, 5, 6, 7]},
                       {"node": "gpu09", "gpus": [4, 5, 6, 7], "ranks": [8, 9, 10, 11]}],
        "world_size": 12, "elastic": {"min_gpus": 8, "max_gpus": 12},
        "checkpoint": {"dir": "/ckpt/llama", "interval_s": 900.0}, "gpu_class": "h100", "owner": "alice",
        "max_restarts": 5,
    }
    assert cpu_job.gpus == [("cpu01", [])] and job_view(cpu_job).state == "finished"


def test_json_of_two_slurm_generations_reads_the_same() -> None:
    [old] = jobs_from_json(JSON_2205)
    view = job_view(old, max_restarts=3)
    assert view.job == "17" and view.state == "running"
    assert view.details["allocation"] == [{"node": "n01", "gpus": [0, 1], "ranks": [0, 1]},
                                          {"node": "n02", "gpus": [2, 3], "ranks": [2, 3]}]
    assert view.details["elastic"] == {"min_gpus": 4, "max_gpus": 4}  # fixed size by default
    assert (view.details["gpu_class"], view.details["max_restarts"], view.details["checkpoint"]) == (
        "H100-80GB", 3, None)
    [new] = jobs_from_json(JSON_2311)
    view = job_view(new)
    assert (view.state, new.restarts, view.ended_at) == ("failed", 2, datetime.fromtimestamp(1776827000, UTC))
    assert view.details["allocation"] == [{"node": "n03", "gpus": [0, 1, 2, 3], "ranks": [0, 1, 2, 3]}]
    assert view.details["elastic"] == {"min_gpus": 2, "max_gpus": 4} and view.details["gpu_class"] == "a100"


def test_job_hints() -> None:
    assert job_hints("faultline: elastic=1:2, max_restarts=0;gpu_class=H100") == {
        "elastic": "1:2", "max_restarts": "0", "gpu_class": "H100"}
    assert job_hints("") == {}


@pytest.mark.parametrize(("parts", "ready"), [
    (["IDLE"], True), (["MIXED"], True), (["ALLOCATED"], True), (["idle"], True),
    (["IDLE", "DRAIN"], False), (["MIXED", "DRAIN"], False), (["DOWN", "NOT_RESPONDING"], False),
    (["IDLE*"], False), (["DOWN*"], False), (["ALLOCATED", "FAIL"], False), (["DRAINED"], False),
    (["UNKNOWN"], None), (["FUTURE"], None), ([], None),
])
def test_node_readiness(parts: list[str], ready: bool | None) -> None:
    assert node_ready(parts) is ready


def test_nodes_in_both_forms() -> None:
    text = ("NodeName=n01 Arch=x86_64 CoresPerSocket=1\n   State=IDLE+DRAIN ThreadsPerCore=1\n"
            "   Reason=bad psu [root@2026-04-22T03:00:00]\n\nNodeName=n02 Arch=x86_64\n   State=MIXED ThreadsPerCore=1\n")
    assert [(n.node, n.ready, n.reason) for n in nodes_from_text(text)] == [
        ("n01", False, "bad psu [root@2026-04-22T03:00:00]"), ("n02", True, None)]
    doc = {"nodes": [{"name": "n01", "state": "idle", "state_flags": ["DRAIN"], "reason": "x"},
                     {"name": "n02", "state": ["MIXED"], "reason": ""}]}
    assert [(n.node, n.ready, n.reason) for n in nodes_from_json(doc)] == [("n01", False, "x"), ("n02", True, None)]


def test_auto_format_falls_back_to_text_once() -> None:
    calls: list[str] = []

    def run(argv: Sequence[str]) -> str:
        cmd = " ".join(argv)
        calls.append(cmd)
        if "--json" in cmd:
            raise RuntimeError("squeue: unrecognized option '--json'")
        return TWO_NODE_TEXT if "job" in cmd else "NodeName=gpu07\n   State=DOWN\n"

    source = SlurmSource(run, job_key="name")
    now = datetime(2026, 4, 23, tzinfo=UTC)
    events = source.poll(now)
    assert [(o["event"], o.get("job") or o.get("node")) for o in events] == [
        ("job_started", "llama-70b"), ("node_not_ready", "gpu07")]  # the CPU-only job is not reported
    assert (source.job_format, source.node_format) == ("text", "text")
    calls.clear()
    assert source.poll(now) == []
    assert calls == ["scontrol show job -d", "scontrol show node"]
