"""Seeds of the fault-injection tests: a few in the default run, many in the soak, any by hand.

Every reliability test that injects a fault at a random point draws that point from a
``random.Random(seed)`` and puts the seed in its test id (``[seed=23]``) and in its failure
messages, so a failure is re-run exactly::

    FAULTLINE_FAULT_SEEDS=23 .venv/bin/python -m pytest -s tests/producers/test_spool_crash.py

The soak runs :data:`SOAK_SEEDS` (``-m slow``; see RELIABILITY.md for the one command).
"""

from __future__ import annotations

import os

import pytest

__all__ = ["DEFAULT_SEEDS", "SOAK_SEEDS", "seed_params"]

DEFAULT_SEEDS: tuple[int, ...] = (11, 23, 37)
SOAK_SEEDS: tuple[int, ...] = tuple(range(1000, 1040))
_ENV = "FAULTLINE_FAULT_SEEDS"


def _from_env() -> tuple[int, ...] | None:
    raw = os.environ.get(_ENV, "").strip()
    if not raw:
        return None
    try:
        return tuple(int(s) for s in raw.replace(",", " ").split())
    except ValueError:
        raise pytest.UsageError(f"{_ENV} must be integers separated by commas or spaces, not {raw!r}") from None


def seed_params(default: tuple[int, ...] = DEFAULT_SEEDS, soak: tuple[int, ...] = SOAK_SEEDS) -> list[object]:
    """``pytest.param`` per seed: the default ones, the soak ones marked ``slow``, or only ``$FAULTLINE_FAULT_SEEDS``."""
    chosen = _from_env()
    if chosen is not None:
        return [pytest.param(s, id=f"seed={s}") for s in chosen]
    return ([pytest.param(s, id=f"seed={s}") for s in default]
            + [pytest.param(s, id=f"seed={s}", marks=pytest.mark.slow) for s in soak if s not in default])
