"""The hooks that keep a guarantee from passing by not running (tests/conftest.py, tests/harness/shared.py)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import REPO, _reliability_outcomes, reliability_references
from tests.harness.shared import missing_message


def test_every_test_reliability_md_cites_exists() -> None:
    """A guarantee whose cited proof was renamed or deleted is proven by nothing."""
    refs = reliability_references()
    assert len(refs) >= 15, refs
    for path, name in sorted(refs, key=str):
        assert (REPO / path).is_file(), f"RELIABILITY.md cites {path}, which does not exist"
        if name is not None:
            text = (REPO / path).read_text(encoding="utf-8")
            assert re.search(rf"^(async )?def {name}\b", text, re.M), f"RELIABILITY.md cites {path}::{name}"


def test_references_are_files_or_single_tests(tmp_path: Path) -> None:
    doc = tmp_path / "R.md"
    doc.write_text("| 1 | x | `tests/a/test_b.py`, `tests/c/test_d.py::test_e` and `not/a/test.py` |")
    assert reliability_references(doc) == {("tests/a/test_b.py", None), ("tests/c/test_d.py", "test_e")}


def _report(nodeid: str, when: str, reliability: bool = True, reason: str = "") -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, when=when, keywords={"reliability": 1} if reliability else {},
                           longrepr=("f.py", 1, reason))


def test_skipped_reliability_tests_are_counted_once_each_and_others_ignored() -> None:
    stats = {
        "passed": [_report("a", "setup"), _report("a", "call"), _report("a", "teardown"),
                   _report("other", "call", reliability=False)],
        "skipped": [_report("b", "setup", reason="Skipped: no slurm"),
                    _report("c", "setup", reliability=False, reason="Skipped: not a guarantee")],
        "failed": [_report("d", "call")],
        "error": [_report("d", "teardown")],
    }
    out = _reliability_outcomes(SimpleNamespace(stats=stats))
    assert [r.nodeid for r in out["passed"]] == ["a"]
    assert [(r.nodeid, r.longrepr[2]) for r in out["skipped"]] == [("b", "Skipped: no slurm")]
    assert [r.nodeid for r in out["failed"]] == ["d"]


def test_the_missing_shared_data_message_says_what_is_missing_and_what_to_do() -> None:
    msg = missing_message([Path("/nonexistent/scenarios"), REPO])
    assert "/nonexistent/scenarios is missing" in msg and str(REPO) not in msg
    assert "../shared" in msg and "FAULTLINE_SHARED" in msg


def test_the_setup_hook_fails_rather_than_skips(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makeconftest("from tests.conftest import pytest_runtest_setup  # noqa: F401\n")
    pytester.makepyfile(test_probe="""
import pytest
from pathlib import Path

@pytest.mark.shared_data(Path("/nonexistent/faultline-shared-probe"))
def test_needs_it():
    pass
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "ignore::pytest.PytestUnknownMarkWarning")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*faultline-shared-probe is missing*"])
