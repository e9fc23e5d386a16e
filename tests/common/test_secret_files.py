"""Issue 27, item 6: every secret setting may come from a file (Docker secrets), not the environment.

``docker inspect`` shows a container's environment; Compose now mounts keys as files and names them
with ``FAULTLINE_<NAME>_FILE`` (deploy/compose/compose.yaml, tests/deploy/test_compose.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from common.secret_files import SecretFileError, secret_fields
from common.settings import Settings

KEYS = "corr-1:a-command-signing-secret-0123"


def _secret(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_every_key_token_and_password_has_a_file_variant() -> None:
    assert {"signing_keys", "operator_keys", "executor_keys", "snapshot_key", "kafka_password", "kafka_ssl_key_password",
            "webhook_url", "webhook_token", "schema_registry_password", "archive"} == set(
        secret_fields(Settings, also=("archive",)))


def test_a_key_is_read_from_the_file_its_variable_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAULTLINE_SIGNING_KEYS", raising=False)
    monkeypatch.setenv("FAULTLINE_SIGNING_KEYS_FILE", str(_secret(tmp_path, "signing_keys", KEYS + "\n")))
    monkeypatch.setenv("FAULTLINE_KAFKA_PASSWORD_FILE", str(_secret(tmp_path, "kafka", "pass word\n")))
    monkeypatch.setenv("FAULTLINE_ARCHIVE_FILE", str(_secret(tmp_path, "archive", "http://u:pw@ch:8123/db")))
    settings = Settings()
    keys = settings.signing()
    assert keys is not None and keys.ids == ["corr-1"]  # the trailing newline is not part of the secret
    assert settings.kafka_password is not None and settings.kafka_password.get_secret_value() == "pass word"
    assert settings.archive_url == "http://u:pw@ch:8123/db" and "pw" not in repr(settings)
    assert Settings(signing_keys="given:a-command-signing-secret-9876").signing().ids == ["given"]  # type: ignore[union-attr]
    child = settings.child_env()  # a child process gets the value, never a *_FILE that would clash with it
    assert child["FAULTLINE_SIGNING_KEYS"] == KEYS and child["FAULTLINE_SIGNING_KEYS_FILE"] is None


@pytest.mark.parametrize("case", ["both", "missing", "empty"])
def test_a_file_variant_that_cannot_be_used_is_an_error_naming_it(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = {"both": _secret(tmp_path, "keys", KEYS), "missing": tmp_path / "nowhere",
            "empty": _secret(tmp_path, "keys", "\n")}[case]
    monkeypatch.setenv("FAULTLINE_OPERATOR_KEYS_FILE", str(path))
    if case == "both":
        monkeypatch.setenv("FAULTLINE_OPERATOR_KEYS", "alice:another-operator-secret-0")
    else:
        monkeypatch.delenv("FAULTLINE_OPERATOR_KEYS", raising=False)
    with pytest.raises(SecretFileError, match="FAULTLINE_OPERATOR_KEYS") as refused:
        Settings()
    assert {"both": "give the secret one way only", "missing": "cannot read it (No such file or directory)",
            "empty": "the file is empty"}[case] in str(refused.value)
    assert "secret-0" not in str(refused.value)


def test_the_command_says_which_file_and_exits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from faultline.cli import main

    monkeypatch.setenv("FAULTLINE_EXECUTOR_KEYS_FILE", str(tmp_path / "nowhere"))
    monkeypatch.delenv("FAULTLINE_EXECUTOR_KEYS", raising=False)
    assert main(["status"]) == 2
    assert f"faultline: FAULTLINE_EXECUTOR_KEYS_FILE={tmp_path / 'nowhere'}: cannot read it" in capsys.readouterr().err
