"""The Slurm backend against a real slurmctld/slurmd (``scontrol`` through the real command-line seam)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from sinks.executors.breaker import CircuitBreaker
from sinks.executors.core import ExecutionError, Executor
from sinks.executors.ledger import ResultLedger
from sinks.executors.slurm import CommandLine, SlurmBackend
from tests.producers.scheduler.slurm_cluster import SlurmCluster
from tests.servers import wait_until

from .commands import command


def backend(cluster: SlurmCluster) -> SlurmBackend:
    return SlurmBackend(CommandLine(timeout_s=20, env={"SLURM_CONF": str(cluster.conf)}))


def show(cluster: SlurmCluster, kind: str, name: str) -> dict[str, str]:
    """``scontrol show node|job`` as a dict (Reason keeps its spaces, without the [user@time] tail)."""
    out = cluster.run("scontrol", "--oneliner", "show", kind, name).strip()
    head, _, reason = out.partition(" Reason=") if kind == "node" else (out, "", "")
    fields = dict(token.partition("=")[::2] for token in head.split())
    if reason:
        fields["Reason"] = reason.rsplit(" [", 1)[0]
    return fields


def running(cluster: SlurmCluster, *sbatch_args: str) -> str:
    job = cluster.sbatch("--requeue", "--gres=gpu:1", *sbatch_args, "--wrap", "sleep 120")
    wait_until(lambda: show(cluster, "job", job)["JobState"] == "RUNNING", 20, f"job {job} running", 0.2)
    return job


def test_cordon_drains_the_node_with_our_reason_and_release_resumes_it(slurm: SlurmCluster) -> None:
    slurm_backend = backend(slurm)
    detail = slurm_backend.execute(command("c1", "cordon_node", node=slurm.node, incident="inc-42"))
    node = show(slurm, "node", slurm.node)
    assert "DRAIN" in node["State"] and node["Reason"] == "faultline: inc-42 gpu_off_bus"
    assert detail == f"drained node {slurm.node} (reason: faultline: inc-42 gpu_off_bus)"
    assert "already drained for this" in slurm_backend.execute(
        command("c2", "drain_node", node=slurm.node, incident="inc-42"))

    assert slurm_backend.execute(command("c3", "release_gpu", node=slurm.node)) == f"resumed node {slurm.node}"
    assert "DRAIN" not in show(slurm, "node", slurm.node)["State"]


def test_quarantined_gpus_drain_the_node_until_the_last_is_released(slurm: SlurmCluster) -> None:
    slurm_backend = backend(slurm)
    slurm_backend.execute(command("q1", "quarantine_gpu", node=slurm.node, gpu="GPU-aaaa", incident="inc-1"))
    slurm_backend.execute(command("q2", "quarantine_gpu", node=slurm.node, gpu="GPU-bbbb", incident="inc-2",
                                  params={"reason": "gpu_memory_fault"}))
    node = show(slurm, "node", slurm.node)
    assert "DRAIN" in node["State"]
    assert node["Reason"] == "faultline: inc-1 gpu_off_bus gpu=GPU-aaaa; inc-2 gpu_memory_fault gpu=GPU-bbbb"

    detail = slurm_backend.execute(command("r1", "release_gpu", node=slurm.node, gpu="GPU-aaaa"))
    assert "stays drained" in detail
    node = show(slurm, "node", slurm.node)
    assert "DRAIN" in node["State"] and node["Reason"] == "faultline: inc-2 gpu_memory_fault gpu=GPU-bbbb"
    slurm_backend.execute(command("r2", "release_gpu", node=slurm.node, gpu="GPU-bbbb"))
    assert "DRAIN" not in show(slurm, "node", slurm.node)["State"]


def test_a_node_drained_by_someone_else_is_left_alone(slurm: SlurmCluster) -> None:
    slurm.run("scontrol", "update", f"NodeName={slurm.node}", "State=DRAIN", "Reason=PSU swap, ask Bob")
    slurm_backend = backend(slurm)
    assert "already drained by someone else" in slurm_backend.execute(
        command("c1", "cordon_node", node=slurm.node))
    with pytest.raises(ExecutionError, match="drained by someone else .*not resuming"):
        slurm_backend.execute(command("c2", "release_gpu", node=slurm.node))
    assert show(slurm, "node", slurm.node)["Reason"] == "PSU swap, ask Bob"


def test_restart_requeues_a_running_job(slurm: SlurmCluster) -> None:
    job = running(slurm, "--job-name=fl-llm")
    detail = backend(slurm).execute(command("c1", "restart_job", node=None, job="fl-llm",
                                            params={"exclude": {"nodes": [], "gpus": []}}))
    assert detail == f"requeued job {job}"
    fields = show(slurm, "job", job)
    assert fields["Restarts"] == "1" and fields["ExcNodeList"] == "(null)"


def test_restart_with_excluded_nodes_sets_them_before_the_job_may_start_again(slurm: SlurmCluster) -> None:
    job = running(slurm)
    detail = backend(slurm).execute(command("c1", "restart_job", node=None, job=job,
                                            params={"exclude": {"nodes": [slurm.node], "gpus": []}}))
    assert detail == f"requeued job {job} excluding {slurm.node}"
    wait_until(lambda: show(slurm, "job", job)["JobState"] == "PENDING", 20, f"job {job} pending again", 0.2)
    fields = show(slurm, "job", job)
    assert (fields["Restarts"], fields["ExcNodeList"]) == ("1", slurm.node)
    assert fields["Reason"] != "JobHeldAdmin"  # released: it waits only for a node it may use


def test_restart_of_an_unknown_job_name_fails_without_guessing(slurm: SlurmCluster) -> None:
    with pytest.raises(ExecutionError, match="matches 0 active jobs"):
        backend(slurm).execute(command("c1", "restart_job", node=None, job="no-such-job"))


def test_reboot_surfaces_slurms_refusal(slurm: SlurmCluster) -> None:
    with pytest.raises(ExecutionError, match="RebootProgram isn't defined"):  # the test cluster has none
        backend(slurm).execute(command("c1", "reboot_node", node=slurm.node, requires_approval=True))


def test_fleet_size_counts_the_nodes(slurm: SlurmCluster) -> None:
    assert backend(slurm).fleet_size() == 1


def test_reboot_and_requeue_command_lines() -> None:
    calls: list[list[str]] = []

    def run(args: Sequence[str]) -> str:
        calls.append(list(args))
        return "4242\n" if args[0] == "squeue" else ""

    slurm_backend = SlurmBackend(run)
    slurm_backend.execute(command("c1", "reboot_node", node="gpu-node-07", incident="inc-9"))
    slurm_backend.execute(command("c2", "restart_job", node=None, job="llm",
                                  params={"exclude": {"nodes": ["n1", "n2"], "gpus": ["GPU-1"]}}))
    assert calls == [
        ["scontrol", "reboot", "ASAP", "nextstate=DOWN", "reason=faultline: inc-9 gpu_off_bus", "gpu-node-07"],
        ["squeue", "--noheader", "--format=%i", "--name=llm"],
        ["scontrol", "requeuehold", "4242"],
        ["scontrol", "update", "JobId=4242", "ExcNodeList=n1,n2"],
        ["scontrol", "release", "4242"],
    ]


def test_a_failed_exclusion_leaves_the_job_held_and_says_so() -> None:
    def run(args: Sequence[str]) -> str:
        if args[:2] == ["scontrol", "update"]:
            raise ExecutionError("scontrol update: exit 1: Invalid node name specified")
        return ""

    with pytest.raises(ExecutionError, match="job 77 requeued and HELD: excluding bad-node failed"):
        SlurmBackend(run).execute(command("c1", "restart_job", node=None, job="77",
                                          params={"exclude": {"nodes": ["bad-node"]}}))


def test_a_hung_command_times_out() -> None:
    with pytest.raises(ExecutionError, match="no answer within 0.2s"):
        CommandLine(timeout_s=0.2)(["sleep", "5"])


# --- issue 15, finding 3: hostlist injection ----------------------------------------------------


@pytest.mark.parametrize("node", ["gpu-[001-999]", "ALL", "n1,n2", "-h", "n1 n2"])
def test_no_hostlist_reaches_scontrol(node: str) -> None:
    calls: list[list[str]] = []

    def run(args: Sequence[str]) -> str:
        calls.append(list(args))
        return "State=IDLE Reason=(null)\n"

    slurm_backend = SlurmBackend(run)
    for cmd in (command("c1", "cordon_node", node=node), command("c2", "reboot_node", node=node),
                command("c3", "restart_job", node=None, job="77", params={"exclude": {"nodes": ["n0", node]}})):
        with pytest.raises(ExecutionError, match="not passed to scontrol"):
            slurm_backend.execute(cmd)
        with pytest.raises(ExecutionError, match="not passed to scontrol"):
            slurm_backend.plan(cmd)
    assert calls == []


def test_scontrol_gets_a_minimal_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTLINE_SIGNING_KEYS", "k1:a-secret-the-child-must-not-see")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    env = CommandLine(timeout_s=5)(["env"])
    assert "a-secret-the-child-must-not-see" not in env and "FAULTLINE_" not in env
    assert "SLURM_CONF=/etc/slurm/slurm.conf" in env.splitlines() and "PATH=" in env


def test_the_executor_acts_only_on_nodes_of_the_real_cluster(slurm: SlurmCluster) -> None:
    real = backend(slurm)
    assert real.knows_node(slurm.node) and not real.knows_node("gpu-node-not-here")
    ex = Executor(real, ResultLedger(None), breaker=CircuitBreaker(fleet_size=100))
    for i, node in enumerate(["gpu-node-not-here", "ALL", f"{slurm.node},{slurm.node}x", f"{slurm.node}[0-9]"]):
        assert ex.handle(command(f"c{i}", "cordon_node", node=node), datetime.now(UTC)).status == "refused", node
    assert "DRAIN" not in show(slurm, "node", slurm.node)["State"]
    assert ex.handle(command("c9", "cordon_node", node=slurm.node), datetime.now(UTC)).status == "done"
    assert "DRAIN" in show(slurm, "node", slurm.node)["State"]


def test_restart_asks_for_the_jobs_gpu_class_and_count(slurm: SlurmCluster) -> None:
    """The held job is changed to ask for compatible replacements (``--gpus=<class>:<count>``) before it may run."""
    job = running(slurm)
    detail = backend(slurm).execute(command("c1", "restart_job", node=None, job=job, params={
        "exclude": {"nodes": [], "gpus": ["GPU-1"]}, "gpu_class": "h100", "gpus": 1}))
    assert detail == f"requeued job {job} asking for gpu:h100:1"
    wait_until(lambda: show(slurm, "job", job)["JobState"] == "PENDING", 20, f"job {job} pending again", 0.2)
    fields = show(slurm, "job", job)
    assert fields["TresPerJob"] == "gres/gpu:h100:1" and fields["Restarts"] == "1"


def test_gpu_class_and_exclusions_in_one_update_and_a_bad_class_is_refused() -> None:
    calls: list[list[str]] = []

    def run(args: Sequence[str]) -> str:
        calls.append(list(args))
        return ""

    SlurmBackend(run).execute(command("c1", "restart_job", node=None, job="77", params={
        "exclude": {"nodes": ["n1"], "gpus": []}, "gpu_class": "a100", "gpus": 15}))
    assert calls == [["scontrol", "requeuehold", "77"],
                     ["scontrol", "update", "JobId=77", "ExcNodeList=n1", "TresPerJob=gres/gpu:a100:15"],
                     ["scontrol", "release", "77"]]
    with pytest.raises(ExecutionError, match="not a GRES type name"):
        SlurmBackend(run).execute(command("c2", "restart_job", node=None, job="77",
                                          params={"gpu_class": "a100 --uid=0", "gpus": 8}))
    assert len(calls) == 3  # refused before anything ran


@pytest.mark.parametrize("count", [8.0, 8.5, 0, -8, True, "8"])
def test_a_gpu_count_that_is_not_a_positive_integer_is_refused_not_dropped(count: object) -> None:
    """Issue 27, item 6: a restart whose GPU count arrived as ``8.0`` (or anything but a positive integer) was
    run without the count, silently. The schema refuses ``8.0``, ``true`` and ``"8"`` on arrival; should one
    reach the backend anyway, or a count of 0, nothing runs and the command's result says why."""
    calls: list[list[str]] = []

    def run(args: Sequence[str]) -> str:
        calls.append(list(args))
        return ""

    backend = SlurmBackend(run)
    why = rf"restart_job: gpus {re.escape(repr(count))} is not a positive integer: refused, nothing was run"
    if type(count) is int:  # a count the schema takes: through the executor, to the command's result
        cmd = command("c1", "restart_job", node=None, job="77", params={"gpu_class": "a100", "gpus": count})
        result = Executor(backend, ResultLedger(None)).handle(cmd, datetime.now(UTC))
        assert result.status == "failed" and re.match(why, result.detail), result.detail
    else:  # past the schema: what a backend must not take for a count either
        cmd = command("c1", "restart_job", node=None, job="77", params={"gpu_class": "a100", "gpus": 8})
        cmd.params["gpus"] = count
        for way in (backend.plan, backend.execute):
            with pytest.raises(ExecutionError, match=why):
                way(cmd)
    assert calls == []  # not requeued without the count: not requeued at all


def test_checkpoint_now_signals_only_the_batch_script_and_only_where_the_site_opted_in() -> None:
    """Issue 29: a batch script that traps USR1 turns it into the job's control file; one that does not would
    die of it, so without ``checkpoint_signal`` the command is refused, saying why, and nothing runs."""
    calls: list[list[str]] = []

    def run(args: Sequence[str]) -> str:
        calls.append(list(args))
        return "4242\n" if args[0] == "squeue" else ""

    ask = command("c1", "checkpoint_now", node=None, job="llm", params={})
    with pytest.raises(ExecutionError, match="not configured"):
        SlurmBackend(run).execute(ask)
    assert calls == []
    detail = SlurmBackend(run, checkpoint_signal="USR1").execute(ask)
    assert calls == [["squeue", "--noheader", "--format=%i", "--name=llm"],
                     ["scancel", "--batch", "--signal=USR1", "4242"]]
    assert "4242" in detail and SlurmBackend(run).supports("checkpoint_now")
    with pytest.raises(ValueError):
        SlurmBackend(run, checkpoint_signal="KILL")
