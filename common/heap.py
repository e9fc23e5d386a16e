"""Garbage collection set for a stage that decodes a stream: young objects collected less often, and
in a process that does nothing else, the start-up heap frozen.

CPython's cyclic collector runs its youngest generation every 700 net allocations and, now and
then, walks every tracked object of the heap. A stream stage allocates in bursts -- one batch
record decodes to hundreds of models, several objects each, all alive until the batch is judged or
written -- so with the defaults a single batch triggers several young collections whose survivors
are promoted, and the full collections that follow walk the whole heap again and again, though
almost none of it ever becomes garbage. Reference counting still frees almost everything at once;
only reference cycles wait longer for the collector.

Measured (README "Benchmarks"): the correlator worker ~63,000 events per CPU-second with the
defaults, ~90,000 with :func:`tune_for_streaming`; the archive sink draining a backlog ~26,000 rows/s
with the defaults, ~38,000 inside :func:`streaming_gc`.

* :func:`tune_for_streaming` -- for a process that is one stage and nothing else (the Faust
  worker, ``faultline sink run``), once start-up is done: what start-up made is frozen (never
  walked again, never collected: it lives as long as the process) and the young threshold raised.
* :func:`streaming_gc` -- around a stream loop inside a process that does other things too (a
  replay, a test): only the threshold, restored on the way out.
* :func:`frozen_heap` -- around a measurement in a process that holds much else (the bench, its
  160,000 published events kept for the bare insert): what lives now is frozen while inside, as a
  stage's own process freezes its start-up heap, then thawed. Else every full collection of the
  measured stage walks the bench's objects too (~0.15 s of a ~1.8 s archive drain).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG_THRESHOLD", "frozen_heap", "streaming_gc", "tune_for_streaming"]

#: Net allocations between two collections of the youngest generation (CPython's default: 700):
#: a whole batch record's objects fit, so most die young, freed by their reference counts.
YOUNG_THRESHOLD = 50_000

_lock = threading.Lock()
_inside = 0
_saved: tuple[int, int, int] = gc.get_threshold()


def tune_for_streaming() -> None:
    """Freeze the heap as it is now and collect young objects less often, for the rest of the process."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)


@contextmanager
def streaming_gc() -> Iterator[None]:
    """Collect young objects less often while inside (nested and concurrent uses are counted)."""
    global _inside, _saved
    with _lock:
        if _inside == 0:
            _saved = gc.get_threshold()
            if _saved[0] < YOUNG_THRESHOLD:
                gc.set_threshold(YOUNG_THRESHOLD, _saved[1], _saved[2])
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                gc.set_threshold(*_saved)


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze what lives now while inside (never walked, never collected), thawed on the way out -- all of the
    frozen heap, so not for a process that froze its own with :func:`tune_for_streaming`."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
