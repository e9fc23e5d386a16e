"""Issue 15, findings 5 and 7: production by default, development only when said; secrets never shown.

A worker or an executor started without its keys refuses to start, naming the settings to set,
unless ``FAULTLINE_DEV_MODE=true`` (which the tests set in ``tests/conftest.py``; these tests
take it away). The archive's password is in no repr, dump or error; metrics listen on loopback in
development.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.settings import REPO_ROOT, MissingKeys, Settings

KEYS = "k1:a-secret-of-sixteen-plus"
PASSWORD = "archive-pw-that-must-not-show"


@pytest.fixture
def production(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAULTLINE_DEV_MODE", raising=False)


def test_a_production_worker_needs_the_signing_operator_and_snapshot_keys(production: None) -> None:
    """The operator keys too (issue 27): the worker acts only on quarantines and releases they signed."""
    with pytest.raises(MissingKeys) as refused:
        Settings().require_keys("worker")
    assert "FAULTLINE_SIGNING_KEYS, FAULTLINE_OPERATOR_KEYS, FAULTLINE_SNAPSHOT_KEY" in str(refused.value)
    assert "FAULTLINE_DEV_MODE=true" in str(refused.value)
    with pytest.raises(MissingKeys, match="missing FAULTLINE_OPERATOR_KEYS:"):
        Settings(signing_keys=KEYS, snapshot_key="a-snapshot-key-0123456").require_keys("worker")
    with pytest.raises(MissingKeys, match="missing FAULTLINE_SNAPSHOT_KEY:"):
        Settings(signing_keys=KEYS, operator_keys=KEYS).require_keys("worker")
    assert Settings(signing_keys=KEYS, operator_keys=KEYS, snapshot_every_events=0).require_keys("worker") == []
    assert Settings(signing_keys=KEYS, operator_keys=KEYS,
                    snapshot_key="a-snapshot-key-0123456").require_keys("worker") == []


def test_a_production_executor_needs_command_operator_and_executor_keys(production: None) -> None:
    with pytest.raises(MissingKeys, match="FAULTLINE_SIGNING_KEYS, FAULTLINE_OPERATOR_KEYS, FAULTLINE_EXECUTOR_KEYS"):
        Settings().require_keys("executor")
    assert Settings(signing_keys=KEYS, operator_keys="alice:alice-secret-0123456789",
                    executor_keys=KEYS).require_keys("executor") == []


def test_development_mode_starts_without_keys_and_says_so_loudly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="faultline.settings"):
        missing = Settings(dev_mode=True).require_keys("executor")
    assert missing == ["FAULTLINE_SIGNING_KEYS", "FAULTLINE_OPERATOR_KEYS", "FAULTLINE_EXECUTOR_KEYS"]
    assert "DEVELOPMENT MODE" in caplog.text and "never in production" in caplog.text


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}
    env.update(PYTHONPATH=str(REPO_ROOT), FAULTLINE_KAFKA="127.0.0.1:9", FAULTLINE_DATA_DIR=str(tmp_path))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


def test_a_worker_started_without_keys_exits_saying_which_setting_to_set(tmp_path: Path) -> None:
    done = _run(["-m", "correlators.app", "worker", "--without-web"], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "faultline worker: missing FAULTLINE_SIGNING_KEYS, FAULTLINE_OPERATOR_KEYS, FAULTLINE_SNAPSHOT_KEY" \
        in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_an_executor_started_without_keys_exits_saying_which_settings_to_set(tmp_path: Path) -> None:
    done = _run(["-m", "faultline.cli", "executor", "run", "--backend", "webhook", "--url", "http://127.0.0.1:9/t"],
                tmp_path)
    assert done.returncode == 1, done.stderr
    assert "FAULTLINE_SIGNING_KEYS, FAULTLINE_OPERATOR_KEYS, FAULTLINE_EXECUTOR_KEYS" in done.stderr, done.stderr


def test_the_archive_password_is_in_no_repr_dump_or_error() -> None:
    settings = Settings(archive=f"http://faultline:{PASSWORD}@clickhouse:8123/faultline")
    for shown in (repr(settings), str(settings), settings.model_dump_json(), json.dumps(settings.model_dump(),
                                                                                         default=str)):
        assert PASSWORD not in shown
    assert "http://***@clickhouse:8123/faultline" in repr(settings)
    assert settings.archive_url.endswith(f"{PASSWORD}@clickhouse:8123/faultline")  # to connect with
    assert settings.child_env()["FAULTLINE_ARCHIVE"] == settings.archive_url  # to a child, by environment

    from sinks.archive.store import Archive

    with pytest.raises(ValueError) as refused:
        Archive.open(f"ftp://faultline:{PASSWORD}@clickhouse/faultline")
    assert PASSWORD not in str(refused.value)


def test_metrics_listen_on_loopback_in_development_and_where_told_otherwise() -> None:
    assert Settings(dev_mode=True).metrics_bind == "127.0.0.1"
    assert Settings(dev_mode=False).metrics_bind == "0.0.0.0"
    assert Settings(dev_mode=True, metrics_address="10.0.0.7").metrics_bind == "10.0.0.7"


def test_tls_with_a_private_ca_and_a_client_certificate(tmp_path: Path) -> None:
    settings = Settings(kafka_security_protocol="SSL", kafka_ssl_ca_file=tmp_path / "ca.pem",
                        kafka_ssl_cert_file=tmp_path / "me.pem", kafka_ssl_key_file=tmp_path / "me.key",
                        kafka_ssl_key_password="key-passphrase-secret")
    conf = settings.kafka_config("k:9093")
    assert (conf["ssl.ca.location"], conf["ssl.certificate.location"], conf["ssl.key.location"]) == (
        str(tmp_path / "ca.pem"), str(tmp_path / "me.pem"), str(tmp_path / "me.key"))
    assert "key-passphrase-secret" not in repr(settings)
    assert "ssl.ca.location" not in Settings().kafka_config("k:9092")  # plaintext: no TLS settings at all


def test_status_shows_development_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from faultline.cli import main

    monkeypatch.setenv("FAULTLINE_ARCHIVE", f"chdb://{tmp_path}/archive")
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dev_mode"] is True
    assert main(["status"]) == 0
    assert "DEVELOPMENT MODE" in capsys.readouterr().out


def test_keys_can_come_from_systemd_credentials(tmp_path: Path) -> None:
    """deploy/slurm's executor unit hands its keys over with LoadCredential=: files in $CREDENTIALS_DIRECTORY."""
    (tmp_path / "FAULTLINE_SIGNING_KEYS").write_text(KEYS + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}
    env.update(PYTHONPATH=str(REPO_ROOT), CREDENTIALS_DIRECTORY=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", "from common.settings import Settings; print(Settings().signing())"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "SigningKeys(active='k1', ids=['k1'])", done.stderr


def test_the_slurm_executor_unit_loads_its_keys_as_credentials() -> None:
    unit = (REPO_ROOT / "deploy" / "slurm" / "faultline-executor.service").read_text()
    for key in ("FAULTLINE_SIGNING_KEYS", "FAULTLINE_OPERATOR_KEYS", "FAULTLINE_EXECUTOR_KEYS"):
        assert f"LoadCredential={key}:/etc/faultline/keys/" in unit, key
    assert "FAULTLINE_DEV_MODE" not in unit
