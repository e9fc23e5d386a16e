"""Scenarios of "every fault fenced, every checkpoint proven, every recovery measured": a second fault
inside an open incident, a checkpoint that does not load, a recovery that runs but too slowly.

Registered into :data:`scenario_book.SCENARIOS` (imported at the end of that module).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from builder import T0, Capture, at_iso
from scenario_book import NO_FENCE, expect, fleet, restart, scenario

S = tuple[Capture, dict[str, Any]]
DBE = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
MISSING_KEYS = ("RuntimeError: Error(s) in loading state_dict for GPT:\n\tMissing key(s) in state_dict: "
                "\"layers.31.attention.wqkv.weight\", \"layers.31.feed_forward.w1.weight\".")
TRUNCATED = "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer"


def _ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def _restarts(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in out["commands"] if c["type"] == "restart_job"]


def _quarantine(node: str, gpu: int) -> dict[str, Any]:
    return {"type": "quarantine_gpu", "node": node, "gpu": gpu}


# --- a second fault inside an open incident -------------------------------------------------------------------
def _two_faults(second_node: str, second_at: float, late: float = 0.0) -> Capture:
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 1, 79).crash(901, "pt", rank=1)
    cap.xid(second_at, second_node, 6, 48)
    if late:
        cap.late(late)
    cap.metric(second_at + 0.5, second_node, 6, ecc_dbe_volatile=1, ecc_dbe_aggregate=1)
    return cap


def _second(node: str, category: str = "gpu_memory_fault", gpus: list[int] | None = None) -> dict[str, Any]:
    """The second root cause's own incident (one per job and root cause; one restart serves both)."""
    return {"job": "pt", "category": category, "culprit_node": node, **({"culprit_gpus": gpus} if gpus else {})}


def _two_incidents_both_fenced(second_node: str) -> dict[str, Any]:
    return expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [1]},
                   _second(second_node, gpus=[6])],
        must=[_quarantine("n1", 1), _quarantine(second_node, 6), {"type": "open_ticket", "node": second_node},
              restart("pt", excludes_gpu=["n1", 1]), restart("pt", excludes_gpu=[second_node, 6])],
        must_not=[{"type": "cordon_node"}],
        order=[[_quarantine("n1", 1), restart("pt")], [_quarantine(second_node, 6), restart("pt")]],
        unique=[restart("pt"), _quarantine(second_node, 6)],
        _check=_fault_recorded(second_node),
    )


def _fault_recorded(node: str) -> Any:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        inc = next(i for i in out["incidents"] if i["job"] == "pt")
        faults = [f for f in inc.get("faults", []) if f["category"] == "gpu_memory_fault"]
        uuid = cap.gpu_uuid(node, 6)
        if not faults or uuid not in faults[0]["culprit"]["gpus"]:
            return [f"the incident does not record the second fault on {node} GPU 6: {inc.get('faults')}"]
        return []
    return check


@scenario
def second_fault_on_another_node() -> S:
    """GPU 1 of n1 falls off the bus; 18 s later, before the restart, GPU 6 of n2 reports a double-bit ECC
    error. Two root causes, two incidents; both are fenced before the one restart, which excludes them both."""
    return _two_faults("n2", 918), _two_incidents_both_fenced("n2")


@scenario
def second_fault_on_the_same_node() -> S:
    return _two_faults("n1", 918), _two_incidents_both_fenced("n1")


@scenario
def second_fault_after_the_restart_went_out() -> S:
    """The second XID comes after the restart was issued (the job has not started again): fence it, and a
    second restart excludes both."""
    cap = _two_faults("n2", 950)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [1]},
                   _second("n2", gpus=[6])],
        must=[_quarantine("n1", 1), _quarantine("n2", 6),
              restart("pt", excludes_gpu=["n1", 1]), restart("pt", excludes_gpu=["n2", 6])],
        order=[[_quarantine("n2", 6), restart("pt", excludes_gpu=["n2", 6])]],
        at_most=[[restart("pt"), 2]],
        _check=_fault_recorded("n2"),
    )


@scenario
def second_fault_arrives_late() -> S:
    """The second XID happened at 918 but its line arrives a minute late, after the first restart."""
    cap = _two_faults("n2", 918, late=60)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [1]},
                   _second("n2", gpus=[6])],
        must=[_quarantine("n1", 1), _quarantine("n2", 6), restart("pt", excludes_gpu=["n2", 6])],
        order=[[_quarantine("n2", 6), restart("pt", excludes_gpu=["n2", 6])]],
        at_most=[[restart("pt"), 2]],
    )


