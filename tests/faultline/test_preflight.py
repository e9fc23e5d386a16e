"""The policy check before any work: a bad policy file is one line that says where, and every problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline.errors import UsageError
from faultline.preflight import check_policy


def _refusal(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as refused:
        check_policy(path)
    message = str(refused.value)
    assert "\n" not in message  # one line
    return message


def test_a_yaml_syntax_error_names_its_line_and_column(tmp_path: Path) -> None:
    message = _refusal(tmp_path, "timing:\n  fence_debounce_s: 5\n  verify_hold_s: [1, 2\nthresholds: {}\n")
    assert "is not valid YAML" in message and "line 4, column 11: expected ',' or ']'" in message, message


def test_a_tab_indent_names_its_line(tmp_path: Path) -> None:
    message = _refusal(tmp_path, "timing:\n\tfence_debounce_s: 5\n")
    assert "line 2" in message, message


def test_every_problem_counted_is_listed(tmp_path: Path) -> None:
    message = _refusal(tmp_path, "timing:\n  fence_debounce_s: soon\n  verify_hold_s: later\n")
    assert "(2 problems" in message, message
    assert "timing.fence_debounce_s" in message and "timing.verify_hold_s" in message, message
