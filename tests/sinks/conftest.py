"""Fixtures for the archive tests: a chDB archive on disk and sample records."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sinks.archive import Archive

from .records import Sample, sample_records


@pytest.fixture
def sample() -> Sample:
    return sample_records()


@pytest.fixture
def archive_url(tmp_path: Path) -> str:
    return f"chdb://{tmp_path / 'archive'}"


@pytest.fixture
def archive(archive_url: str) -> Iterator[Archive]:
    """A migrated archive on disk, closed after the test (chDB holds one path per process)."""
    with Archive.open(archive_url) as opened:
        yield opened