@scenario
def second_fault_stronger_takes_the_incident_over() -> S:
    """A double-bit error on n1 GPU 1 first, then GPU 6 of n2 falls off the bus: the stronger cause leads the
    incident, the first is an incident of its own cause; both fenced, one restart excluding both."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 1, 48).crash(901, "pt", rank=1, error=DBE)
    cap.xid(912, "n2", 6, 79)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n2", "culprit_gpus": [6]},
                   _second("n1", gpus=[1])],
        must=[_quarantine("n1", 1), _quarantine("n2", 6), restart("pt", excludes_gpu=["n1", 1]),
              restart("pt", excludes_gpu=["n2", 6])],
        order=[[_quarantine("n1", 1), restart("pt")], [_quarantine("n2", 6), restart("pt")]],
        unique=[restart("pt")],
    )


@scenario
def second_fault_after_the_job_runs_again() -> S:
    """The job runs again without n1 GPU 1; twenty minutes later GPU 6 of n2 fails: a new root cause, an
    incident of its own, and the restart still excludes the first GPU."""
    cap = fleet("n1", "n2", "n3", duration=2600).job("pt", ["n1", "n2"], elastic=(8, 16))
    cap.xid(900, "n1", 1, 79).crash(901, "pt", rank=1)
    cap.job("pt", {"n1": [0, 2, 3, 4, 5, 6, 7], "n2": list(range(8))}, at=1000, elastic=(8, 16))
    cap.xid(2200, "n2", 6, 48).crash(2201, "pt", rank=13, error=DBE)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [1]},
                   {"job": "pt", "category": "gpu_memory_fault", "culprit_node": "n2", "culprit_gpus": [6]}],
        must=[_quarantine("n1", 1), _quarantine("n2", 6),
              restart("pt", excludes_gpu=["n2", 6], checkpoint_step=cap.checkpoint_step("pt", 2200))],
        order=[[_quarantine("n2", 6), restart("pt", excludes_gpu=["n2", 6])]],
        _check=_second_restart_excludes_both,
    )


def _second_restart_excludes_both(out: dict[str, Any], cap: Capture) -> list[str]:
    rs = _restarts(out)
    want = {cap.gpu_uuid("n1", 1), cap.gpu_uuid("n2", 6)}
    if len(rs) != 2 or not want <= set(rs[1]["params"]["exclude"]["gpus"]):
        return [f"the second restart should exclude both GPUs: {[r['params']['exclude'] for r in rs]}"]
    return []


# --- a checkpoint that does not load ------------------------------------------------------------------------------
def _newest_and_before(cap: Capture, t: float) -> tuple[int, int]:
    """The newest checkpoint saved before ``t`` and the one before it (steps)."""
    newest = cap.checkpoint_before("pt", t)
    assert newest is not None
    before = cap.checkpoint_before("pt", newest[0] - 0.001)
    assert before is not None
    return newest[1], before[1]


def _load_fails(error: str | None, told: bool = False, announce: bool = True, twice: bool = False) -> Capture:
    """GPU 3 of n1 falls off at 950; the restart from the newest checkpoint is launched at 1050 and dies
    before its first step."""
    cap = fleet("n1", "n2", "n3", duration=2400).job("pt", ["n1", "n2"], interval=300)
    cap.xid(950, "n1", 3, 79).crash(951, "pt", rank=3)
    newest, before = _newest_and_before(cap, 950)
    cap.job("pt", ["n2", "n3"], at=1050, train=False)
    if announce:
        cap.checkpoint_loaded(1055, "pt", newest)
    if told:
        cap.checkpoint_failed(1058, "pt", newest, error="RuntimeError: unexpected EOF, expected 2097152 more bytes")
    cap.crash(1060, "pt", rank=0, error=error)
    if twice:
        cap.job("pt", ["n2", "n3"], at=1150, train=False)
        cap.checkpoint_loaded(1155, "pt", before)
        cap.crash(1160, "pt", rank=0, error=error)
    return cap


def _load_expect(cap: Capture) -> dict[str, Any]:
    newest, before = _newest_and_before(cap, 950)
    return expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]}],
        must=[restart("pt", checkpoint_step=newest, excludes_gpu=["n1", 3]),
              restart("pt", checkpoint_step=before, excludes_gpu=["n1", 3])],
        order=[[restart("pt", checkpoint_step=newest), restart("pt", checkpoint_step=before)]],
        unique=[{"type": "quarantine_gpu"}, restart("pt", checkpoint_step=newest)],
        must_not=[{"type": "cordon_node"}, {"type": "quarantine_gpu", "node": "n2"},
                  {"type": "quarantine_gpu", "node": "n3"}],
        _check=_load_cost(newest),
    )


def _load_cost(step: int | None) -> Any:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        rs = _restarts(out)
        if len(rs) < 2:
            return [f"want a second restart, got {len(rs)}"]
        skipped = rs[1]["params"].get("checkpoint_skipped") or []
        bad = [] if any(k["step"] == step and "load" in k["why"] for k in skipped) else [
            f"the second restart does not say step {step} failed to load: {rs[1]['params']}"]
        inc = next(i for i in out["incidents"] if i["job"] == "pt")
        if "costs" not in inc["summary"]:
            bad.append(f"the incident does not say what the load failure cost: {inc['summary']}")
        return bad
    return check


@scenario
def checkpoint_fails_to_load_missing_keys() -> S:
    """The relaunched ranks log checkpoint_loaded, then die on missing state_dict keys: that checkpoint is no
    restart point; the next restart uses the one before it; nothing more is fenced."""
    cap = _load_fails(MISSING_KEYS)
    return cap, _load_expect(cap)


@scenario
def checkpoint_fails_to_load_truncated_shard_unannounced() -> S:
    """A truncated shard, and the trainer never said what it loaded: the restart said so."""
    cap = _load_fails(TRUNCATED, announce=False)
    return cap, _load_expect(cap)


@scenario
def checkpoint_load_failure_told_by_the_trainer() -> S:
    """The trainer reports the load failure as checkpoint_failed of the step it loads; the ranks then exit
    without an error file."""
    cap = _load_fails(None, told=True)
    return cap, _load_expect(cap)


def _stopped_for_a_person(out: dict[str, Any], cap: Capture) -> list[str]:
    inc = next(i for i in out["incidents"] if i["job"] == "pt")
    bad = [] if inc["state"] == "escalated" else [f"want escalated after two load failures, got {inc['state']}"]
    if not any("load" in str(c["params"].get("message")) for c in out["commands"] if c["type"] == "notify"):
        bad.append("no notify says the checkpoints do not load")
    return bad


@scenario
def checkpoint_load_fails_twice_stops_for_a_person() -> S:
    """The restart from the checkpoint before fails to load too: two in a row, a person decides."""
    cap = _load_fails(MISSING_KEYS, twice=True)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [3]}],
        must=[{"type": "notify", "job": "pt"}],
        at_most=[[restart("pt"), 2]],
        unique=[{"type": "quarantine_gpu"}],
        _check=_stopped_for_a_person,
    )


@scenario
def checkpoint_fails_to_load_on_the_second_restart() -> S:
    """The first restart loads fine and the job trains on; a second GPU fails later, and the checkpoint its
    restart names (saved by the recovered run) does not load: the one before it, of the same lineage."""
    cap = fleet("n1", "n2", "n3", duration=3000).job("pt", ["n1", "n2"], interval=300)
    cap.xid(950, "n1", 3, 79).crash(951, "pt", rank=3)
    cap.job("pt", ["n2", "n3"], at=1050, interval=300)
    cap.xid(1900, "n2", 5, 79).crash(1901, "pt", rank=5)
    newest, before = _newest_and_before(cap, 1900)
    cap.job("pt", {"n3": list(range(8)), "n1": [0, 1, 2, 4, 5, 6, 7]}, at=2000, train=False)
    cap.checkpoint_loaded(2005, "pt", newest or 0).crash(2010, "pt", rank=0, error=MISSING_KEYS)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus"}],
        must=[restart("pt", checkpoint_step=newest, excludes_gpu=["n2", 5]),
              restart("pt", checkpoint_step=before, excludes_gpu=["n2", 5])],
        order=[[restart("pt", checkpoint_step=newest), restart("pt", checkpoint_step=before)]],
        must_not=[{"type": "cordon_node"}, {"type": "quarantine_gpu", "node": "n3"}],
    )


@scenario
def crash_before_the_first_step_is_not_a_load_failure() -> S:
    """The relaunched run dies before its first step of a plain bug: the checkpoint is not blamed."""
    cap = _load_fails("ValueError: expected a batch of 16")
    newest, before = _newest_and_before(cap, 950)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus"}, {"job": "pt", "category": "software_crash"}],
        must=[restart("pt", checkpoint_step=newest)],
        must_not=[restart("pt", checkpoint_step=before)],
    )


# --- a recovery that merely runs ------------------------------------------------------------------------------------
def _recovered(speeds: list[tuple[float, float]], duration: float = 3600) -> Capture:
    cap = fleet("n1", "n2", "n3", duration=duration).job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 1, 79).crash(901, "pt", rank=1)
    cap.job("pt", ["n2", "n3"], at=1000)
    for at, factor in speeds:
        cap.slow(at, "pt", factor)
    return cap


def _state(want: str, notify_words: str | None, since: float | None = None) -> Any:
    def check(out: dict[str, Any], cap: Capture) -> list[str]:
        inc = next(i for i in out["incidents"] if i["job"] == "pt")
        bad = [] if inc["state"] == want else [f"want {want}, got {inc['state']} ({inc['summary']})"]
        notes = [str(c["params"].get("message")) for c in out["commands"] if c["type"] == "notify"]
        if notify_words is not None and not any(notify_words in m for m in notes):
            bad.append(f"no notify names the shortfall ({notify_words!r}): {notes}")
        if notify_words is None and any("samples/s" in m for m in notes):
            bad.append(f"a shortfall was reported for a recovery that caught up: {notes}")
        if since is not None and inc.get("updated_at") and _ts(inc["updated_at"]) < T0 + timedelta(seconds=since):
            bad.append(f"resolved at {inc['updated_at']}, before it held its throughput long enough")
        return bad
    return check


@scenario
def slow_recovery_that_never_catches_up() -> S:
    """After the restart the job steps at half its pre-failure throughput for forty minutes: not recovered;
    escalated with a notify naming the shortfall."""
    cap = _recovered([(1000, 0.5)])
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [1]}],
        must=[{"type": "notify", "job": "pt"}, restart("pt", excludes_gpu=["n1", 1])],
        unique=[restart("pt")],
        _check=_state("escalated", "samples/s"),
    )


@scenario
def slow_recovery_that_catches_up() -> S:
    """Half speed for the first five minutes after the restart (caches warming), then the usual: resolved, once
    it has held the usual throughput."""
    cap = _recovered([(1000, 0.5), (1300, 1.0)])
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [1]}],
        must=[restart("pt", excludes_gpu=["n1", 1])],
        unique=[restart("pt")],
        _check=_state("resolved", None, since=1300 + 300),
    )


@scenario
def recovery_at_full_speed_resolves_once_it_holds() -> S:
    cap = _recovered([])
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [1]}],
        must=[restart("pt", excludes_gpu=["n1", 1])],
        must_not=NO_FENCE[1:],
        _check=_state("resolved", None, since=1000 + 300),
    )


@scenario
def elastic_recovery_on_half_the_gpus_is_judged_by_its_size() -> S:
    """An elastic job loses a node and comes back on the other one at half its throughput: that is all its
    GPUs can do, so it is recovered (held to half the baseline), not a shortfall."""
    cap = fleet("n1", "n2", "n3", duration=3000).job("el", ["n1", "n2"], elastic=(8, 16))
    cap.sel(899, "n2", "memory").silence(900, "n2").bmc_power(930, "n2")
    cap.job("el", ["n1"], at=1100, elastic=(8, 16))
    cap.slow(1100, "el", 0.5)
    return cap, expect(
        incidents=[{"job": "el", "category": "node_hardware_fault", "culprit_node": "n2"}],
        must=[restart("el", excludes_node="n2", gpus_min=8, gpus_max=8)],
        _check=_resolved_el,
    )


def _resolved_el(out: dict[str, Any], cap: Capture) -> list[str]:
    inc = next(i for i in out["incidents"] if i["job"] == "el")
    return [] if inc["state"] == "resolved" else [f"want resolved, got {inc['state']}: {inc['summary']}"]


@scenario
def second_fault_a_node_dies_before_the_restart() -> S:
    """GPU 1 of n1 falls off; ten seconds later n2 logs a memory SEL and goes quiet: the node's fault leads the
    job's incident, the GPU is an incident of its own cause; n2 cordoned, n1 GPU 1 quarantined, one restart avoiding both."""
    cap = fleet("n1", "n2", "n3").job("pt", ["n1", "n2"])
    cap.xid(900, "n1", 1, 79).crash(901, "pt", rank=1)
    cap.sel(909, "n2", "memory").silence(910, "n2").bmc_power(930, "n2")
    return cap, expect(
        incidents=[{"job": "pt", "category": "node_hardware_fault", "culprit_node": "n2"},
                   _second("n1", "gpu_off_bus", [1])],
        must=[_quarantine("n1", 1), {"type": "cordon_node", "node": "n2"}, restart("pt", excludes_node="n2"),
              restart("pt", excludes_gpu=["n1", 1])],
        order=[[{"type": "cordon_node", "node": "n2"}, restart("pt")], [_quarantine("n1", 1), restart("pt")]],
        unique=[restart("pt")],
    )


