"""The shared scenarios and contract next to the repository: tests that need them fail loudly without them.

They live outside the project (``../shared`` from the repository root, or ``$FAULTLINE_SHARED``).
A test that needs them is marked ``@needs_shared(path, ...)``; where a path is missing, the
conftest (:func:`tests.conftest.pytest_runtest_setup`) fails that test at setup with
:func:`missing_message` -- it is never skipped, because a skipped guarantee reads as a kept one.
Parametrized tests list :func:`scenario_files`, which falls back to the public scenarios' names
when the directory is absent, so they are still collected -- and fail -- rather than vanish.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest

__all__ = ["CONTRACT", "SCENARIOS", "SHARED", "missing_message", "needs_shared", "scenario", "scenario_files"]

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("FAULTLINE_SHARED") or REPO.parent / "shared").resolve()
SCENARIOS = SHARED / "scenarios"
CONTRACT = SHARED / "contract"
#: The public scenarios of the contract, so tests over them are collected even when they are missing.
PUBLIC = ("checkpoint_failure", "cuda_oom", "ecc_degradation", "nccl_network_timeout", "psu_rail_loss",
          "xid79_multi_node")


def scenario(name: str) -> Path:
    """``<shared>/scenarios/<name>.jsonl``."""
    return SCENARIOS / f"{name}.jsonl"


def scenario_files() -> list[Path]:
    """Every public scenario capture there is (or, when there are none, the paths they should have)."""
    found = sorted(SCENARIOS.glob("*.jsonl"))
    return found or [scenario(n) for n in PUBLIC]


def needs_shared(*paths: Path) -> pytest.MarkDecorator:
    """Mark a test (or ``pytestmark``) as needing ``paths`` (default: the scenarios directory)."""
    return pytest.mark.shared_data(*(paths or (SCENARIOS,)))


def missing_message(paths: Iterable[Path]) -> str:
    """What a test that needs the shared data says when some of it is missing, and what to do."""
    absent = [str(p) for p in paths if not p.exists()]
    return (f"needs the shared scenarios/contract, but {', '.join(absent)} "
            f"{'is' if len(absent) == 1 else 'are'} missing. Check out the shared data next to the repository "
            f"(../shared: contract/ and scenarios/) or point FAULTLINE_SHARED at it; this test proves a "
            "guarantee, so it fails rather than skips.")
