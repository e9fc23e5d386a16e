"""Every input of the kept fuzz corpus through every parser: documented outcomes only (see ``fuzz.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from producers.capture import BAD_KINDS, MAX_LINE_BYTES
from tests.producers.fuzz import CORPUS, ENTRY_POINTS, MAX_INPUT_BYTES, corpus_files, expected, outcomes

FILES = corpus_files()
EXPECTATIONS = {"events", "none", "any", *BAD_KINDS}


def test_the_corpus_is_there_small_and_covers_every_kind_judged_alone() -> None:
    assert len(FILES) >= 40
    assert sum(p.stat().st_size for p in FILES) < 1_000_000
    assert all(p.stat().st_size <= MAX_INPUT_BYTES for p in FILES)
    assert {expected(p) for p in FILES} <= EXPECTATIONS
    alone = set(BAD_KINDS) - {"duplicate", "clock_outlier", "too_long"}  # those need other lines, or 512 KiB
    assert alone | {"events", "none"} <= {expected(p) for p in FILES}
    assert not list(CORPUS.glob("crash--*")), "a fuzz crash is waiting: fix the parser, rename the file"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_entry_point_gives_a_documented_outcome(path: Path) -> None:
    got = outcomes(path.read_bytes())
    assert set(got) == set(ENTRY_POINTS)
    want = expected(path)
    capture = got["parse_capture_line"]
    if want == "events":
        assert capture.startswith("events:"), capture
    elif want == "none":
        assert capture == "none", capture
    elif want != "any":
        assert capture.startswith(f"bad:{want}:"), capture


def test_a_line_one_byte_over_the_limit_is_refused_by_every_capture_entry_point() -> None:
    line = b'{"ts": "2026-04-22T03:00:00Z", "source": "kernel", "node": "n", "line": "'
    line += b"x" * (MAX_LINE_BYTES + 1 - len(line) - 2) + b'"}'
    got = outcomes(line)
    assert got["parse_capture_line"].startswith("bad:too_long:")
