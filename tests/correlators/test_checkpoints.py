"""A job's checkpoints: the newest valid one is of the current lineage, not failed, not failed to load, and
outside the failure domain of what the restart leaves out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from correlators.checkpoints import CheckpointBook

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def _book(*steps: int) -> CheckpointBook:
    book = CheckpointBook()
    book.on_run_start(at(0), None, None)
    for k, step in enumerate(steps):
        book.on_saved(at(100 * (k + 1)), step, f"/ck/{step}", "n1", False)
    return book


def test_a_rollback_abandons_what_was_saved_after_the_step_it_loaded() -> None:
    book = _book(100, 200, 300)
    book.on_run_start(at(400), None, None)
    book.on_loaded(100, "/ck/100")
    book.on_saved(at(500), 150, "/ck/150", "n1", False)
    assert [(c.step, c.state) for c in book.saved] == [(100, "valid"), (200, "abandoned"), (300, "abandoned"),
                                                       (150, "valid")]
    newest = book.newest()
    assert newest is not None and newest.step == 150


def test_a_silent_rollback_is_told_by_its_saves() -> None:
    book = _book(100, 200, 300)
    book.on_run_start(at(400), None, None)  # it never says what it loaded
    book.on_saved(at(500), 200, "/ck/200b", "n1", False)
    assert [c.state for c in book.saved] == ["valid", "abandoned", "abandoned", "valid"]
    assert book.restart_point(set())[0].path == "/ck/200b"  # type: ignore[union-attr]


def test_a_failed_write_and_a_failed_load_are_no_restart_points() -> None:
    book = _book(100, 200, 300)
    book.on_failed(300, None)
    book.on_run_start(at(400), 200, "/ck/200")
    assert book.loaded_failed("missing keys") is not None
    ck, skipped = book.restart_point(set())
    assert ck is not None and ck.step == 100
    assert [(k.step, "load" in k.why) for k in skipped] == [(200, True)]  # the failed write is no candidate at all


def test_a_save_made_after_a_failed_write_stands_however_late_the_failure_is_reported() -> None:
    """The soak's find (FLEET_SEED=20261243): a write of step 200 failed at 150 s, the step was saved at 200 s, and
    the failure's report arrived after that save. The save came after the failed write: it is the restart point."""
    book = _book(100, 200)
    book.on_failed(200, None, at(150))
    assert book.restart_point(set())[0].step == 200  # type: ignore[union-attr]
    book.on_failed(200, None, at(250))  # a failure of it after the save: no checkpoint any more
    assert book.restart_point(set())[0].step == 100  # type: ignore[union-attr]


def test_a_failed_write_placed_at_the_cell_s_time_is_ordered_against_its_save_by_its_own_stamp() -> None:
    """The soak's find (FLEET_SEED=20261310): a trainer stepping every 3 minutes reported a failed write of step 10
    (stamped 150 s) 2 minutes late; its newest stamp looked behind, so the line was placed at the cell's clock
    (270 s), after the save of step 10 (194 s), which it then marked failed. Two reports of the same node's trainer
    are ordered by that trainer's own stamps."""
    book = CheckpointBook()
    book.on_run_start(at(0), None, None)
    book.on_saved(at(194), 10, "/ck/10", "n1", False, stamp=at(194))
    book.on_failed(10, None, at(270), "n1", at(150))  # placed at 270 s, written at 150 s: before the save
    assert book.restart_point(set())[0].step == 10  # type: ignore[union-attr]
    book.on_failed(10, None, at(270), "n2", at(150))  # another node's report: by the times judged, as before
    assert book.restart_point(set())[0] is None


def test_a_save_of_a_lagging_source_heard_once_the_cell_reached_the_failure_is_after_it() -> None:
    """A trainer 20 s slow: its save made 4 s after a failure at 300 s is stamped 284 s, and arrives with the cell's
    clock already at the failure. By its stamp it is before; by when the cell heard of it, it is not. A save of
    the same source heard before the failure stands; and a source in step keeps its stamp (``heard`` None)."""
    book = _book(100)  # step 100 stamped 100 s
    book.on_saved(at(284), 200, "/ck/200", "n1", False, heard=at(300))
    ck, _ = book.restart_point(set(), at(300))
    assert ck is not None and ck.step == 100
    book.on_saved(at(270), 150, "/ck/150", "n1", False, heard=at(289))  # made at 290 s: before the failure
    ck, _ = book.restart_point(set(), at(300))
    assert ck is not None and ck.step == 150
    book = _book(100)
    book.on_saved(at(284), 200, "/ck/200", "n1", False)  # nothing says its source lags: its stamp decides
    assert book.restart_point(set(), at(300))[0].step == 200  # type: ignore[union-attr]


def test_node_local_checkpoints_die_with_their_node_and_later_ones_are_not_trusted() -> None:
    book = CheckpointBook()
    book.on_saved(at(100), 100, "/ck/100", "n1", False)
    book.on_saved(at(200), 200, "/mnt/nvme/200", "n1", True)
    assert book.restart_point(set())[0].step == 200  # type: ignore[union-attr]
    assert book.restart_point({"n2"})[0].step == 200  # type: ignore[union-attr]
    ck, skipped = book.restart_point({"n1"})
    assert ck is not None and ck.step == 100 and "node-local" in skipped[0].why
    assert book.restart_point(set(), failure_at=at(150))[0].step == 100  # type: ignore[union-attr]
