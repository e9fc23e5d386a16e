"""Scenarios of judgement that generalises: rules an operator would state, each tried at several cadences,
sizes and orders rather than once.

* **A hang detector's cold start** (:mod:`correlators.rules.hang_witness`): until a run has shown
  ``hang_min_intervals`` step intervals the clock alone declares no hang; a witness (the GPUs spinning or
  idle since the last step, the trainer's heartbeat "in step N for T s") may, and the incident names it.
* **Elastic sizing counts what the launcher can form** (:mod:`correlators.elastic_size`): a restart asks for
  whole nodes of ``nproc_per_node`` workers within the launcher's node range.
* **A checkpoint the job just loaded is a restart point** (:mod:`correlators.checkpoints`, "Loaded").

Registered into :data:`scenario_book.SCENARIOS` (imported at the end of that module).
"""

from __future__ import annotations

from typing import Any

from builder import Capture, at_iso
from scenario_book import NO_FENCE, expect, fleet, restart, scenario

S = tuple[Capture, dict[str, Any]]

QUIET = {"incidents": [], "must_not": NO_FENCE + [{"type": "restart_job"}, {"type": "notify"}]}


def _restarts(out: dict[str, Any], job: str = "pt") -> list[dict[str, Any]]:
    return [c for c in out["commands"] if c["type"] == "restart_job" and c["target"]["job"] == job]


def _says(job: str, *words: str) -> Any:
    """The job's incident summary says every one of ``words`` (which rule decided)."""
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        incs = [i for i in out["incidents"] if i["job"] == job]
        if not incs:
            return [f"no incident for {job}"]
        summary = incs[0].get("summary") or ""
        return [f"the incident does not say {w!r}: {summary}" for w in words if w not in summary]
    return check


# --- a hang detector's cold start -----------------------------------------------------------------------
def _slow_job(every: float, duration: float, first_report: float = 1.0, nodes: tuple[str, ...] = ("n1", "n2"),
              nvml: float | None = 30.0) -> Capture:
    """A job that steps every ``every`` seconds; its trainer also logs step 0 ``first_report`` s after start
    (so the run's first interval is tiny: the start-up, not the cadence)."""
    cap = fleet(*nodes, duration=duration, nvml=nvml).job("pt", list(nodes), step_every=every, interval=None)
    return cap.trainer(10 + first_report, "pt", "step", step=0, loss=2.7, samples_per_s=400.0)


@scenario
def cold_start_two_minute_steps_is_not_a_hang() -> S:
    """Step 0 a second after the start, then a step about every 2 min: 2 min after its first step the job
    is merely between steps, and without a witness no hang is declared (nor a restart from nothing)."""
    return _slow_job(130, 1500), expect(**QUIET)


@scenario
def cold_start_five_minute_steps_one_node_is_not_a_hang() -> S:
    """One node, steps every 5 min, no checkpoint yet."""
    return _slow_job(300, 2400, first_report=1, nodes=("n1",)), expect(**QUIET)


@scenario
def cold_start_ten_minute_steps_no_telemetry_is_not_a_hang() -> S:
    """Steps every 10 min, no NVML at all: the first intervals are judged by nothing but the clock."""
    return _slow_job(600, 4000, nodes=("n1", "n2", "n3"), nvml=None), expect(**QUIET)


@scenario
def cold_start_stall_without_a_witness_is_not_declared() -> S:
    """The job stops after its first real step, no NVML, no trainer heartbeat: the clock alone never decides
    a hang before the cadence is known."""
    cap = _slow_job(120, 2400, nvml=None)
    cap.stop_training("pt", 200)
    return cap, expect(**QUIET)


@scenario
def cold_start_stall_witnessed_by_spinning_gpus() -> S:
    """Steps every minute; after the first real step every GPU stays busy at low power (ranks waiting in a
    collective): a hang, witnessed, though the cadence is not known yet."""
    cap = _slow_job(60, 1800)
    cap.spin(71, "pt")
    return cap, expect(
        incidents=[{"job": "pt", "category": "training_hang", "opened_by": at_iso(70 + 660)}],
        must=[{"type": "notify", "job": "pt"}],
        must_not=NO_FENCE,
        _check=_says("pt", "cadence not yet known", "spinning"),
    )


