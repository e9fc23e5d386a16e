"""The fleet soak's finds, each kept as a plain case of its own (issue #25).

Each test here is one capture the soak (:mod:`test_fleet_invariants`, ``-m slow``) or the default run found
breaking an invariant, shrunk, with a comment saying what the engine (or the oracle) did and the rule that
now decides it. Each failed on the engine or oracle it was found on; they run in the default suite.
"""

from __future__ import annotations

import json

from builder import at_iso
from fleet import FaultPlan, FleetPlan, JobPlan, build
from test_fleet_invariants import HOLDING, _keeps, violations

from faultline.outcome import decide_offline

_J = JobPlan(nodes=1, half=False, elastic=None, every=10.0, interval=300.0, local=False, resume=None)


# The soak's find (FLEET_SEED=20261205, 8,000 examples), a misreading of the oracle's: a DBE on GPU 1 opens job0's
# memory-fault incident; XIDs 74 and 79 on GPU 0 join it as a second culprit (fenced for gpu_off_bus, its own cause)
# and the incident moves on to gpu_off_bus (class 8); after the restart, XID 48 on the idle, fenced GPU 0 opens a
# job-less gpu_memory_fault incident. The oracle took the fence's cause for the incident's category when it fenced
# (a memory fault) and called that incident a repeat; the fence was placed for being off the bus, and another cause
# on fenced hardware is a new incident (class 2 covers the cause it was fenced for). Kept as a plain case.
SOAK_FIND = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(
    JobPlan(nodes=1, half=False, elastic=None, every=10.0, interval=300.0, local=False, resume=None),), faults=(
    FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=2, late=None, dup=False),
    FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='xid', at=0.75, job=0, pick=0, code=1, late=None, dup=False),
    FaultPlan(kind='dbe', at=0.25, job=0, pick=1, code=0, late=None, dup=False)), skew=None)


def test_the_soaks_find_another_cause_on_a_second_culprits_fence_is_its_own_incident() -> None:
    assert violations(SOAK_FIND, HOLDING) == []


# The 10,000-example soak's find (FLEET_SEED=20261207): XID 48 fences GPU 0 of job0 (job0 is cancelled at that
# moment, so a job-less incident fences it), the scheduler starts job0 again on it (a breach) and XID 79 on GPU 1
# follows. The fence's incident took the run's failure (belonging.takes_breach), XID 79 took that incident over as
# the stronger cause, and the memory fault it displaced was published as a second gpu_memory_fault incident of job0
# for the GPU the incident itself fences (class 2): a second culprit on its own incident's fence always counted as a
# new root cause. Fixed in belonging.second_fault_owner: hardware fenced for that cause before the job's run started
# there is the fence's, also when the fence is the failure's own incident.
SOAK_FIND_BREACH = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(
    JobPlan(nodes=1, half=False, elastic=None, every=10.0, interval=300.0, local=False, resume=None),), faults=(
    FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=1, late=None, dup=False),
    FaultPlan(kind='xid', at=0.75, job=0, pick=1, code=0, late=None, dup=False),
    FaultPlan(kind='breach', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='cancel', at=0.5, job=0, pick=0, code=0, late=None, dup=False)), skew=None)


def test_the_soaks_find_a_breach_and_a_cancel_then_a_repeat_belongs_to_the_fence() -> None:
    _keeps(SOAK_FIND_BREACH, "explained")


# The derandomised fleet's find on the cell clock (#26), no skew at all: n01's agent stops at 03:01:01, and with the
# scheduler and the dead agent still counted live for two rounds of at least four voters' lines, n02 alone was
# "outvoted" by its own dead neighbour: the clock froze at 03:01:01, n02's XID 79 was placed there, n02 was judged
# silent and cordoned, and the restart ran before n01's SEL was fenced. A voter now dies once another has spoken
# three times since it last did (correlators/clock.py).
SURVIVOR = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=300.0, jobs=(
    JobPlan(nodes=1, half=False, elastic=None, every=10.0, interval=300.0, local=False, resume=None),), faults=(
    FaultPlan(kind='xid_idle', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='xid_idle', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='node_down', at=0.125, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='ckpt_crash', at=0.5, job=0, pick=0, code=0, late=None, dup=False)), skew=None)


def test_a_cell_whose_other_node_died_follows_the_survivors_clock() -> None:
    assert violations(SURVIVOR, HOLDING) == []


