"""The pure parts of ``faultline bench --real-job``: the seeded schedule, ETTR accounting, the prediction."""

from __future__ import annotations

import pytest

from faultline.bench.goodput import Assumptions, ettr
from faultline.bench.real_job_plan import (
    KINDS,
    account,
    down_s,
    downtime_s,
    predict,
    runs,
    schedule,
    stepping_at,
)


def test_the_schedule_is_seeded_spaced_and_plays_every_kind() -> None:
    a = schedule(7, 1200, 240, ranks=2)
    assert a == schedule(7, 1200, 240, ranks=2) and a != schedule(8, 1200, 240, ranks=2)
    assert len(a) == 5 and {f.kind for f in a} == set(KINDS)
    for w, f in enumerate(a):  # one fault in the middle half of each 240 s window
        assert 240 * w + 60 <= f.at_s <= 240 * w + 180 and f.rank in (0, 1)


def test_a_warned_fault_warns_after_the_start_or_gives_way() -> None:
    for seed in range(20):
        for f in schedule(seed, 1200, 240, ranks=2, lead_s=345):
            assert f.lead_s == (345 if f.kind == "predictable" else 0)
            assert f.warn_s >= 60
    # a lead longer than the run: no warned fault at all
    assert all(f.kind != "predictable" for s in range(10) for f in schedule(s, 1200, 240, ranks=2, lead_s=1200))


def test_steps_cut_into_runs_at_a_resume_or_a_long_gap() -> None:
    steps = [(1.0, 1), (1.5, 2), (2.0, 3), (9.0, 3), (9.5, 4), (20.0, 5), (20.5, 6)]
    assert [[s for _, s in r] for r in runs(steps)] == [[1, 2, 3], [3, 4], [5, 6]]


def test_redone_steps_are_not_useful_time() -> None:
    # steps 1..10 at 1 s each, a crash, the run resumes from step 6 and goes to 12, within 20 s of wall time
    first = [(float(s), s) for s in range(1, 11)]
    second = [(14.0 + k, s) for k, s in enumerate(range(7, 13))]
    acc = account(first + second, wall_s=20)
    assert acc.step_s == 1.0 and acc.steps_run == 16 and acc.useful_steps == 12 and acc.redone_steps == 4
    assert acc.ettr == pytest.approx(12 / 20)
    assert account([(float(s), s) for s in range(1, 40)], wall_s=20).ettr == pytest.approx(1.0)  # at most 1


def test_work_since_the_checkpoint_of_a_job_down_at_the_end_is_lost() -> None:
    # steps 1..10 at 1 s, saved at step 6, a crash at 10.5 s and no run after it within 30 s
    acc = account([(float(s), s) for s in range(1, 11)], wall_s=30, saved=[(6.01, 6)])
    assert acc.steps_run == 10 and acc.useful_steps == 6 and acc.ettr == pytest.approx(6 / 30)
    assert account([(float(s), s) for s in range(1, 11)], wall_s=30).useful_steps == 0  # never saved: all lost


def test_downtime_runs_from_the_fault_to_the_next_run_or_the_end() -> None:
    steps = [(1.0, 1), (2.0, 2), (3.0, 3), (11.0, 3), (12.0, 4)]
    assert downtime_s(steps, 3.5, wall_s=30) == pytest.approx(7.5)
    assert downtime_s(steps, 12.5, wall_s=30) == pytest.approx(17.5)  # never stepped again


def test_down_time_is_the_gaps_between_runs_and_a_down_tail() -> None:
    steps = [(1.0, 1), (2.0, 2), (3.0, 3), (11.0, 3), (12.0, 4)]
    assert down_s(steps, wall_s=12.5) == pytest.approx(7.0)  # 3 -> 11, less the step 3 took
    assert down_s(steps, wall_s=30) == pytest.approx(7.0 + 18.0)  # and down from 12 s to the end
    assert stepping_at(steps, 3.5, 1.0) and not stepping_at(steps, 9.0, 1.0)


def test_the_prediction_is_the_goodput_models_ettr_of_the_lost_time() -> None:
    # 1200 s, 4 faults while stepping of which 1 saved before it struck, 60 s interval, 0.1 s saves,
    # 10 s launch, 140 s down
    got = predict(1200, 4, 60, 0.1, 10, 140, saved_before=1)
    lost = 10 + 140 + 3 * 30
    assert got == pytest.approx(ettr(Assumptions(gpus=1, days=1200 / 86400, checkpoint_interval_s=60,
                                                 checkpoint_save_s=0.1), lost / 3600))
    assert got == pytest.approx((1200 - lost - (1200 - lost) / 60 * 0.1) / 1200)


def test_the_command_runs_the_real_job_with_its_minutes_and_seed(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import faultline.bench.real_job as real_job
    from faultline.cli import main
    from faultline.errors import EXIT_USAGE

    asked: list[tuple[float, int]] = []

    def fake(minutes: float, seed: int) -> dict[str, object]:
        asked.append((minutes, seed))
        return {"minutes": minutes, "seed": seed, "arms": {}}

    monkeypatch.setattr(real_job, "run_real_job", fake)
    assert main(["bench", "--real-job", "--minutes", "1.5", "--seed", "4", "--json"]) == 0
    assert asked == [(1.5, 4)] and json.loads(capsys.readouterr().out.strip().splitlines()[-1])["seed"] == 4
    assert main(["bench", "--real-job", "--cells", "2"]) == EXIT_USAGE
    assert main(["bench", "--real-job", "--minutes", "0"]) == EXIT_USAGE
    assert len(asked) == 1