@scenario
def second_fault_skewed_and_resent() -> S:
    """The two XIDs of second_fault_on_another_node with the kernel's clock 25 s behind, each line sent twice."""
    cap = _two_faults("n2", 918)
    cap.skew("kernel", -25)
    cap.where(lambda d: d["source"] == "kernel").dup(4)
    return cap, _two_incidents_both_fenced("n2")


@scenario
def checkpoint_load_failure_with_resent_lines() -> S:
    """The load failure's exit and the scheduler's lines arrive twice: still one load failure, one fallback."""
    cap = _load_fails(MISSING_KEYS)
    cap.where(lambda d: d["source"] in ("torchelastic", "scheduler")).dup(7)
    return cap, _load_expect(cap)


@scenario
def slow_recovery_with_the_trainers_clock_ahead() -> S:
    """The trainer's clock runs 20 s ahead; the recovery still runs at half speed: escalated all the same."""
    cap = _recovered([(1000, 0.5)])
    cap.skew("trainer", 20)
    return cap, expect(
        incidents=[{"job": "pt", "category": "gpu_off_bus", "culprit_node": "n1", "culprit_gpus": [1]}],
        must=[{"type": "notify", "job": "pt"}, restart("pt", excludes_gpu=["n1", 1])],
        unique=[restart("pt")],
        _check=_state("escalated", "samples/s"),
    )


