"""A pytest plugin: one archive filled by replaying every public scenario, once per session.

The report tests (``tests/sinks/test_report.py``) and the dashboard tests
(``tests/deploy/test_grafana_panels.py``) both ask for :func:`replayed_archive`; each names this
module in ``pytest_plugins``, so the fixture is registered once and the replays (the slow part:
a correlator worker per capture) run once however many test files use it.

The fixture yields the archive's URL, not an open :class:`~sinks.archive.store.Archive`: chDB
holds one engine path per process, so tests open it while they need it and close it after.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from common.settings import Settings
from faultline.pipeline import Run, replay
from tests.harness.shared import SCENARIOS, missing_message, scenario_files

__all__ = ["SCENARIOS", "Replayed", "replayed_archive"]

_PARALLEL = 3  # replays at once: each runs its own correlator worker process


@dataclass(frozen=True)
class Replayed:
    """The archive every public scenario was replayed into, and each replay's outcome."""

    url: str
    runs: dict[str, Run]


@pytest.fixture(scope="session")
def replayed_archive(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replayed]:
    """Every ``shared/scenarios/*.jsonl`` replayed through the real pipeline into one chDB archive."""
    captures = scenario_files()
    if not all(c.is_file() for c in captures):
        pytest.fail(missing_message(captures), pytrace=False)
    data_dir = tmp_path_factory.mktemp("replayed")
    settings = Settings(kafka=kafka_bootstrap, data_dir=data_dir, namespace=f"t-replayed-{uuid.uuid4().hex[:8]}",
                        archive=f"chdb://{data_dir / 'archive'}")
    with ThreadPoolExecutor(_PARALLEL) as pool:
        runs = dict(zip([c.stem for c in captures],
                        pool.map(lambda c: replay(c, settings, archive_namespace=settings.namespace), captures), strict=True))
    yield Replayed(settings.archive_url, runs)
