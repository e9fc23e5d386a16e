"""Garbage collection set for a stage that decodes a stream: the start-up heap frozen, young objects
collected less often.

CPython's cyclic collector runs its youngest generation every 700 net allocations and, now and
then, walks every tracked object of the heap. A stream stage allocates in bursts -- one batch
record decodes to hundreds of models, several objects each, all alive until the batch is judged --
so with the defaults a single batch triggers several young collections whose survivors are
promoted, and the full collections that follow walk the whole start-up heap (the stream framework,
its clients, the policy, the modules) again and again, though none of it ever becomes garbage.
Measured in the correlator worker (README "Benchmarks"): ~63,000 events per CPU-second with the
defaults, ~90,000 with :func:`tune_for_streaming`. Reference counting still frees almost
everything at once; only cycles wait longer for the collector, and what start-up made is never
collected (it lives as long as the process).
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "tune_for_streaming"]

#: Net allocations between two collections of the youngest generation (CPython's default: 700):
#: a whole batch record's objects fit, so most die young, freed by their reference counts.
YOUNG_THRESHOLD = 50_000


def tune_for_streaming() -> None:
    """Freeze the heap as it is now (call once start-up is done) and collect young objects less often."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