# The soaks' finds on the cell clock, every trainer 45 s ahead. FLEET_SEED=20261209 (4,000 examples): job0 saves step
# 40 at 03:06:14.0, 0.4 s before the XID 79 that fails it, stamped 03:06:59 and arriving before the XID. The engine
# restarted from it, which is safe; the oracle read the stamp and called it a save after the failure. It now judges
# a save's safety by when it happened (_Oracle.true_saved), and still asks only for the newest save whose stamp is
# before the failure: FLEET_SEED=20261210 (4,000): job2's step 480, saved 11.8 s before its XID and stamped 33 s
# after it, is not demanded of an engine that cannot know the trainer's clock is wrong (45 s is within the reach at
# a 120 s heartbeat, so the cell does not screen it), and the restart from 360 stands.
_J90 = JobPlan(nodes=1, half=False, elastic=None, every=90.0, interval=300.0, local=False, resume=None)
TRAINER_AHEAD = FleetPlan(nodes=2, gpus=4, rack=4, duration=1200.0, heartbeat=60.0, nvml=120.0, jobs=(
    _J90, _J, _J), faults=(FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),) * 3 + (
    FaultPlan(kind='xid', at=0.312, job=0, pick=0, code=0, late=None, dup=False),), skew=('trainer', 45.0))


def test_a_save_of_a_trainer_ahead_of_the_cell_is_timed_when_it_happened() -> None:
    assert violations(TRAINER_AHEAD, HOLDING) == []


_J120 = JobPlan(nodes=1, half=False, elastic=None, every=10.0, interval=120.0, local=False, resume=None)
TRAINER_AHEAD_NEWER = FleetPlan(nodes=12, gpus=4, rack=4, duration=900.0, heartbeat=120.0, nvml=120.0, jobs=(
    _J, _J, _J120), faults=(FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),) * 3 + (
    FaultPlan(kind='xid', at=0.562, job=2, pick=0, code=0, late=None, dup=False),), skew=('trainer', 45.0))


def test_a_save_stamped_after_the_failure_is_not_demanded_of_the_restart() -> None:
    assert violations(TRAINER_AHEAD_NEWER, HOLDING) == []


# The soak's find with a trainer behind the cell (FLEET_SEED=20261213, 21,000 examples): job0 steps to 50 0.4 s before
# the XID 79 that kills it, and the builder then reported step 50 saved 4 s later -- after torchelastic had said rank 0
# exited. Stamped 20 s behind, that impossible save looked 16 s older than the failure and the engine restarted from
# it. A rank that is gone reports nothing: the builder now reports a save only if its write ends before its run does
# (builder.Capture._steps), and the engine restarts from step 10, the checkpoint the run loaded.
_J30 = JobPlan(nodes=1, half=False, elastic=None, every=30.0, interval=120.0, local=False, resume=10)
TRAINER_BEHIND = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(
    _J30, JobPlan(nodes=1, half=False, elastic=None, every=10.0, interval=300.0, local=False, resume=None)), faults=(
    FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='xid', at=0.234, job=0, pick=0, code=0, late=None, dup=False)), skew=('trainer', -20.0))


def test_a_trainer_behind_the_cell_never_reports_a_save_its_dead_rank_could_not_finish() -> None:
    assert violations(TRAINER_BEHIND, HOLDING) == []


# The soak's find of a zombie that was a dead node (FLEET_SEED=20261214, 10,000 examples): n01 logs a memory UE and
# falls silent during job0's checkpoint write, which fails 2 s later with EIO; no rank reports a crash, the other
# ranks' collective timeout names n01's as the ones that never arrived. At the restart the collectives' pin cordoned
# n01 first, so the last look for nodes whose own parts failed (node_parts.failed_parts) skipped it as fenced: the
# incident kept only the timeout, nothing explained the write, and it paged storage as a checkpoint_failure of its own.
# The restart now judges the nodes' own parts before the pin: node_hardware_fault, repaired, the write its evidence.
_J300 = JobPlan(nodes=1, half=False, elastic=None, every=10.0, interval=300.0, local=False, resume=None)
DEAD_ZOMBIE = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(
    JobPlan(nodes=2, half=False, elastic=None, every=10.0, interval=300.0, local=False, resume=None), _J300, _J300),
    faults=(FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
            FaultPlan(kind='zombie', at=0.25, job=0, pick=0, code=0, late=None, dup=False),
            FaultPlan(kind='ckpt_crash', at=0.125, job=0, pick=0, code=0, late=None, dup=False)), skew=None)


def test_a_zombie_whose_node_logged_its_own_fault_is_that_fault_and_explains_the_write() -> None:
    assert violations(DEAD_ZOMBIE, HOLDING) == []


