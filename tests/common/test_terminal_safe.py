"""``install_safe_log_records``: every log record made terminal-safe, and still formatted by every formatter."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from mode.utils.logging import ExtensionFormatter

import common.terminal_safe as terminal_safe


@pytest.fixture
def safe_records() -> Iterator[None]:
    factory, installed = logging.getLogRecordFactory(), terminal_safe._installed
    terminal_safe._installed = False
    terminal_safe.install_safe_log_records()
    yield
    logging.setLogRecordFactory(factory)
    terminal_safe._installed = installed


def _logged(formatter: logging.Formatter, *args: object) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    log = logging.getLogger("test-terminal-safe")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning(*args)  # type: ignore[arg-type]
    finally:
        log.removeHandler(handler)
    return out.getvalue()


@pytest.mark.parametrize("formatter", [logging.Formatter("%(message)s"),
                                       ExtensionFormatter(io.StringIO(), fmt="%(message)s")],  # the worker's
                         ids=["stdlib", "faust"])
def test_a_record_is_escaped_once_and_formats_under_every_formatter(safe_records: None,
                                                                    formatter: logging.Formatter) -> None:
    """Faust's formatter wraps a non-tuple ``args`` in a tuple: with ``args=None`` every worker log line
    failed to format (the takeover's "rebuilt state from" line was lost)."""
    line = _logged(formatter, "rebuilt state from %d events of %s at 100%%", 7, "job \x1b]0;owned\x07")
    assert line == "rebuilt state from 7 events of job \\x1b]0;owned\\x07 at 100%\n"
    assert _logged(formatter, "no args, a literal % s stays") == "no args, a literal % s stays\n"
