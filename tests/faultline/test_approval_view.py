"""`faultline approvals` (and status's section) over a real chDB archive: what executors hold for a person,
with the line that approves it; nothing decided or expired; and command ids in `incident --json`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from faultline.cli import main
from sinks.archive.store import Archive
from streams.decisions import Command, CommandResult, Target

NOW = datetime.now(UTC).replace(microsecond=0)
HOUR = timedelta(hours=1)


def _command(cid: str, kind: str = "reset_gpu", *, expires: datetime | None = NOW + HOUR, reason: str = "XID 48 twice",
             issued: datetime = NOW - HOUR, approval: bool = True) -> Command:
    return Command(id=cid, incident="inc-1", type=kind, target=Target(job="j1", node="n03", gpu="2"),
                   issued_at=issued, requires_approval=approval, reason=reason, expires_at=expires)


def _result(cid: str, status: str, executor: str = "k8s", after_s: float = 1.0) -> CommandResult:
    return CommandResult(command=cid, executor=executor, status=status,  # type: ignore[arg-type]
                         at=NOW - HOUR + timedelta(seconds=after_s), detail=f"{status} {cid}")


@pytest.fixture
def archive_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"chdb://{tmp_path / 'archive'}"
    monkeypatch.setenv("FAULTLINE_ARCHIVE", url)
    return url


def _write(url: str, commands: list[Command], results: list[CommandResult], namespace: str | None = None) -> None:
    with Archive.open(url, namespace, live="faultline") as archive:
        archive.write_commands(commands)
        archive.write_results(results)


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(argv) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_a_held_command_is_listed_with_what_why_until_when_and_its_approve_line(
        archive_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _write(archive_url, [_command("cmd-held")], [_result("cmd-held", "waiting_approval")])
    [row] = _json(["approvals", "--json"], capsys)["waiting_for_approval"]
    assert row["id"] == "cmd-held" and row["what"] == "reset_gpu job j1 node n03 gpu 2"
    assert row["why"] == "XID 48 twice" and row["incident"] == "inc-1" and row["executors"] == ["k8s"]
    assert datetime.fromisoformat(row["expires_at"].replace("Z", "+00:00")) == NOW + HOUR
    assert row["approve"] == "faultline approve cmd-held"
    assert _json(["status", "--json"], capsys)["waiting_for_approval"] == [row]  # status says the same


def test_decided_expired_and_dry_run_commands_are_not_waiting(archive_url: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Held then approved and run, held then denied, held past its expiry, only dry-run: none waits."""
    commands = [_command("cmd-done"), _command("cmd-denied"), _command("cmd-expired", expires=NOW - timedelta(seconds=1)),
                _command("cmd-dry"), _command("cmd-still")]
    results = [_result("cmd-done", "waiting_approval"), _result("cmd-done", "done", after_s=60),
               _result("cmd-denied", "waiting_approval"), _result("cmd-denied", "denied", after_s=60),
               _result("cmd-expired", "waiting_approval"), _result("cmd-dry", "dry_run", "k8s-dry-run"),
               _result("cmd-still", "waiting_approval"), _result("cmd-still", "skipped_duplicate", after_s=30)]
    _write(archive_url, commands, results)
    rows = _json(["approvals", "--json"], capsys)["waiting_for_approval"]
    assert [r["id"] for r in rows] == ["cmd-still"]  # a redelivery (skipped_duplicate) decides nothing


def test_what_the_executor_holds_counts_not_what_the_command_asked(archive_url: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A reset_gpu is held whatever the command says (sinks/executors/core.py); two executors holding one
    command are one row naming both."""
    _write(archive_url, [_command("cmd-reset", approval=False)],
           [_result("cmd-reset", "waiting_approval"), _result("cmd-reset", "waiting_approval", "slurm")])
    [row] = _json(["approvals", "--json"], capsys)["waiting_for_approval"]
    assert row["id"] == "cmd-reset" and row["executors"] == ["k8s", "slurm"]


def test_another_namespaces_approve_line_names_it(archive_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _write(archive_url, [_command("cmd-west")], [_result("cmd-west", "waiting_approval")], namespace="faultline-west")
    [row] = _json(["approvals", "--json", "--namespace", "faultline-west"], capsys)["waiting_for_approval"]
    assert row["approve"] == "FAULTLINE_NAMESPACE=faultline-west faultline approve cmd-west"


def test_a_person_reads_the_line_to_run_and_outside_text_is_made_safe(archive_url: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _write(archive_url, [_command("cmd-held", reason="\x1b]0;owned\x07 XID 48")], [_result("cmd-held", "waiting_approval")])
    assert main(["approvals"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Waiting for approval (1)") and "faultline approve cmd-held" in out
    assert "\x1b" not in out and "\x07" not in out
    assert main(["status"]) == 0
    assert "faultline approve cmd-held" in capsys.readouterr().out


def test_incident_json_names_each_commands_id(archive_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Two fences of one type at one millisecond are two entries, each with its own command id."""
    from tests.sinks.records import sample_records

    s = sample_records()
    twin = s.commands[0].model_copy(update={"id": "cmd-quarantine-twin", "target": Target(node="n1", gpu="GPU-4")})
    with Archive.open(archive_url) as archive:
        archive.write_incidents(s.incidents)
        archive.write_commands([*s.commands, twin])
        archive.write_results(s.results)
    timeline = _json(["incident", "inc-1", "--json"], capsys)["timeline"]
    ids = sorted(e["command"] for e in timeline if e["entry_type"] == "command")
    assert ids == sorted(["cmd-quarantine", "cmd-quarantine-twin", "cmd-restart", "cmd-validate", "cmd-release"])
    assert all(e["command"] is None for e in timeline if e["entry_type"] != "command")