# The soak's find of a silent node dated too early (FLEET_SEED=20261213, 10,000 examples, trainer 20 s behind): n02
# heartbeats every 120 s, last at 03:04:04.7; job1's rank on n02 reports steps until 03:05:30 and step 240 saved at
# 03:04:14; n02 logs a memory UE at 03:05:36.5 and falls silent. The engine dated the failure from the agent's last
# heartbeat, so unskewed it passed over step 240 (saved "after the failure") and restarted from 120; with the trainer
# behind, 240 looked saved before and was taken -- right in truth, against the engine's own date. A silent node's
# failure now begins when it was last heard by any of its sources (LivenessRules._last_heard): 240 either way.
# FLEET_SEED=20261216 (10,000) then found the trainer behind being that source: its last step stamped 03:15:10 (true
# 03:15:30) dated n01's failure before the save of step 900 (true 03:15:14). Not the BMC's SEL to date it: out of
# band, it logs whether the host runs or not; the oracle's reading of a clock behind is what changed
# (NODE_DOWN_BEHIND below), and SEL_AFTER_SAVE stays a plain case.
_J10 = JobPlan(nodes=1, half=False, elastic=None, every=10.0, interval=120.0, local=False, resume=None)
_X50 = FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False)
SILENT_AFTER_SAVE = FleetPlan(nodes=12, gpus=4, rack=4, duration=900.0, heartbeat=120.0, nvml=120.0, jobs=(
    _J300, _J10, _J300), faults=(_X50, _X50, _X50, FaultPlan(kind='sel', at=0.375, job=1, pick=0, code=0, late=None,
                                                             dup=False)), skew=('trainer', -20.0))


def test_a_silent_node_fails_when_it_was_last_heard_by_any_source() -> None:
    assert violations(SILENT_AFTER_SAVE, HOLDING) == []


_X50J1 = FaultPlan(kind='xid', at=0.5, job=1, pick=0, code=0, late=None, dup=False)
SEL_AFTER_SAVE = FleetPlan(nodes=2, gpus=4, rack=4, duration=1200.0, heartbeat=60.0, nvml=120.0, jobs=(
    _J300, _J300, _J300), faults=(_X50J1, _X50J1, FaultPlan(kind='sel', at=0.781, job=0, pick=0, code=0, late=None,
                                                            dup=False)), skew=('trainer', -20.0))


def test_a_silent_node_whose_bmc_logged_its_fault_ran_until_then() -> None:
    assert violations(SEL_AFTER_SAVE, HOLDING) == []


# The soak's find on the oracle (FLEET_SEED=20261221, 10,000 examples, trainer 20 s behind): n01 goes down at
# 03:02:30 with no SEL, and the engine dates the failure from the last step job1's trainer reported, stamped 03:02:10.
# It restarts from step 120, saved at 03:02:14 in truth -- safe, 16 s before n01 died. The oracle compared that true
# time with the engine's date, which the trainer's clock made early where nothing could tell: it now takes the
# failure as no earlier than when a step stamped before its date really happened (_checkpoint_violations).
NODE_DOWN_BEHIND = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(
    _J300, _J10, _J300), faults=(FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
                                 FaultPlan(kind='node_down', at=0.25, job=1, pick=0, code=0, late=None, dup=False)),
    skew=('trainer', -20.0))


def test_a_save_is_safe_while_the_job_still_stepped_whatever_the_trainer_clock_said() -> None:
    assert violations(NODE_DOWN_BEHIND, HOLDING) == []


# The soak's find that stays open (FLEET_SEED=20261231, 10,000 examples, trainer 20 s behind): XID 79 on a GPU of
# job0 at 03:05:09.6 (xid_idle found no idle GPU) while job0 goes on stepping; its step 100 ends 0.4 s after the XID
# and is saved 4 s later, stamped 03:04:54. The engine restarts from it: by its stamp, before the failure. Nothing in
# one line tells a clock 20 s behind from a save delivered 20 s late, but the arrival order does: the save was
# reported after the XID had arrived, as every line of that trainer arrives 20 s after its stamp. The rule to build:
# a trainer's save is before a failure by its stamp plus what its source is known to lag the cell's clock.
XID_BEFORE_LATE_SAVE = FleetPlan(nodes=2, gpus=4, rack=4, duration=900.0, heartbeat=60.0, nvml=120.0, jobs=(
    JobPlan(nodes=1, half=False, elastic=None, every=30.0, interval=300.0, local=False, resume=None), _J300), faults=(
    FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='xid_idle', at=0.344, job=0, pick=0, code=0, late=None, dup=False)), skew=('trainer', -20.0))


def test_a_save_reported_after_the_failure_arrived_is_judged_by_its_source_s_lag() -> None:
    assert violations(XID_BEFORE_LATE_SAVE, HOLDING) == []


