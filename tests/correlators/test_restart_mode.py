"""How a restarted job comes back (``params.mode``): the cheapest way that can work, and why.

The rule is the table of :mod:`correlators.restart_mode`; the unit tests hold each row, the engine tests
hold it on whole captures of the scenario book (a spare when hardware is left out and an idle node
covers the job, in place when torchelastic can restart it and nothing is left out, a requeue otherwise).
"""

from __future__ import annotations

from typing import Any

import pytest
from scenario_book import SCENARIOS, fleet
from scenario_book_judgement import _launch_line

from correlators.restart_mode import MODES, RestartModes, choose_mode
from faultline.outcome import decide_offline

COSTS = RestartModes()


def test_in_place_when_the_launcher_can_and_nothing_is_left_out() -> None:
    way = choose_mode(COSTS, gpus=16, in_process_launcher=True, avoids_own_hardware=False, capacity_known=16)
    assert way.mode == "in_process"
    assert way.gpu_hours == {"in_process": round(60 * 16 / 3600, 3), "requeue": 4.0}
    assert way.why.startswith("back by in_process: its launcher restarts workers in place")
    assert "requeue 4" in way.why  # what the other way would have cost is said


@pytest.mark.parametrize("capacity", [16, 40])
def test_a_spare_when_hardware_is_left_out_and_healthy_gpus_cover_the_size(capacity: int) -> None:
    for launcher in (True, False):  # in place cannot avoid a GPU: never chosen when hardware is left out
        way = choose_mode(COSTS, gpus=16, in_process_launcher=launcher, avoids_own_hardware=True,
                          capacity_known=capacity)
        assert way.mode == "spare" and "in_process" not in way.gpu_hours
        assert f"{capacity} healthy GPUs known cover the 16" in way.why


@pytest.mark.parametrize("capacity", [None, 15])
def test_a_requeue_when_nothing_known_covers_it_says_it_waits(capacity: int | None) -> None:
    way = choose_mode(COSTS, gpus=16, in_process_launcher=False, avoids_own_hardware=True, capacity_known=capacity)
    assert way.mode == "requeue" and list(way.gpu_hours) == ["requeue"]
    assert ("waits in the queue for repair" in way.why) == (capacity is not None)


def test_the_cheapest_that_works_is_chosen_whatever_the_costs() -> None:
    """A site whose spares come up faster than an in-place restart (a slow rendezvous) gets the spare;
    one whose queue is empty gets the requeue. Ties go in the table's order."""
    fast_spare = RestartModes(in_process_s=600, spare_s=30, requeue_s=900)
    assert choose_mode(fast_spare, gpus=8, in_process_launcher=True, avoids_own_hardware=False,
                       capacity_known=64).mode == "in_process"  # a spare is no way back when nothing is left out
    assert choose_mode(RestartModes(in_process_s=600, requeue_s=60), gpus=8, in_process_launcher=True,
                       avoids_own_hardware=False, capacity_known=8).mode == "requeue"
    tie = RestartModes(in_process_s=60, spare_s=60, requeue_s=60)
    assert [choose_mode(tie, gpus=8, in_process_launcher=True, avoids_own_hardware=a, capacity_known=8).mode
            for a in (False, True)] == ["in_process", "spare"]


def _restarts(lines: list[bytes] | list[str]) -> list[dict[str, Any]]:
    out = decide_offline(lines)
    return [c for c in out["commands"] if c["type"] == "restart_job"]


def _lines(cap: Any, tmp_path: Any) -> Any:
    path = tmp_path / "cap.jsonl"
    return cap.write(path)


def test_a_power_fault_with_an_idle_node_comes_back_on_the_spare(tmp_path: Any) -> None:
    """psu_rail_with_sel: n2 is cordoned, n3 idle; the job's 16 GPUs are covered by n1 and n3."""
    cap, _ = SCENARIOS["psu_rail_with_sel"]()
    [restart] = _restarts(_lines(cap, tmp_path))
    assert restart["params"]["mode"] == "spare", restart["reason"]
    assert "back by spare" in restart["reason"]
    assert set(restart["params"]["mode_gpu_hours"]) == {"spare", "requeue"}


def test_a_python_crash_with_no_launcher_line_is_a_requeue(tmp_path: Any) -> None:
    cap, _ = SCENARIOS["python_exception_crash"]()
    [restart] = _restarts(_lines(cap, tmp_path))
    assert restart["params"]["mode"] == "requeue" and restart["params"]["exclude"] == {"nodes": [], "gpus": []}


def test_a_python_crash_under_torchelastic_restarts_in_place(tmp_path: Any) -> None:
    """The same crash with torchelastic's launch configuration on rank 0: nothing is left out, so the
    workers restart where they are."""
    cap = fleet("n1", "n2").job("pt", ["n1", "n2"])
    _launch_line(cap, "pt", 2, 2, 8)
    cap.exception(700, "pt", 9, "KeyError: 'input_ids'")
    cap.crash(700.1, "pt", rank=9, error="KeyError: 'input_ids'", form="plain")
    [restart] = _restarts(_lines(cap, tmp_path))
    assert restart["params"]["mode"] == "in_process", restart["reason"]
    assert restart["params"]["mode"] in MODES
