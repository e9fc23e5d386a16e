"""common/heap.py: frozen_heap freezes what lives while inside and thaws it on the way out."""

from __future__ import annotations

import gc

import pytest

from common.heap import frozen_heap


def test_what_lives_is_frozen_inside_and_thawed_after() -> None:
    before = gc.get_freeze_count()
    kept = [[i] for i in range(1000)]  # tracked objects alive at entry
    with frozen_heap():
        assert gc.get_freeze_count() >= before + len(kept)
    assert gc.get_freeze_count() == 0
    assert kept[999] == [999]


def test_thawed_when_the_measurement_fails() -> None:
    with pytest.raises(RuntimeError), frozen_heap():
        raise RuntimeError("drain failed")
    assert gc.get_freeze_count() == 0