# The soak's find on the lag rule itself (FLEET_SEED=20261301, every NVML 45 s ahead, within the reach of 60 s
# heartbeats): NVML moved the cell's clock 45 s past every other source, so a rule that measured lag against the
# clock took every trainer in step for a lagging one and dated job2's step 200, saved well before its XID, by the
# clock it arrived at: the restart went back to step 100. Lag is measured against the voters' time (the agents').
NVML_AHEAD_OF_THE_VOTE = FleetPlan(nodes=3, gpus=4, rack=4, duration=900.0, heartbeat=60.0, nvml=120.0, jobs=(
    _J300, _J300, JobPlan(nodes=1, half=False, elastic=None, every=30.0, interval=300.0, local=False, resume=None)),
    faults=(FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
            FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
            FaultPlan(kind='xid', at=0.688, job=2, pick=0, code=0, late=None, dup=False)), skew=('nvml', 45.0))


def test_a_source_ahead_within_the_reach_makes_no_trainer_in_step_a_lagging_one() -> None:
    assert violations(NVML_AHEAD_OF_THE_VOTE, HOLDING) == []


# The soak's find (FLEET_SEED=20261301, on the engine before the two-crashes fix): jobs on the two halves of n01. A
# power supply fails at 150 s (its domain's GPUs off the bus, job1 fails, n01 cordoned) and job0 runs on; at 300 s
# n01 logs a memory UE and falls silent, and job0's write fails (EIO). The held write gave up waiting on n01 because
# it was fenced, and paged storage beside the node's incident; and the silence was called a power supply fault, an
# older SEL than the memory UE that came just before it. A job still running on a fenced node is judged by that
# node's silence (HeldWrites._waiting), and a silent node died of its newest hardware fault (silence_category).
_JHALF = JobPlan(nodes=1, half=True, elastic=None, every=10.0, interval=300.0, local=False, resume=None)
PSU_THEN_CRASH = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(_JHALF, _JHALF),
                           faults=(FaultPlan(kind='psu', at=0.25, job=1, pick=0, code=0, late=None, dup=False),
                                   FaultPlan(kind='ckpt_crash', at=0.5, job=0, pick=0, code=0, late=None, dup=False)),
                           skew=None)


def test_a_write_that_failed_on_a_fenced_node_still_running_a_job_is_that_node_s_fault() -> None:
    assert violations(PSU_THEN_CRASH, HOLDING) == []


# The same soak, on the engine with the fix above: the crash first. n01 logs a memory UE at 74.5 s and falls silent;
# job0's write fails (EIO) 2.5 s later and is held for n01's verdict. At 150 s n01's power supply fails too (the
# generator still logs the XIDs and job1's crash of a node already dead: in-band lines a dead node would not send),
# and n01 is cordoned for that. The held write took the cordon for the verdict on its memory fault and paged storage
# beside job0's node_hardware_fault. A fence for another cause judges nothing of the node's own parts
# (node_parts.unjudged_fault waits for a node_hardware_fault fence).
CRASH_THEN_PSU = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(_JHALF, _JHALF),
                           faults=(FaultPlan(kind='psu', at=0.25, job=1, pick=0, code=0, late=None, dup=False),
                                   FaultPlan(kind='ckpt_crash', at=0.125, job=0, pick=0, code=0, late=None, dup=False)),
                           skew=None)


def test_a_write_beside_a_memory_fault_waits_through_a_cordon_for_the_power_supply() -> None:
    assert violations(CRASH_THEN_PSU, HOLDING) == []


# The soak's find (FLEET_SEED=20261233, 10,000 examples, no skew): two checkpoint-write crashes on n01, at 74 s and
# 226 s. Two things were wrong. The generator built faults in the plan's order, so the later crash was built while
# job0 still ran and its rank reported a failed write at 03:03:47, though the earlier crash had stopped the job at
# 03:01:14: a job that is stopped writes nothing. Faults are now built in time order and a write fails only in a
# running job (fleet.build, fleet._running). The sane capture still paged storage: the BMC's view of n01 kept only its
# newest fault, so the second UE (03:03:45) hid the first, the failed write (03:01:16, EIO, 2.5 s after the first UE)
# no longer waited for n01's verdict and became a checkpoint_failure of its own, and the restart dated n01's fault at
# the second UE. The view now keeps each fault of the node's own parts (BmcView.node_faults): the write waits for the
# fault beside it (node_parts.unjudged_fault), the restart blames the first fault in the failure's window
# (node_parts.failed_parts), and the write is that node_hardware_fault's evidence.
TWO_CKPT_CRASHES = FleetPlan(nodes=2, gpus=4, rack=4, duration=1200.0, heartbeat=60.0, nvml=120.0, jobs=(_J300,),
                             faults=(FaultPlan(kind='ckpt_crash', at=0.188, job=0, pick=0, code=0, late=None, dup=False),
                                     FaultPlan(kind='ckpt_crash', at=0.062, job=0, pick=0, code=0, late=None,
                                               dup=False)), skew=None)