@scenario
def cold_start_stall_witnessed_by_idle_gpus() -> S:
    """Steps every 2 min; after the first real step every GPU of the job goes idle while the processes live."""
    cap = _slow_job(120, 2000, nodes=("n1",))
    cap.spin(140, "pt", util=0.0, power=70.0)
    return cap, expect(
        incidents=[{"job": "pt", "category": "training_hang", "opened_by": at_iso(140 + 700)}],
        must_not=NO_FENCE,
        _check=_says("pt", "cadence not yet known", "idle"),
    )


@scenario
def cold_start_stall_witnessed_by_the_trainer_heartbeat() -> S:
    """No NVML; the trainer keeps a heartbeat every minute saying it is in step 2 and for how long: once that
    is longer than the cold-start bound, the heartbeat is the witness."""
    cap = _slow_job(120, 2000, nvml=None)
    cap.stop_training("pt", 140)
    for k in range(1, 25):
        cap.trainer(130 + 60 * k, "pt", "heartbeat", step=11, in_step_s=60.0 * k)
    return cap, expect(
        incidents=[{"job": "pt", "category": "training_hang", "opened_by": at_iso(130 + 60 * 11)}],
        must=[{"type": "notify", "job": "pt"}],
        must_not=NO_FENCE,
        _check=_says("pt", "cadence not yet known", "in step 11 for"),
    )


@scenario
def cold_start_stall_witnessed_by_late_heartbeats_naming_only_their_step() -> S:
    """Steps every 3 min on one node, no NVML; the trainer's heartbeats name the step it is in (the one after
    its last report) but not for how long, and each arrives 20 s late: timed from the last step report."""
    cap = _slow_job(180, 2400, nodes=("n1",), nvml=None)
    cap.stop_training("pt", 200)
    for k in range(1, 30):
        cap.trainer(190 + 45 * k, "pt", "heartbeat", step=11).late(20)
    return cap, expect(
        incidents=[{"job": "pt", "category": "training_hang", "opened_by": at_iso(190 + 900 + 80)}],
        must_not=NO_FENCE,
        _check=_says("pt", "cadence not yet known", "in step 11 for"),
    )


@scenario
def cadence_known_after_three_intervals_the_clock_decides() -> S:
    """The boundary of the rule: after three intervals of 2 min the cadence is known and a stop of
    5 x 2 min is a hang on the clock alone (no NVML, no heartbeat)."""
    cap = _slow_job(120, 2400, nvml=None)
    cap.stop_training("pt", 10 + 120 * 4 + 1)
    return cap, expect(
        incidents=[{"job": "pt", "category": "training_hang", "opened_by": at_iso(490 + 600 + 5)}],
        must=[{"type": "notify", "job": "pt"}],
        must_not=NO_FENCE,
        _check=_says("pt", "hang_factor x its longest step interval"),
    )


# --- a checkpoint the job just loaded -------------------------------------------------------------------
def _started_from(step: int, nodes: tuple[str, ...] = ("n1", "n2"), interval: float = 1800,
                  duration: float = 1800) -> Capture:
    """A job whose first run in this capture starts from checkpoint ``step`` (its trainer logs
    ``checkpoint_loaded``) and saves every ``interval`` s."""
    return fleet(*nodes, "n9", duration=duration).job("pt", list(nodes), interval=interval, resume_step=step)


def _from_step(step: int) -> Any:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        rs = _restarts(out)
        bad = [f"restart {r['params'].get('checkpoint')} is not step {step}" for r in rs
               if (r["params"].get("checkpoint") or {}).get("step") != step]
        bad += [] if rs else ["no restart"]
        bad += [f"the restart does not say it is the loaded checkpoint: {r.get('reason')}" for r in rs
                if "the checkpoint the run loaded" not in (r.get("reason") or "")]
        return bad
    return check


@scenario
def loaded_checkpoint_is_the_restart_point_after_a_gpu_falls_off() -> S:
    """Started from step 48,000; a GPU falls off the bus 5 min in, before the first save: restart from 48,000."""
    cap = _started_from(48000)
    cap.xid(310, "n2", 4, 79).crash(311, "pt", rank=12)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n2", "culprit_gpus": [4]}],
        must=[restart("pt", checkpoint_step=48000, excludes_gpu=["n2", 4])],
        _check=_from_step(48000),
    )


