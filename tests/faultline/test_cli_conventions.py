"""The command's conventions: --version, -v anywhere, --json on every printing command, exit
statuses, errors of one line that name the setting, and the checks that run before any work."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from faultline.cli import EXAMPLES, _parser, main, package_version
from faultline.errors import EXIT_FAILURE, EXIT_UNAVAILABLE, EXIT_USAGE

PRINTING = ["replay", "backtest", "demo", "status", "incident", "timeline", "report", "deadletters", "approvals", "quarantine", "release", "approve", "deny",
            "schemas", "broker", "topics", "acls", "bench"]
"""Every command that prints a result; the others (worker, sink, executor, agent, capture) run until stopped
and only log."""


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    path = tmp_path / "c.jsonl"
    path.write_text('{"ts": "2026-04-22T03:00:00+00:00", "source": "node_agent", "node": "n1", "alive": true}\n')
    return path


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"faultline {package_version()}"


def test_help_documents_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "0 success" in out and "1 failure" in out and "2 usage" in out and "69 a dependency" in out and "141 the reader" in out


def test_verbose_is_taken_before_or_after_the_subcommand() -> None:
    for argv in (["-v", "status"], ["status", "-v"], ["status", "--verbose", "--json"]):
        assert _parser().parse_args(argv).verbose is True
    assert _parser().parse_args(["status"]).verbose is False


@pytest.mark.parametrize("cmd", PRINTING)
def test_every_printing_command_has_json(cmd: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert set(PRINTING) <= set(EXAMPLES)
    with pytest.raises(SystemExit):
        main([cmd, "--help"])
    assert "--json" in capsys.readouterr().out


def test_a_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["status", "--no-such-option"])
    assert done.value.code == EXIT_USAGE


@pytest.mark.parametrize(("var", "value", "says"), [
    ("FAULTLINE_METRICS_PORT", "ninety", "FAULTLINE_METRICS_PORT: expected a whole number, got 'ninety'"),
    ("FAULTLINE_LIVE_CLOCK", "maybe", "FAULTLINE_LIVE_CLOCK: expected true or false"),
    ("FAULTLINE_KAFKA_SECURITY_PROTOCOL", "TLS", "FAULTLINE_KAFKA_SECURITY_PROTOCOL: unknown Kafka security protocol"),
    ("FAULTLINE_CELL", "a b", "FAULTLINE_CELL: cell name 'a b' must be"),
    ("FAULTLINE_KAFKA", "garbage!!", "FAULTLINE_KAFKA: expected host:port"),
])
def test_a_bad_setting_is_one_line_naming_it_and_the_expected_form(var: str, value: str, says: str,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(var, value)
    assert main(["status"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"faultline: {says}"), err
    assert "Traceback" not in err and "pydantic" not in err


def test_a_secret_is_never_repeated_in_a_setting_error(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAULTLINE_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("FAULTLINE_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("FAULTLINE_KAFKA_PASSWORD", "hunter2-secret")
    assert main(["status"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "FAULTLINE_KAFKA_USERNAME" in err and "hunter2" not in err


def test_a_missing_policy_is_found_before_the_archive_and_the_broker(capture: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAULTLINE_KAFKA", f"127.0.0.1:{_dead_port()}")
    monkeypatch.setenv("FAULTLINE_ARCHIVE", f"http://127.0.0.1:{_dead_port()}")
    assert main(["replay", str(capture), "--policy", str(tmp_path / "nope.yaml")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("faultline replay: policy file") and "nope.yaml does not exist" in err
    assert "worker" not in err


def test_a_bad_policy_says_which_key(capture: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text("timing:\n  fence_debounce_s: soon\n")
    monkeypatch.setenv("FAULTLINE_KAFKA", f"127.0.0.1:{_dead_port()}")
    assert main(["replay", str(capture), "--policy", str(bad)]) == EXIT_USAGE
    assert "timing.fence_debounce_s" in capsys.readouterr().err


def test_an_unreachable_archive_names_the_setting_before_the_broker_is_asked(
        capture: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    archive = f"http://127.0.0.1:{_dead_port()}"
    monkeypatch.setenv("FAULTLINE_ARCHIVE", archive)
    monkeypatch.setenv("FAULTLINE_KAFKA", f"127.0.0.1:{_dead_port()}")
    assert main(["replay", str(capture)]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert err.startswith(f"faultline replay: the archive at {archive} (FAULTLINE_ARCHIVE) could not be opened")
    assert "Kafka" not in err and "urllib3" not in err and "Retrying" not in err and "Traceback" not in err
    assert main(["status"]) == EXIT_UNAVAILABLE
    assert "FAULTLINE_ARCHIVE" in capsys.readouterr().err


def test_an_unknown_incident_is_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAULTLINE_ARCHIVE", f"chdb://{tmp_path / 'archive'}")
    assert main(["incident", "inc-nope"]) == EXIT_FAILURE
    assert "faultline status" in capsys.readouterr().err


@pytest.mark.broker
def test_a_capture_whose_every_line_is_bad_fails(kafka_bootstrap: str, tmp_path: Path, unique_name: str,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n{\"ts\": \"yesterday\", \"source\": \"kernel\"}\n{\"source\": \"nvml\"}\n")
    for var, value in {"FAULTLINE_KAFKA": kafka_bootstrap, "FAULTLINE_NAMESPACE": unique_name,
                       "FAULTLINE_DATA_DIR": str(tmp_path), "FAULTLINE_ARCHIVE": f"chdb://{tmp_path}/archive"}.items():
        monkeypatch.setenv(var, value)
    assert main(["replay", str(bad), "--json"]) == EXIT_FAILURE
    captured = capsys.readouterr()
    assert "every line of" in captured.err and "3 dead letters" in captured.err
    assert f"`faultline deadletters --namespace {unique_name}.replay-" in captured.err  # where the reasons are
    assert captured.out.strip() == '{"incidents": [], "commands": []}'


@pytest.mark.broker
def test_nothing_is_published_when_a_check_fails(kafka_bootstrap: str, capture: Path, tmp_path: Path,
                                                 unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka.admin import AdminClient

    monkeypatch.setenv("FAULTLINE_KAFKA", kafka_bootstrap)
    monkeypatch.setenv("FAULTLINE_NAMESPACE", unique_name)
    assert main(["replay", str(capture), "--policy", str(tmp_path / "missing.yaml")]) == EXIT_USAGE
    monkeypatch.setenv("FAULTLINE_ARCHIVE", f"http://127.0.0.1:{_dead_port()}")
    assert main(["replay", str(capture)]) == EXIT_UNAVAILABLE
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert not [t for t in topics if t.startswith(unique_name)]  # no replay namespace was even created


@pytest.mark.parametrize("argv", [["report"], ["report", "--json"], ["status"]])
def test_a_reader_that_leaves_is_exit_141(argv: list[str], tmp_path: Path) -> None:
    """``faultline report | head -1``: the pipe's reader has gone before the command writes; the status is the
    documented 141 (128 + SIGPIPE), not rich's 1, and nothing is said about it."""
    import os
    import subprocess
    import sys

    from faultline.errors import EXIT_BROKEN_PIPE

    read, write = os.pipe()
    os.close(read)  # the reader left before the first line: every write fails, whatever the timing
    env = {**os.environ, "FAULTLINE_ARCHIVE": f"chdb://{tmp_path / 'archive'}", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-m", "faultline.cli", *argv], stdout=write, stderr=subprocess.PIPE,
                          env=env, timeout=120, check=False)
    os.close(write)
    assert done.returncode == EXIT_BROKEN_PIPE, done.stderr.decode()
    assert done.stderr == b""