def test_two_crashes_of_one_node_during_writes_are_one_hardware_fault() -> None:
    assert violations(TWO_CKPT_CRASHES, HOLDING) == []


def test_the_generator_builds_faults_in_time_order_and_a_stopped_job_writes_nothing() -> None:
    lines = [json.loads(x) for x in build(TWO_CKPT_CRASHES).lines()]
    first, second = sorted(f.at * TWO_CKPT_CRASHES.duration for f in TWO_CKPT_CRASHES.faults)
    failed = [x["ts"] for x in lines if x.get("event") == "checkpoint_failed"]
    assert failed == [at_iso(first + 2.0)]  # the first crash's write; the job it stopped writes nothing after
    assert [x["ts"] for x in lines if "sel" in x] == [at_iso(first - 0.5), at_iso(second - 0.5)]  # both UEs logged


# The soak's find (FLEET_SEED=20261243, 10,000 examples): job0 steps every 180 s and saves each step; a write of step
# 20 fails at 300 s, step 20 is saved at 374 s, and the failure's report arrives 120 s late, after that save. The
# engine held the late report against the save and restarted from step 10; a save made after the failed write stands
# (CheckpointBook.on_failed, by the failure's time).
_J180 = JobPlan(nodes=1, half=False, elastic=None, every=180.0, interval=120.0, local=False, resume=None)
LATE_FAILED_WRITE = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(
    _J180, _J300, _J300), faults=(FaultPlan(kind='xid', at=0.75, job=0, pick=0, code=0, late=None, dup=False),
                                  FaultPlan(kind='ckpt_fail', at=0.5, job=0, pick=0, code=0, late=120.0, dup=False)),
    skew=None)


def test_a_late_report_of_a_failed_write_does_not_undo_the_save_after_it() -> None:
    assert violations(LATE_FAILED_WRITE, HOLDING) == []


# The soak's find on the lag rule (FLEET_SEED=20261302, trainer 20 s behind, heartbeats every 120 s on 12 nodes): job0
# steps every 60 s; GPU 0 of n01 is last sampled at 03:02:02 and vanishes, and step 20's save, made at 03:02:14 and
# stamped 03:01:54, was taken by its stamp. The trainer had said only three things by then; its first step came while
# the vote was stale, so two of its three lines had arrived behind the voters' time, and a lagging source needed three.
# Two of the last eight are enough: one late line still is not a lagging source.
_J60 = JobPlan(nodes=1, half=False, elastic=None, every=60.0, interval=120.0, local=False, resume=None)
FEW_LINES_BEHIND = FleetPlan(nodes=12, gpus=4, rack=4, duration=600.0, heartbeat=120.0, nvml=60.0, jobs=(_J60, _J300),
                             faults=(FaultPlan(kind='xid', at=0.5, job=1, pick=0, code=0, late=None, dup=False),
                                     FaultPlan(kind='xid', at=0.75, job=0, pick=0, code=0, late=None, dup=False),
                                     FaultPlan(kind='vanish', at=0.25, job=0, pick=0, code=0, late=None, dup=False)),
                             skew=('trainer', -20.0))


def test_a_trainer_that_has_said_little_yet_lags_by_two_lines_behind() -> None:
    assert violations(FEW_LINES_BEHIND, HOLDING) == []


# The soak's find on the oracle (FLEET_SEED=20261303): a write of job0 fails for want of space at 150 s, reported
# 120 s late, and pages storage (a checkpoint_failure, rightly); two minutes later n01 logs a memory UE and the next
# write fails with EIO, which the engine folds into n01's node_hardware_fault. The oracle saw a checkpoint_failure
# and an EIO near the hardware incident and called the first a consequence of the second; an incident that says
# its write failed on its own storage is storage's, whatever failed near it (fleet_checks._consequences).
NO_SPACE_THEN_CRASH = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(_J300,),
                                faults=(FaultPlan(kind='xid', at=0.75, job=0, pick=0, code=0, late=None, dup=False),
                                        FaultPlan(kind='xid_idle', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
                                        FaultPlan(kind='ckpt_fail', at=0.25, job=0, pick=0, code=0, late=120.0,
                                                  dup=False),
                                        FaultPlan(kind='ckpt_crash', at=0.625, job=0, pick=0, code=0, late=None,
                                                  dup=False)), skew=None)


