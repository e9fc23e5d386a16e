"""Every ``--json`` time in one RFC 3339 form: UTC, ``Z``, microseconds always (``2026-04-22T03:10:00.100000Z``).

Issue 28 found four (``03:10:00.100Z``, ``...930000+00:00``, ``...100000Z``, microseconds with an offset):
a script had to parse each. This runs the reading commands' ``--json`` over one archive and checks
every string that starts like a time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from common.times import rfc3339
from faultline.cli import main
from faultline.outcome import collate
from sinks.archive.store import Archive
from streams.decisions import Command, CommandResult, Target
from tests.sinks.records import sample_records

_TIMELIKE = re.compile(r"\d{4}-\d\d-\d\dT")
ONE_FORM = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _odd_times(doc: Any) -> list[str]:
    return [s for s in _strings(doc) if _TIMELIKE.match(s) and not ONE_FORM.fullmatch(s)]


def test_the_one_form() -> None:
    assert rfc3339(datetime(2026, 4, 22, 3, 10, 0, 100_000, tzinfo=UTC)) == "2026-04-22T03:10:00.100000Z"
    assert rfc3339(datetime(2026, 4, 22, 3, 10)) == "2026-04-22T03:10:00.000000Z"  # naive: UTC; whole seconds too
    assert rfc3339(datetime.fromisoformat("2026-04-22T05:10:00.5+02:00")) == "2026-04-22T03:10:00.500000Z"


@pytest.mark.parametrize("argv", [["status"], ["report", "--since", "2000-01-01"], ["deadletters"], ["approvals"],
                                  ["incident", "inc-1"], ["timeline", "j1"], ["archive", "list"]])
def test_every_reading_command_writes_times_in_one_form(argv: list[str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"chdb://{tmp_path / 'archive'}"
    monkeypatch.setenv("FAULTLINE_ARCHIVE", url)
    s = sample_records()
    with Archive.open(url) as archive:
        archive.write_events(s.events)
        archive.write_incidents(s.incidents)
        held = Command(id="cmd-held", incident="inc-1", type="reset_gpu", target=Target(node="n1", gpu="GPU-3"),
                       issued_at=s.commands[0].issued_at, expires_at=datetime.now(UTC) + timedelta(hours=1))
        archive.write_commands([*s.commands, held])
        archive.write_results([*s.results, CommandResult(command="cmd-held", executor="k8s", status="waiting_approval",
                                                         at=held.issued_at)])
        archive.write_deadletters(s.deadletters)
    assert main([*argv, "--json"]) == 0
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert docs and not [t for d in docs for t in _odd_times(d)]
    assert any(ONE_FORM.fullmatch(t) for d in docs for t in _strings(d))  # it did write times


def test_the_contract_output_of_replay_and_demo_too() -> None:
    s = sample_records()
    out = collate(s.incidents, s.commands)
    assert _odd_times(out) == [] and out["commands"][0]["issued_at"] == "2025-04-22T03:00:34.000000Z"