@scenario
def loaded_checkpoint_is_the_restart_point_after_a_software_crash() -> S:
    """One node, started from step 120,000, a Python exception a minute in."""
    cap = _started_from(120000, nodes=("n1",))
    cap.crash(75, "pt", rank=3, error="ValueError: expected a batch of 16")
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash"}],
        must=[restart("pt", checkpoint_step=120000)],
        must_not=NO_FENCE,
        _check=_from_step(120000),
    )


@scenario
def loaded_checkpoint_announced_late_is_still_the_restart_point() -> S:
    """The trainer's checkpoint_loaded line reaches the pipeline 40 s late, after the first steps; the node
    dies (memory SEL, silence) before the first save."""
    cap = _started_from(7000, nodes=("n1", "n2", "n3")).bmc_polls(60)
    cap.where(lambda d: d.get("event") == "checkpoint_loaded").late(40)
    cap.sel(599, "n3", "memory").silence(600, "n3").bmc_power(630, "n3")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": "n3"}],
        must=[restart("pt", checkpoint_step=7000, excludes_node="n3")],
        _check=_from_step(7000),
    )


@scenario
def loaded_checkpoint_is_the_restart_point_when_the_job_start_arrives_after_it() -> S:
    """The scheduler's job_started line reaches the pipeline 30 s late, after the trainer's checkpoint_loaded
    (and first steps) of the run it began: the load is that run's all the same, and the restart point."""
    cap = _started_from(9000)
    cap.where(lambda d: d.get("event") == "job_started").late(30)
    cap.xid(310, "n2", 4, 79).crash(311, "pt", rank=12)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n2", "culprit_gpus": [4]}],
        must=[restart("pt", checkpoint_step=9000, excludes_gpu=["n2", 4])],
        _check=_from_step(9000),
    )


@scenario
def a_save_after_the_load_is_newer_than_the_load() -> S:
    """Started from 48,000, saved at about 48,600 ten minutes later, then a GPU fails: the save wins."""
    cap = _started_from(48000, interval=600)
    cap.xid(900, "n1", 2, 48).crash(901, "pt", rank=2)
    saved = cap.checkpoint_step("pt", 900)
    assert saved is not None and saved > 48000
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_memory_fault", "culprit_node": "n1", "culprit_gpus": [2]}],
        must=[restart("pt", checkpoint_step=saved, excludes_gpu=["n1", 2])],
        must_not=[restart("pt", checkpoint_step=48000)],
    )


@scenario
def a_loaded_checkpoint_that_failed_to_load_is_no_restart_point() -> S:
    """The run says it loads 48,000 and dies before its first step on missing state_dict keys: that checkpoint
    is known bad, never the restart point."""
    cap = _started_from(48000, nodes=("n1",))
    cap.stop_training("pt", 14)
    cap.crash(20, "pt", rank=0, error="RuntimeError: Error(s) in loading state_dict for GPT: Missing key(s) "
                                      "in state_dict: \"lm_head.weight\"")
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash"}],
        must_not=NO_FENCE + [restart("pt", checkpoint_step=48000)],
    )


@scenario
def a_node_local_loaded_checkpoint_dies_with_its_node() -> S:
    """Loaded from the node's own NVMe; that node is the one that fails: the checkpoint is lost with it, and
    the restart says what skipping it cost."""
    cap = fleet("n1", "n2", "n9", duration=1800).bmc_polls(60).job(
        "pt", ["n1", "n2"], interval=1800, resume_step=30000, ckpt_dir="/mnt/nvme/ckpt/pt")
    cap.sel(599, "n1", "memory").silence(600, "n1").bmc_power(630, "n1")

    def check(out: dict[str, Any], c: Capture) -> list[str]:
        rs = _restarts(out)
        if not rs:
            return ["no restart"]
        skipped = rs[0]["params"].get("checkpoint_skipped") or []
        return [] if any(k["step"] == 30000 and "node-local" in k["why"] for k in skipped) else [
            f"the restart does not say step 30000 was node-local: {rs[0]['params']}"]
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": "n1"}],
        must=[restart("pt", excludes_node="n1")],
        must_not=[restart("pt", checkpoint_step=30000)],
        _check=check,
    )