def test_a_write_out_of_space_is_storage_s_though_the_node_dies_later() -> None:
    assert violations(NO_SPACE_THEN_CRASH, HOLDING) == []


# The soak's find on the oracle (FLEET_SEED=20261305): job2 steps every 60 s, and its job_started line arrives 120 s
# late, after its first step. The engine counts that step (stamped after the run began) and knew three intervals
# when a collective timeout made it judge; the oracle dropped a step heard before its run's start line and saw two.
# A step counts for the run by its time, whatever order the lines came in (fleet_checks.Watch.early_steps).
_J60_300 = JobPlan(nodes=1, half=False, elastic=None, every=60.0, interval=300.0, local=False, resume=None)
STEP_BEFORE_START = FleetPlan(nodes=12, gpus=4, rack=4, duration=1800.0, heartbeat=120.0, nvml=120.0, jobs=(
    _J300, _J300, _J60_300), faults=(FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
                                     FaultPlan(kind='nccl', at=0.5, job=2, pick=0, code=0, late=None, dup=False),
                                     FaultPlan(kind='ckpt_stale', at=0.25, job=0, pick=0, code=0, late=120.0,
                                               dup=False)), skew=None)


def test_a_step_heard_before_its_run_s_start_line_counts_toward_the_cadence() -> None:
    assert violations(STEP_BEFORE_START, HOLDING) == []


# The 10,000-example soak's find (FLEET_SEED=20261306): job0 is cancelled at 150 s; XID 79 on its idle GPU 0 then
# opens a job-less incident that quarantines it. The scheduler starts job0 again on that GPU (a breach), the run fails
# there, and the fence's incident takes the run (lifecycle._continued) -- but was never entered in the job's history,
# so the job's cancel 47 s later found no incident of job0 to close, and the gate restarted a job a person had
# cancelled. An incident that takes a job's run is that job's from then on, history included.
SOAK_FIND_CANCELLED = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(_J,), faults=(
    FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='breach', at=0.375, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='cancel', at=0.75, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='cancel', at=0.25, job=0, pick=0, code=0, late=None, dup=False)), skew=None)


def test_the_soaks_find_a_job_cancelled_after_failing_on_a_breached_fence_is_not_restarted() -> None:
    _keeps(SOAK_FIND_CANCELLED, "ended")
    out = decide_offline(build(SOAK_FIND_CANCELLED).lines())
    assert not [c for c in out["commands"] if c["type"] == "restart_job"]
    last = {i["id"]: i for i in out["incidents"]}
    assert [(i["job"], i["state"]) for i in last.values()] == [("job0", "closed")]


# The 50,000-example soak's find (FLEET_SEED=20261307, after 15 minutes): n05's memory UE at 03:06:15.2, one last
# heartbeat 0.6 s later, silence; job2 (on n04 and n05, a step every 30 s) is found hung at 03:09:14, outside the
# UE's window, and the gate's wait ran out before n05's silence verdict (heartbeats every 120 s). The last look
# before the restart (node_parts.failed_parts) took that heartbeat for "heard since the fault" and restarted job2
# without cordoning n05. A last word within the window after the fault, then quiet, is the node going down with it.
SOAK_FIND_LAST_GASP = FleetPlan(nodes=12, gpus=4, rack=4, duration=600.0, heartbeat=120.0, nvml=120.0, jobs=(
    _J, JobPlan(nodes=2, half=False, elastic=None, every=10.0, interval=300.0, local=False, resume=None),
    JobPlan(nodes=2, half=False, elastic=None, every=30.0, interval=300.0, local=False, resume=None)), faults=(
    FaultPlan(kind='sel', at=0.627, job=2, pick=4, code=0, late=None, dup=False),), skew=None)


def test_the_soaks_find_a_dying_node_s_last_heartbeat_does_not_clear_its_fault() -> None:
    _keeps(SOAK_FIND_LAST_GASP, "fenced_first")


# The 50,000-example soak's find (FLEET_SEED=20261308, after 30 minutes): n01 dies (memory UE) during job0's write,
# which fails with EIO 2.5 s later and is held for n01's verdict; job0's cancel, made at the same moment, arrives two
# minutes late -- 3.7 s after the node_hardware_fault incident that explains the write, which it closes. The held
# write looked for its cause among the job's unfinished incidents only, found none, and paged storage. An incident
# closed by the end of the job's run still explains what its fault caused (lifecycle.causes_for_job).
SOAK_FIND_CLOSED_CAUSE = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=30.0, nvml=120.0, jobs=(_J,),
                                   faults=(FaultPlan(kind='ckpt_crash', at=0.188, job=0, pick=0, code=0, late=None, dup=False),
                                           FaultPlan(kind='cancel', at=0.188, job=0, pick=0, code=0, late=120.0, dup=False)),
                                   skew=None)


