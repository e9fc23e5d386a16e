"""``faultline bench --real-job`` for a minute and a half: the real torchrun example, a fatal XID, both arms.

Needs torch (skipped without it, as ``tests/producers/jobs/test_torchrun_example.py`` is). One XID 79 on
rank 1's GPU slot 20 s in: the baseline restarts in place on the broken slot and fails again; faultline's
engine fences the slot and restarts the job on a spare, from a checkpoint the job really saved.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from faultline.bench.real_job import newest_loaded_was_saved, run_real_job
from faultline.bench.real_job_arms import Knobs
from faultline.bench.real_job_plan import Fault

# Real torchrun groups on the wall clock: 90 s of both arms at once, with a fault 20 s in, whose facts need the
# job up by then -- on a 2-core machine under a full suite's load it may not be. Run it by hand or with the soaks:
# pytest -m slow tests/faultline/bench/test_real_job.py
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (an optional dependency): pip install -e '.[torch]' to run the real job",
)]


def test_a_fatal_xid_is_fenced_and_the_job_comes_back_on_a_spare(tmp_path: Path) -> None:
    knobs = Knobs(step_s=0.3, checkpoint_every=10, collective_timeout_s=60, repair_s=300, notice_s=10)
    r = run_real_job(minutes=1.5, out=tmp_path, knobs=knobs, faults=[Fault(20.0, "xid", 1)])
    base, fl = r["arms"]["baseline"], r["arms"]["faultline"]

    for arm in (base, fl):  # the fault struck a running worker in both arms
        xid = [i for i in arm["injected"] if i["kind"] == "xid"]
        assert len(xid) == 1 and xid[0]["hit_a_worker"] and xid[0]["slot"] == 1
        assert 0 < arm["ettr"] <= 1 and arm["useful_steps"] > 0
        assert newest_loaded_was_saved(arm)
    # without faultline: restarted in place, on the broken slot, which fails again
    assert all(launch["slots"] == [0, 1] for launch in base["launches"])
    assert any(i["kind"] == "broken_slot_again" for i in base["injected"])

    # with faultline: the slot is fenced, the job restarted from the checkpoint the engine named ...
    fence = [c for c in fl["commands"] if c["type"] == "quarantine_gpu"]
    restart = [c for c in fl["commands"] if c["type"] == "restart_job"]
    assert fence and restart and fl["fenced_slots"] == [1]
    named = restart[0]["params"]["checkpoint"]["path"]
    assert named in {c["path"] for c in fl["checkpoints_saved"]}  # one the example really saved
    assert Path(named).exists()
    relaunch = [launch for launch in fl["launches"] if launch["why"] == restart[0]["id"]]
    assert len(relaunch) == 1 and relaunch[0]["checkpoint"] == named
    loaded = [c for c in fl["checkpoints_loaded"] if c["at_s"] >= relaunch[0]["at_s"]]
    assert loaded and loaded[0]["path"] == named  # ... and the job really resumed from it
    # ... and the fenced slot is never used again
    assert all(1 not in launch["slots"] for launch in fl["launches"] if launch["at_s"] >= fence[0]["at_s"])
    assert not any(i["kind"] == "broken_slot_again" for i in fl["injected"])