# --- elastic sizing counts what the launcher can form ------------------------------------------------------
def _launch_line(cap: Capture, job: str, lo: int, hi: int, nproc: int, form: str = "block", at: float = 11) -> None:
    """The launcher's configuration on rank 0's output, in one of the forms torchelastic writes it."""
    if form == "block":  # torch.distributed.launcher.api, one field a line
        lines = ["Starting elastic_operator with launch configs:", "  entrypoint       : train.py",
                 f"  min_nodes        : {lo}", f"  max_nodes        : {hi}", f"  nproc_per_node   : {nproc}",
                 f"  run_id           : {job}", "  rdzv_backend     : c10d"]
    elif form == "repr":
        lines = [f"[default0]:LaunchConfig(min_nodes={lo}, max_nodes={hi}, nproc_per_node={nproc}, run_id='{job}', "
                 "role='default', rdzv_endpoint='head:29400', rdzv_backend='c10d', max_restarts=3)"]
    else:
        lines = [f"+ torchrun --nnodes={lo}:{hi} --nproc-per-node={nproc} --rdzv-backend=c10d train.py"]
    for k, line in enumerate(lines):
        cap.framework(at + 0.001 * k, job, 0, line)


def _sized(gpus: int, nproc: int, source: str) -> Any:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        rs = [c for c in out["commands"] if c["type"] == "restart_job"]
        if not rs:
            return ["no restart"]
        p = rs[0]["params"]
        bad = [] if p.get("gpus") == gpus and p["gpus"] % nproc == 0 else [f"gpus {p.get('gpus')}, want {gpus}"]
        sizing = p.get("sizing") or {}
        if sizing.get("nproc_per_node") != nproc or source not in str(sizing.get("nproc_from")):
            bad.append(f"the restart does not say it was sized by nproc_per_node={nproc} ({source}): {sizing}")
        if "whole node" not in (rs[0].get("reason") or ""):
            bad.append(f"the reason does not name the rule: {rs[0].get('reason')}")
        return bad
    return check


@scenario
def elastic_eight_nodes_lose_a_gpu_ask_for_seven_whole_nodes() -> S:
    """64 GPUs on 8 nodes (4-8 nodes of 8, as the launcher says); one GPU falls off: 56 GPUs, not 63."""
    nodes = [f"n{k}" for k in range(1, 9)]
    cap = fleet(*nodes, "n9").job("el", nodes, elastic=(32, 64))
    _launch_line(cap, "el", 4, 8, 8)
    cap.xid(900, "n5", 6, 79).crash(901, "el", rank=38)
    return cap, expect(
        incidents=[{"job": "el", "category": "gpu_off_bus", "culprit_node": "n5", "culprit_gpus": [6]}],
        must=[restart("el", excludes_gpu=["n5", 6], gpus_min=56, gpus_max=56)],
        _check=_sized(56, 8, "launch config"),
    )


@scenario
def elastic_nproc_four_never_asks_for_fifteen() -> S:
    """Four workers a node on 4 nodes (2-4 nodes, from a LaunchConfig repr); a GPU dies: 12, not 15."""
    cap = fleet("n1", "n2", "n3", "n4", "n5")
    cap.job("el", {n: [0, 1, 2, 3] for n in ("n1", "n2", "n3", "n4")}, elastic=(8, 16))
    _launch_line(cap, "el", 2, 4, 4, form="repr")
    cap.xid(900, "n3", 1, 48).crash(901, "el", rank=9)
    return cap, expect(
        incidents=[{"job": "el", "category": "gpu_memory_fault", "culprit_node": "n3", "culprit_gpus": [1]}],
        must=[restart("el", excludes_gpu=["n3", 1], gpus_min=12, gpus_max=12)],
        _check=_sized(12, 4, "launch config"),
    )