def test_the_soaks_find_a_cancel_heard_late_does_not_make_a_consequence_a_cause() -> None:
    _keeps(SOAK_FIND_CLOSED_CAUSE, "consequence")


# The 20,000-example soak's find (FLEET_SEED=20261309): job0's trainer runs 45 s ahead, so its lines are screened and
# judged at the cell's time they arrive. Its save of step 40 completed in the second n01's BMC logged a memory UE, and
# the cell's clock, moved only by sparse voters, still read n01's last word (03:06:04.7) as it arrived: the save and
# the failure it was dated against tied, and the restart took the save. A screened source's save keeps when the cell
# heard of it, as a lagging one's does, and one heard by the failure is after it (CheckpointBook.restart_point).
SOAK_FIND_SCREENED_SAVE = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(
    JobPlan(nodes=1, half=False, elastic=None, every=90.0, interval=300.0, local=False, resume=None), _J), faults=(
    FaultPlan(kind='xid', at=0.5, job=1, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='xid', at=0.5, job=1, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='sel', at=0.625, job=0, pick=0, code=0, late=None, dup=False)), skew=('trainer', 45.0))


def test_the_soaks_find_a_screened_save_heard_as_the_node_died_is_no_restart_point() -> None:
    _keeps(SOAK_FIND_SCREENED_SAVE, "checkpoint")


# The 50,000-example soak's find (FLEET_SEED=20261310, after 5 minutes): job0 steps every 3 minutes; its write of step
# 10 fails (no space) at 150 s, is reported 2 minutes late, and step 10 is saved at 194 s. The trainer's newest stamp
# looked behind the cell, so the late report was placed at the cell's clock (270 s) -- after the save, which it then
# marked failed: the restart after XID 79 started from nothing. Two reports of one trainer are ordered by its stamps.
SOAK_FIND_PLACED_FAILURE = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=30.0, nvml=120.0, jobs=(
    JobPlan(nodes=1, half=False, elastic=None, every=180.0, interval=120.0, local=False, resume=None),), faults=(
    FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='ckpt_fail', at=0.25, job=0, pick=0, code=0, late=120.0, dup=False)), skew=None)


def test_the_soaks_find_a_late_failed_write_does_not_undo_the_save_after_it() -> None:
    _keeps(SOAK_FIND_PLACED_FAILURE, "checkpoint")


# The 50,000-example soak's find (FLEET_SEED=20261311): GPU 0 of n01 drops out of NVML with no kernel line and
# job0's rank on it dies; its software_crash incident waits for NVML's verdict on the GPU, and the job is cancelled
# before the verdict (samples every 2 minutes) -- the cancel closes the incident. The verdict then opened a job-less
# gpu_off_bus incident dated at the GPU's last sample, before the crash; when the scheduler started job0 on the
# fenced GPU again, that incident took the run: job0 had two incidents blaming one GPU (class 2's "one incident per
# job and root cause"). A verdict on hardware a cancelled job's closed failure ran on now joins that incident
# (HardwareRules._ended_failures, IncidentLifecycle.after_end): fenced in its name, not restarted.
SOAK_FIND_CANCEL_BEFORE_VERDICT = FleetPlan(nodes=2, gpus=4, rack=4, duration=900.0, heartbeat=60.0, nvml=120.0,
                                            jobs=(_J,), faults=(
    FaultPlan(kind='breach', at=0.75, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='cancel', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='vanish', at=0.25, job=0, pick=0, code=0, late=None, dup=False)), skew=None)


def test_the_soaks_find_a_verdict_after_the_cancel_joins_the_cancelled_crash() -> None:
    _keeps(SOAK_FIND_CANCEL_BEFORE_VERDICT, "explained")


