"""BrokerAuth (deploy/local/kafka_security.py) offline: the broker settings it writes and what it keeps secret.

The broker-side proof is tests/deploy/test_secured_kafka.py.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from deploy.local.kafka import LocalKafka
from deploy.local.kafka_security import BrokerAuth, write_private


def test_the_client_listener_requires_scram_and_the_authorizer_denies_by_default() -> None:
    props = BrokerAuth(admin_password="pw-1").server_properties("127.0.0.1", 9092, 9093)
    assert props["listeners"] == "SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert "PLAINTEXT:PLAINTEXT" not in props["listener.security.protocol.map"]  # nothing anonymous
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin"
    assert "authorizer.class.name" not in BrokerAuth("pw-1", authorize=False).server_properties("h", 1, 2)


def test_the_password_stays_out_of_repr_and_of_anything_unescaped() -> None:
    auth = BrokerAuth.generate()
    assert auth.admin_password not in repr(auth)
    assert auth.admin_password not in repr(LocalKafka(Path("/nonexistent"), port=1, controller_port=2, auth=auth))
    for bad in ('a"b', "a b", "a;b", "a\\b", ""):
        with pytest.raises(ValueError, match="admin password"):
            BrokerAuth(admin_password=bad)


def test_secret_files_are_private(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "secret")
    assert path.read_text() == "secret" and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_local_broker_writes_the_security_settings(tmp_path: Path) -> None:
    auth = BrokerAuth(admin_password="pw-2")
    kafka = LocalKafka(tmp_path, port=1234, controller_port=1235, auth=auth)
    text = kafka._server_properties()
    assert "listeners=SASL_PLAINTEXT://127.0.0.1:1234,CONTROLLER://127.0.0.1:1235\n" in text
    assert "PLAINTEXT://127.0.0.1:1234" not in text.replace("SASL_PLAINTEXT", "")
    assert kafka.client_config() == {"bootstrap.servers": "127.0.0.1:1234", "security.protocol": "SASL_PLAINTEXT",
                                     "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
                                     "sasl.password": "pw-2"}
    assert LocalKafka(tmp_path, port=1234).client_config() == {"bootstrap.servers": "127.0.0.1:1234"}
