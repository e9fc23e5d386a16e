"""Broker security settings: validated at start, passed on by environment, never shown."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from common.settings import Settings

SECRET = "hunter2-but-longer"


def test_sasl_without_its_parts_is_refused_naming_them_and_not_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTLINE_KAFKA_SECURITY_PROTOCOL", "sasl_plaintext")
    monkeypatch.setenv("FAULTLINE_KAFKA_PASSWORD", SECRET)
    with pytest.raises(ValidationError) as refused:
        Settings()
    message = str(refused.value)
    assert "FAULTLINE_KAFKA_SASL_MECHANISM" in message and "FAULTLINE_KAFKA_USERNAME" in message
    assert SECRET not in message


def test_an_unknown_protocol_is_refused() -> None:
    with pytest.raises(ValidationError, match="PLAINTEXT, SASL_PLAINTEXT, SASL_SSL, SSL"):
        Settings(kafka_security_protocol="TLS")


def test_an_empty_mechanism_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTLINE_KAFKA_SASL_MECHANISM", "")  # as compose files and overlays write it
    settings = Settings()
    assert settings.kafka_sasl_mechanism is None
    assert "sasl.mechanism" not in settings.kafka_config("k:9092")


def test_credentials_reach_clients_and_child_processes_but_no_printout() -> None:
    settings = Settings(kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="SCRAM-SHA-512",
                        kafka_username="faultline-sink", kafka_password=SECRET)
    assert settings.kafka_config("k:9093") == {"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL",
                                               "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "faultline-sink",
                                               "sasl.password": SECRET}
    assert settings.kafka_security_env() == {"FAULTLINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                                             "FAULTLINE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                                             "FAULTLINE_KAFKA_USERNAME": "faultline-sink",
                                             "FAULTLINE_KAFKA_PASSWORD": SECRET}
    for shown in (repr(settings), str(settings), settings.model_dump_json()):
        assert SECRET not in shown
    plain = Settings(kafka_security_protocol="PLAINTEXT").kafka_security_env()
    assert plain["FAULTLINE_KAFKA_PASSWORD"] is None and plain["FAULTLINE_KAFKA_USERNAME"] is None


def test_the_data_dir_is_the_checkout_s_var_or_the_user_s_data_dir(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from common.settings import default_data_dir

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "pyproject.toml").write_text("[project]\n")
    assert default_data_dir(checkout) == checkout / "var"
    site = tmp_path / "site-packages"  # installed with pip: no pyproject.toml beside the packages
    site.mkdir()
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_data_dir(site) == tmp_path / "xdg" / "faultline"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_data_dir(site) == Path.home() / ".local" / "share" / "faultline"


@pytest.mark.parametrize("value", ["garbage!!", "kafka-0:ninety", "kafka-0:0", "kafka-0:70000", "a b:9092",
                                   "kafka-0:9092,,kafka-1:9092", "kafka-0:9092;rm -rf", "http://kafka-0:9092",
                                   "SASL_SSL://kafka-0:9093", "kafka-0:9092, kafka-1:9092"])
def test_a_malformed_bootstrap_list_is_refused(value: str) -> None:
    """A list of host[:port], comma-separated, nothing else: librdkafka and the correlator's Faust (which reads it
    as ``kafka://LIST``) both take it; a scheme, spaces or a stray character would fail later, less clearly."""
    with pytest.raises(ValidationError, match="host:port"):
        Settings(kafka=value)


@pytest.mark.parametrize("value", ["127.0.0.1:9092", "kafka-0.kafka.svc:9094,kafka-1.kafka.svc:9094", "kafka",
                                   "[::1]:9092", "broker_1.example.com:9093"])
def test_bootstrap_lists_every_client_takes_are_kept(value: str) -> None:
    assert Settings(kafka=value).kafka == value
