"""`faultline deadletters` over a real chDB archive: why records were set aside, grouped, newest first,
filtered; and `status` showing the newest reasons, not only a count."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from common.deadletters import dead_letter
from faultline.cli import main
from faultline.commands.replay import deadletters_hint
from faultline.errors import EXIT_USAGE
from sinks.archive.store import Archive
from streams.decisions import DeadLetter

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


LETTERS = [
    dead_letter("correlator", "ValidationError: ts: missing", '{"source": "nvml"}', _at(0)),
    dead_letter("producer", "line 1: not JSON", "{oops", _at(1)),
    dead_letter("producer", "line 2: not JSON", "{oops again", _at(2)),
    dead_letter("producer", "line 7: not JSON", "\x1b[31mred\x1b[0m", _at(3)),  # text from outside, unsafe
    dead_letter("archive-sink:faultline.events", "ValueError: record has no value", None, _at(10)),
    dead_letter("archive-sink:faultline.commands", "ValueError: bad command", "{}", _at(5)),
]


@pytest.fixture
def archive_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"chdb://{tmp_path / 'archive'}"
    monkeypatch.setenv("FAULTLINE_ARCHIVE", url)
    return url


def _write(url: str, letters: list[DeadLetter]) -> None:
    with Archive.open(url) as archive:
        archive.write_deadletters(letters)


def _time(text: object) -> datetime:
    assert isinstance(text, str) and text.endswith("Z")
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one JSON object
    data: dict[str, object] = json.loads(out)
    return data


def test_reasons_are_grouped_by_source_and_reason_newest_first(archive_url: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A capture's three bad lines read as one reason (the line number set apart), with their count and times."""
    _write(archive_url, LETTERS)
    data = _json(["deadletters", "--json"], capsys)
    assert data["dead_letters"] == 6 and data["groups"] == 4
    rows = data["reasons"]
    assert isinstance(rows, list)
    assert [(r["source"], r["reason"], r["count"]) for r in rows] == [
        ("archive-sink:faultline.events", "ValueError: record has no value", 1),
        ("archive-sink:faultline.commands", "ValueError: bad command", 1),
        ("producer", "not JSON", 3),
        ("correlator", "ValidationError: ts: missing", 1),
    ]
    producer = rows[2]
    assert (_time(producer["first_at"]), _time(producer["last_at"])) == (_at(1), _at(3))
    assert producer["example"] == "\x1b[31mred\x1b[0m"  # the newest record's start, kept exactly in JSON


def test_filters_by_time_reason_and_source(archive_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _write(archive_url, LETTERS)
    by_source = _json(["deadletters", "--json", "--source", "archive-sink"], capsys)["reasons"]
    assert isinstance(by_source, list) and {r["source"] for r in by_source} == {
        "archive-sink:faultline.events", "archive-sink:faultline.commands"}
    by_reason = _json(["deadletters", "--json", "--reason", "JSON"], capsys)["reasons"]
    assert isinstance(by_reason, list) and [r["source"] for r in by_reason] == ["producer"]
    since = _json(["deadletters", "--json", "--since", "2026-04-22T03:00:04Z"], capsys)
    assert since["dead_letters"] == 2 and isinstance(since["filter"], dict)
    assert _time(since["filter"]["since"]) == _at(4) and since["filter"]["reason"] is None
    one = _json(["deadletters", "--json", "--limit", "1"], capsys)
    assert one["groups"] == 4 and isinstance(one["reasons"], list) and len(one["reasons"]) == 1


def test_a_person_reads_a_table_with_outside_text_made_safe(archive_url: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    _write(archive_url, LETTERS)
    assert main(["deadletters", "--source", "producer"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("Dead letters (3 records set aside for 1 reason")
    assert "not JSON" in out and "\x1b" not in out and "\\x1b[31mred" in out


def test_a_bad_since_is_a_usage_error(archive_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deadletters", "--since", "yesterday-ish"]) == EXIT_USAGE
    assert "--since wants a duration" in capsys.readouterr().err


def test_status_shows_the_newest_reasons_and_where_the_rest_are(archive_url: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    _write(archive_url, LETTERS)
    data = _json(["status", "--json"], capsys)
    assert data["dead_letters"] == 6
    reasons = data["dead_letter_reasons"]
    assert isinstance(reasons, list) and reasons[0]["reason"] == "ValueError: record has no value"
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "Dead letters (6; the newest 4 reasons)" in out and "not JSON" in out
    assert "faultline deadletters" in out


def test_replay_points_at_the_replays_own_dead_letters() -> None:
    """A replay archives under its own namespace: the hint names it, and the command that lists reasons."""
    assert deadletters_hint("faultline.replay-ab12") == "faultline deadletters --namespace faultline.replay-ab12"
