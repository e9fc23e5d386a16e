"""Authentication (SASL/SCRAM-SHA-512), TLS and authorization (ACLs) for the local Kafka broker.

A :class:`BrokerAuth` handed to :class:`deploy.local.kafka.LocalKafka` turns its client
listener into ``SASL_PLAINTEXT`` with SCRAM-SHA-512 -- or, with ``tls`` (:func:`make_tls`: a
private CA and a broker certificate for 127.0.0.1, made with ``openssl``), ``SASL_SSL`` --
so a client without valid credentials (or that does not trust the CA) is
refused, and (``authorize=True``, the default) turns on KRaft's ``StandardAuthorizer`` with
``allow.everyone.if.no.acl.found=false``: a user may do only what an ACL grants it
(:mod:`deploy.acls` holds the per-service table), except the admin, a super user::

    auth = BrokerAuth.generate()
    with LocalKafka(tmp_path / "kafka", auth=auth) as kafka:
        auth.add_users(kafka.bootstrap, {"faultline-agent": "..."})
        use(kafka.bootstrap, auth.client_config())

Why it is built this way:

* SCRAM credentials live in the cluster metadata, so the broker cannot check the admin's (the
  user brokers talk to each other as) before it has metadata: the admin's credential is written
  at storage format time (``StorageTool format --add-scram``); other users are added later
  through the admin API (:meth:`BrokerAuth.add_users`), as on a real cluster.
* KRaft controllers cannot authenticate with SCRAM (same chicken-and-egg), so the controller
  listener speaks SASL PLAIN with the admin as its one static user: nothing reaches the
  controller anonymously, and the admin is the only super user.
* The admin password is on no command line (another local user could read it in ``ps``): the
  format arguments go through a ``java @argfile`` readable by us only, deleted right after;
  ``server.properties`` (which holds it in the JAAS lines) is written readable by us only. Kafka
  logs JAAS configs as ``[hidden]``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

__all__ = ["BrokerAuth", "SCRAM_MECHANISM", "SCRAM_ITERATIONS", "TlsFiles", "make_tls", "write_private"]

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
_STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
# What may appear inside the JAAS quotes and the StorageTool's [name=...,password=...] unescaped.
_SAFE = re.compile(r"[A-Za-z0-9._~+/=@-]{1,128}")


def _check_safe(what: str, value: str) -> None:
    if not _SAFE.fullmatch(value):
        raise ValueError(f"{what} must be 1-128 characters of A-Z a-z 0-9 . _ ~ + / = @ - "
                         "(it is written into JAAS and StorageTool arguments unescaped)")


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable and writable by this user only (it may hold secrets)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


@dataclass(frozen=True)
class TlsFiles:
    """A private CA and the broker's key and certificate chain (PEM), as :func:`make_tls` writes them."""

    ca: Path  # the CA certificate: what clients trust (FAULTLINE_KAFKA_SSL_CA_FILE)
    keystore: Path  # the broker's private key (PKCS#8) and certificate chain, readable by us only


def make_tls(directory: Path, host: str = "127.0.0.1", days: int = 2) -> TlsFiles:
    """A fresh private CA and a broker certificate for ``host`` (and localhost), with ``openssl``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("openssl is needed to make the test CA: apt-get install openssl")
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (directory / n for n in ("ca.key", "ca.pem", "broker.key", "broker.csr", "broker.pem"))
    ext = directory / "broker.ext"
    ext.write_text(f"subjectAltName=IP:{host},DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", str(days),
        "-subj", "/CN=faultline test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={host}")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", str(days), "-extfile", str(ext))
    keystore = directory / "broker-keystore.pem"
    write_private(keystore, key.read_text() + cert.read_text() + ca.read_text())
    for secret in (ca_key, key):
        secret.unlink()
    return TlsFiles(ca=ca, keystore=keystore)


@dataclass(frozen=True)
class BrokerAuth:
    """SCRAM-SHA-512 on the client listener, PLAIN on the controller listener, ACLs if ``authorize``.

    ``admin_password`` is kept out of ``repr`` (the object ends up in test ids and tracebacks).
    """

    admin_password: str = field(repr=False)
    admin_user: str = "admin"
    authorize: bool = True
    tls: TlsFiles | None = None  # SASL_SSL instead of SASL_PLAINTEXT on the client listener

    def __post_init__(self) -> None:
        _check_safe("the admin user", self.admin_user)
        _check_safe("the admin password", self.admin_password)

    @classmethod
    def generate(cls, authorize: bool = True, tls: TlsFiles | None = None) -> BrokerAuth:
        """An admin with a fresh random password."""
        return cls(admin_password=secrets.token_urlsafe(24), authorize=authorize, tls=tls)

    @property
    def protocol(self) -> str:
        """The client listener's security protocol."""
        return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"

    # ----------------------------------------------------------------------- broker side

    def server_properties(self, listener_host: str, port: int, controller_port: int) -> dict[str, str]:
        """The broker settings that replace LocalKafka's plaintext listeners."""
        admin = f'username="{self.admin_user}" password="{self.admin_password}"'
        proto, name = self.protocol, self.protocol.lower()
        props = {
            "listeners": f"{proto}://{listener_host}:{port},CONTROLLER://{listener_host}:{controller_port}",
            "advertised.listeners": f"{proto}://{listener_host}:{port}",
            "listener.security.protocol.map": f"{proto}:{proto},CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": proto,
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            f"listener.name.{name}.scram-sha-512.sasl.jaas.config": f"{_SCRAM_LOGIN} required {admin};",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config":
                f'{_PLAIN_LOGIN} required {admin} user_{self.admin_user}="{self.admin_password}";',
        }
        if self.tls is not None:  # the broker presents its certificate and trusts the CA (for itself)
            props |= {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(self.tls.keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.tls.ca),
            }
        if self.authorize:
            props |= {
                "authorizer.class.name": _STANDARD_AUTHORIZER,
                "super.users": f"User:{self.admin_user}",
                "allow.everyone.if.no.acl.found": "false",
            }
        return props

    def format_arguments(self) -> list[str]:
        """Extra ``StorageTool format`` arguments: the admin's SCRAM credential (secret: use an argfile)."""
        return ["--add-scram", f"{SCRAM_MECHANISM}=[name={self.admin_user},password={self.admin_password}]"]

    # ----------------------------------------------------------------------- client side

    def client_config(self, user: str | None = None, password: str = "") -> dict[str, Any]:
        """librdkafka security settings for ``user`` and ``password`` (default: the admin's); add
        ``bootstrap.servers``."""
        conf = {
            "security.protocol": self.protocol,
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.username": user or self.admin_user,
            "sasl.password": password if user else self.admin_password,
        }
        if self.tls is not None:
            conf["ssl.ca.location"] = str(self.tls.ca)
        return conf

    def add_users(self, bootstrap: str, users: Mapping[str, str], timeout: float = 30.0) -> None:
        """Create (or reset) SCRAM-SHA-512 credentials for ``users`` (name -> password), as the admin."""
        for name, password in users.items():
            _check_safe(f"user {name!r}", name)
            if not password:
                raise ValueError(f"user {name!r}: an empty password")
        admin = AdminClient({"bootstrap.servers": bootstrap, **self.client_config()})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
        upserts: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(name, info, password.encode()) for name, password in users.items()]
        for name, future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).items():
            try:
                future.result(timeout=timeout)
            except Exception as exc:  # the exception names the user, never the password
                raise RuntimeError(f"could not set the SCRAM credential of {name}: {exc}") from None