@scenario
def software_crash_a_quiet_day_later_restarts_on_its_own() -> S:
    """A bug kills the job, the automatic restart works, and the job runs seven hours before the next software
    crash. A crash loop waits for a person (``software_crash_loop_needs_approval``); a crash outside
    ``restarts.unknown_cause_window_s`` (6 h) of the job's last restart of an unknown cause is the job's life:
    it restarts on its own again."""
    cap = fleet("n1", "n2", duration=8 * 3600, nvml=300.0, hb=60.0).job("pt", ["n1"])
    cap.crash(700, "pt", rank=0, error="ValueError: shapes (16, 4096) and (8192,) not aligned")
    cap.job("pt", ["n1"], at=1000)  # after the restart (the gate waits for the GPUs' 5-minute samples)
    cap.crash(1000 + 7 * 3600, "pt", rank=3, error="KeyError: 'labels'")
    return cap, expect(
        no_other_incidents=False,
        must=[restart("pt", requires_approval=False), {"type": "notify", "job": "pt"}],
        must_not=NO_FENCE + [restart("pt", requires_approval=True)],
        at_most=[[restart("pt"), 2]],
        must_any=[[{"type": "restart_job", "job": "pt", "requires_approval": False}]],
    )


@scenario
def scheduler_relaunch_before_the_restart_is_verified_not_restarted_again() -> S:
    """The scheduler requeues the crashed job on its own (Slurm ``--requeue``) a minute later, before the restart
    gate has heard from the GPUs: faultline does not restart a run that is already back on healthy hardware (it
    would kill it); it verifies that run, and the job's next failure, an hour later, is a new incident that is
    restarted."""
    cap = fleet("n1", "n2", duration=5400, nvml=300.0, hb=60.0).job("pt", ["n1"])
    cap.crash(700, "pt", rank=0, error="ValueError: shapes (16, 4096) and (8192,) not aligned")
    cap.job("pt", ["n1"], at=760)
    cap.crash(760 + 3600, "pt", rank=3, error="KeyError: 'labels'")
    second = datetime.fromisoformat(at_iso(760 + 3600).replace("Z", "+00:00"))

    def check(out: dict[str, Any], _cap: Capture) -> list[str]:
        restarts = [c for c in out["commands"] if c["type"] == "restart_job"]
        bad = [f"restart at {c['issued_at']}: the run the scheduler started at 760 s was running" for c in restarts
               if datetime.fromisoformat(c["issued_at"].replace("Z", "+00:00")) < second]
        if not any("no restart; verifying its progress; progressing again" in i["summary"] for i in out["incidents"]):
            bad.append("the scheduler's run should be verified, and resolved, before the next failure")
        return bad

    return cap, expect(
        no_other_incidents=False,
        must=[restart("pt", requires_approval=False), {"type": "notify", "job": "pt"}],
        must_not=NO_FENCE,
        at_most=[[{"type": "restart_job", "job": "pt"}, 1]],
        _check=check,
    )
