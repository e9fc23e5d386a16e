"""kubectl's conventions on the views (faultline/output.py): -o wide|json|yaml, AGE, --watch, -N, completion."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from faultline import output
from faultline.cli import main, parser
from faultline.completion import script
from faultline.errors import EXIT_INTERRUPTED, EXIT_USAGE
from sinks.archive.store import Archive
from tests.sinks.records import sample_records


@pytest.fixture
def archive_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"chdb://{tmp_path / 'archive'}"
    monkeypatch.setenv("FAULTLINE_ARCHIVE", url)
    sample = sample_records()
    with Archive.open(url) as archive:
        archive.write_incidents(sample.incidents[:2])  # still mitigating: an open incident
        archive.write_commands(sample.commands[:2])
    return url


def _out(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_yaml_is_the_json_data_with_the_same_times(archive_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    as_json = json.loads(_out(["status", "--json"], capsys))
    text = _out(["status", "-o", "yaml"], capsys)
    assert text.startswith("---\n")
    assert yaml.safe_load(text) == as_json  # times stay RFC 3339 strings: one form in every output
    assert json.loads(_out(["status", "-o", "json"], capsys)) == as_json


def test_the_table_has_an_age_and_wide_adds_columns(archive_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    table = _out(["status"], capsys)
    header = next(line for line in table.splitlines() if line.startswith("SEVERITY"))
    assert header.split() == ["SEVERITY", "CATEGORY", "JOB", "CULPRIT", "STATE", "OPENED", "AGE", "ID"]
    row = table.splitlines()[table.splitlines().index(header) + 1]
    assert re.search(r"Z\s+\d+[smhd]\s+inc-1$", row), row  # the sample opened in 2026-04: days ago
    wide = _out(["status", "-o", "wide"], capsys)
    header = next(line for line in wide.splitlines() if line.startswith("SEVERITY"))
    assert header.split() == ["SEVERITY", "CATEGORY", "JOB", "CULPRIT", "GPUS", "STATE", "OPENED", "AGE", "ID",
                              "SUMMARY"]


def test_two_formats_at_once_is_a_usage_error(archive_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--json", "-o", "yaml"]) == EXIT_USAGE
    assert "--json and -o yaml ask for two formats" in capsys.readouterr().err


def test_watch_prints_a_round_per_interval_until_interrupted(archive_url: str, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    naps: list[float] = []

    def sleep(s: float) -> None:
        naps.append(s)
        if len(naps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(output.time, "sleep", sleep)
    assert main(["approvals", "-w", "--interval", "0.5", "-o", "json"]) == EXIT_INTERRUPTED
    rounds = capsys.readouterr().out.splitlines()
    assert naps == [0.5] * 3 and len(rounds) == 3 and all("waiting_for_approval" in json.loads(r) for r in rounds)
    naps.clear()
    assert main(["status", "--watch"]) == EXIT_INTERRUPTED
    table = capsys.readouterr().out
    assert len(re.findall(r"^# \d{4}-\d\d-\d\dT[\d:.]+Z$", table, re.M)) == 3  # each round's time, into a pipe
    assert table.count("Open incidents (") == 3
    assert main(["status", "-w", "--interval", "0"]) == EXIT_USAGE


def test_the_namespace_has_a_short_flag_that_is_not_kubectls() -> None:
    p = parser()
    assert p.parse_args(["status", "-N", "faultline.replay-x"]).namespace == "faultline.replay-x"
    with pytest.raises(SystemExit):
        p.parse_args(["status", "-n", "default"])  # -n is kubectl's namespace: faultline never takes it


def _complete(script_path: Path, line: str) -> list[str]:
    code = (f'source {script_path}; read -ra COMP_WORDS <<< "$LINE"; [[ "$LINE" == *" " ]] && COMP_WORDS+=(""); '
            'COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _faultline; printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", code], env={"LINE": line, "PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, timeout=30, check=True)
    return [w for w in done.stdout.splitlines() if w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_commands_options_and_choices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "faultline.bash"
    path.write_text(_out(["completion", "bash"], capsys))
    assert _complete(path, "faultline st") == ["status"]
    assert _complete(path, "faultline -v appr") == ["approvals", "approve"]
    assert _complete(path, "faultline status -o ") == ["table", "wide", "json", "yaml"]
    assert _complete(path, "faultline status --w") == ["--watch"]
    assert {"lemons", "checkpoints", "--since"} <= set(_complete(path, "faultline report "))
    every = set(_complete(path, "faultline "))
    assert set(parser()._subparsers._group_actions[0].choices) <= every  # type: ignore[union-attr]


def test_zsh_reads_the_same_script_through_bashcompinit() -> None:
    zsh = script(parser(), "zsh")
    assert zsh.splitlines()[0] == "autoload -U +X bashcompinit && bashcompinit"
    assert zsh.split("\n", 1)[1] == script(parser(), "bash")