# The 50,000-example soak's find (FLEET_SEED=20261314, after 5 minutes): two jobs share n01 and n02 by halves; n02's
# BMC logs a memory UE and n02 goes quiet before its agent has shown its cadence (so its silence judges nothing);
# job0's checkpoint write fails with EIO three seconds later, and job0 crashes on a GPU of n01 that vanished from
# NVML. n02's fault was judged at job1's restart (node_parts.failed_parts) for job1 alone: job0's incident never
# named n02 (a fenced node was skipped at its own restart), so its held write, finding no hardware cause, paged
# storage (`consequence`). Found at one job's restart, a node's fault is the cause of every job on it whose
# failure is near it (node_parts.failed_beside), and a node another incident fenced is still blamed by this one.
SOAK_FIND_NEIGHBOUR = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(
    JobPlan(nodes=2, half=True, elastic=None, every=10.0, interval=300.0, local=False, resume=None),
    JobPlan(nodes=2, half=True, elastic=None, every=10.0, interval=300.0, local=False, resume=None)), faults=(
    FaultPlan(kind='ckpt_crash', at=0.125, job=0, pick=2, code=0, late=None, dup=False),
    FaultPlan(kind='vanish', at=0.25, job=0, pick=0, code=0, late=None, dup=False)), skew=None)


def test_the_soaks_find_a_node_fault_found_at_one_restart_explains_its_neighbours_write() -> None:
    _keeps(SOAK_FIND_NEIGHBOUR, "consequence")


# The 50,000-example soak's find (FLEET_SEED=20261315, after 6 minutes), the mirror of the one above: job1 fails at
# once (XID 79) and its restart fences n02 for its memory UE within a minute, while job0 only stops stepping; job0's
# write, lost as n02 died, was judged before job0's own verdict -- n02's fence was job1's, so nothing of job0's
# "waited" and it paged storage (`consequence`). A node fault near the write that none of the job's own incidents
# blames yet keeps the write held (node_parts.unjudged_fault, for the job). The same capture cordoned n01, a healthy
# node: job0's rank on GPU 0 of n01 -- quarantined for a second root cause (XID 79) by its node_hardware_fault
# incident -- crashed, and the crash took the incident's category for the fence's, blaming n01 for n02's memory
# fault. A fence placed for a second culprit gives a crash on it that culprit's cause (TrainingRules._fenced_cause).
SOAK_FIND_NEIGHBOUR_FIRST = FleetPlan(nodes=2, gpus=4, rack=4, duration=600.0, heartbeat=60.0, nvml=120.0, jobs=(
    JobPlan(nodes=2, half=True, elastic=None, every=10.0, interval=300.0, local=False, resume=None),
    JobPlan(nodes=2, half=True, elastic=None, every=10.0, interval=300.0, local=False, resume=None)), faults=(
    FaultPlan(kind='xid', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='xid', at=0.125, job=1, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='ckpt_crash', at=0.125, job=0, pick=2, code=0, late=None, dup=False)), skew=None)


def test_the_soaks_find_a_write_on_a_node_a_neighbour_fenced_waits_for_its_own_job() -> None:
    _keeps(SOAK_FIND_NEIGHBOUR_FIRST, "consequence")


# Two 50,000-example soaks' finds on the final engine of session 13 (FLEET_SEED=20261316 after 33 minutes,
# FLEET_SEED=20261317 after 36): GPU 3's NVML readings during rising ECC errors (more often than its cadence) come
# in, the last one 120 s late; an XID 79 on GPU 0 fails the job in between. The late sample, stamped before the
# failure, was placed at the cell's clock on arrival -- after the failure -- and the restart gate took it for GPU 3
# heard since: the restart included a GPU nothing had vouched for after the failure (`gate`). The gate now hears
# an NVML sample when it was taken (its own stamp), unless its source runs behind as a rule (CellClock.lags).
SOAK_FIND_LATE_SAMPLE = FleetPlan(nodes=2, gpus=4, rack=4, duration=900.0, heartbeat=60.0, nvml=120.0, jobs=(_J,),
                                  faults=(
    FaultPlan(kind='xid', at=0.406, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='ecc', at=0.094, job=0, pick=3, code=0, late=120.0, dup=False)), skew=None)
SOAK_FIND_LATE_SAMPLE_VANISH = FleetPlan(nodes=2, gpus=4, rack=4, duration=1200.0, heartbeat=60.0, nvml=120.0,
                                         jobs=(_J,), faults=(
    FaultPlan(kind='xid_idle', at=0.5, job=0, pick=0, code=0, late=None, dup=False),
    FaultPlan(kind='ecc', at=0.688, job=0, pick=0, code=0, late=120.0, dup=False),
    FaultPlan(kind='vanish', at=0.75, job=0, pick=0, code=0, late=120.0, dup=False)), skew=None)


def test_the_soaks_find_a_late_sample_taken_before_the_failure_vouches_for_nothing_after() -> None:
    _keeps(SOAK_FIND_LATE_SAMPLE, "gate")
    _keeps(SOAK_FIND_LATE_SAMPLE_VANISH, "gate")