@scenario
def elastic_half_nodes_without_a_launch_line_counts_the_jobs_ranks_per_node() -> S:
    """Two jobs share three nodes by halves (GPUs 0-3 and 4-7); no launch line: nproc_per_node is the job's
    4 ranks per node, not the node's 8 GPUs. A GPU of job b fails: b asks for 8 (two whole halves)."""
    cap = fleet("n1", "n2", "n3", "n4")
    cap.job("a", {n: [0, 1, 2, 3] for n in ("n1", "n2", "n3")}, elastic=(4, 12))
    cap.job("b", {n: [4, 5, 6, 7] for n in ("n1", "n2", "n3")}, elastic=(4, 12))
    cap.xid(900, "n2", 6, 79).crash(901, "b", rank=6)
    return cap, expect(
        incidents=[{"job": "b", "category": "gpu_off_bus", "culprit_node": "n2", "culprit_gpus": [6]}],
        must=[restart("b", excludes_gpu=["n2", 6], gpus_min=8, gpus_max=8)],
        must_not=[restart("a")],
        _check=_sized(8, 4, "allocation"),
    )


@scenario
def elastic_floor_in_whole_nodes_from_a_torchrun_line() -> S:
    """torchrun --nnodes=3:4 --nproc-per-node=8 on 4 nodes; a GPU falls off on each of two nodes: what is
    left forms 2 whole nodes, below the launcher's floor of 3: ask for 3 whole nodes (24), never 30."""
    nodes = ["n1", "n2", "n3", "n4"]
    cap = fleet(*nodes, "n5", "n6").bmc_polls(60).job("el", nodes, elastic=(8, 32))
    _launch_line(cap, "el", 3, 4, 8, form="torchrun")
    cap.xid(900, "n2", 0, 79).xid(900.5, "n4", 7, 79).crash(901, "el", rank=8)
    return cap, expect(
        incidents=[{"job": "el", "category": "gpu_off_bus"}],
        must=[restart("el", excludes_gpu=["n2", 0], gpus_min=24, gpus_max=24)],
        _check=_sized(24, 8, "launch config"),
    )


@scenario
def elastic_without_launch_line_never_asks_for_a_partial_node() -> S:
    """Two nodes of 8 (elastic 8-16 GPUs, no launch line); a GPU falls off: 8 GPUs (one whole node), not 15."""
    cap = fleet("n1", "n2", "n3").job("el", ["n1", "n2"], elastic=(8, 16))
    cap.xid(900, "n1", 3, 95).crash(901, "el", rank=3)
    return cap, expect(
        incidents=[{"job": "el", "category": "gpu_memory_fault", "culprit_node": "n1", "culprit_gpus": [3]}],
        must=[restart("el", excludes_gpu=["n1", 3], gpus_min=8, gpus_max=8)],
        _check=_sized(8, 8, "allocation"),
    )


# --- a kill with nothing said ------------------------------------------------------------------------
@scenario
def worker_killed_with_nothing_said_is_the_crash() -> S:
    """A rank is SIGKILLed (exit -9, no error file, no OOM line) while the job runs; torchelastic then tears the
    others down with SIGTERM and nothing else is said: the kill is the failure, found at once, not 150 s later as a
    hang, and the job is restarted."""
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.worker_exit(700, "pt", 5, -9)
    for r in range(8):
        if r != 5:
            cap.worker_exit(701, "pt", r, -15)
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash", "opened_by": at_iso(700.5)}],
        must=[restart("pt")], must_not=NO_FENCE)


@scenario
def sigkill_in_the_teardown_of_a_crash_is_its_consequence() -> S:
    """A rank raises; torchelastic SIGTERMs the others and SIGKILLs the one that outlives the grace: one incident,
    the exception's, the kill its evidence."""
    cap = fleet("n1", "n2").job("pt", ["n1"])
    cap.exception(700, "pt", 2).worker_exit(700.5, "pt", 2, 1, "ValueError: expected a batch of 16")
    for r in range(8):
        if r != 2:
            cap.worker_exit(701, "pt", r, -9 if r == 6 else -15)
    return cap, expect(
        incidents=[{"job": "pt", "category": "software_crash", "opened_by": at_iso(700.5)}],
        must=[restart("pt")], must_not=NO_FENCE, at_most=[[{"type": "notify", "job": "pt"}, 1]])
