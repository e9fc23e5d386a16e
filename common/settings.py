"""Configuration, validated at start (environment variables ``FAULTLINE_*`` or a .env file).

Every knob is documented here; secrets are ``SecretStr`` and never printed (the archive URL,
which may carry a password, is shown masked). Each secret may come from a file instead of the
environment: ``FAULTLINE_<NAME>_FILE`` names it (Docker secrets, :mod:`common.secret_files`).

Production posture by default: a correlator worker or an executor refuses to start without
the keys that authenticate what it acts on (:meth:`Settings.require_keys`, called by each
stage at its start), unless ``FAULTLINE_DEV_MODE=true`` says this is development -- which the
demo, ``faultline replay`` and the tests set, and which every stage then says loudly in its
log and ``faultline status`` shows.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_serializer, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from common.redact import mask_url
from common.secret_files import SecretFiles, secret_fields
from streams.cells import DEFAULT_CELL, check_cell
from streams.health import HEARTBEAT_EVERY_S
from streams.signing import SigningKeys

__all__ = ["Settings", "REPO_ROOT", "MissingKeys", "Stage", "default_data_dir", "describe_settings_error"]

log = logging.getLogger("faultline.settings")

Stage = Literal["worker", "executor"]
_KEY_FORMAT = "'KEY_ID:SECRET,...' from a secret (the first key signs; secrets of 16+ characters)"


class MissingKeys(RuntimeError):
    """A production start without the keys it needs; the message says which settings to set."""

REPO_ROOT = Path(__file__).resolve().parents[1]
_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL")
# One bootstrap server: a host name or IPv4 address, or an IPv6 address in brackets, and an optional port.
_BOOTSTRAP_SERVER = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252})|\[[0-9A-Fa-f:.]+\])(?::(\d{1,5}))?")


def default_data_dir(root: Path = REPO_ROOT) -> Path:
    """``<checkout>/var`` when running from a source checkout; else the user's data directory.

    Installed with pip, ``REPO_ROOT`` is ``site-packages``: a broker's data and an archive do not
    belong there. Then ``$XDG_DATA_HOME/faultline`` (``~/.local/share/faultline``) is used.
    """
    if (root / "pyproject.toml").is_file():
        return root / "var"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "faultline"


class Settings(BaseSettings):
    # hide_input_in_errors: a validation error would otherwise print every setting, secrets included.
    # secrets_dir: files named like the variables (FAULTLINE_SIGNING_KEYS, ...) in the directory systemd's
    # LoadCredential= hands a service (deploy/slurm), so keys need not sit in an environment file.
    model_config = SettingsConfigDict(env_prefix="FAULTLINE_", env_file=".env", extra="ignore",
                                      hide_input_in_errors=True,
                                      secrets_dir=os.environ.get("CREDENTIALS_DIRECTORY") or None)

    kafka: str | None = Field(
        None, description="Kafka bootstrap servers (host:port,...). Unset: start/reuse the local broker.")
    namespace: str = Field("faultline", description="Prefix of every topic name; replays add their own suffix.")
    cell: str = Field(
        DEFAULT_CELL, description="The cell this process's events belong to: a set of nodes that no job, rack or "
        "power domain crosses, judged together by one engine. Events are keyed by it, so a cell stays in one "
        "events partition; a namespace may hold many cells over many partitions (streams/cells.py).")
    data_dir: Path = Field(
        default_factory=default_data_dir, description="Where the local broker, the embedded archive and worker "
        "logs live. Default: <checkout>/var in a source checkout, else $XDG_DATA_HOME/faultline "
        "(~/.local/share/faultline).")
    archive: str | None = Field(
        None, repr=False, description="ClickHouse: chdb:///path (embedded) or http(s)://user:password@host:8123. "
        "Unset: <data_dir>/archive. Shown masked (archive_shown): it may carry a password.")
    archive_endpoint_port: int = Field(
        0, ge=0, le=65535, description="Sink, embedded archive: serve it to other processes (and Grafana) on this "
        "loopback port (0: a random one, in the directory's endpoint file).")
    archive_endpoint_password_file: Path | None = Field(
        None, description="Sink, embedded archive: the endpoint's password, from this file (one line, 16+ characters, "
        "not readable by other users). Unset: a random token (sinks/archive/endpoint_listen.py).")
    policy: Path | None = Field(None, description="Correlator policy YAML merged over the defaults.")
    kafka_security_protocol: str = Field(
        "PLAINTEXT", description="PLAINTEXT, SASL_PLAINTEXT, SASL_SSL or SSL (TLS: verified against the system CAs, "
        "or FAULTLINE_KAFKA_SSL_CA_FILE). Every client honours it: confluent-kafka (kafka_config) and the Faust "
        "worker (correlators/broker_auth.py).")
    kafka_ssl_ca_file: Path | None = Field(
        None, description="With SSL/SASL_SSL: PEM file of the CA(s) that signed the brokers' certificates (a "
        "private CA). Unset: the system's CA store.")
    kafka_ssl_cert_file: Path | None = Field(
        None, description="With SSL/SASL_SSL and a broker that asks for client certificates (mTLS): this "
        "service's certificate (PEM).")
    kafka_ssl_key_file: Path | None = Field(
        None, description="... and its private key (PEM); a mounted secret, readable by the service only.")
    kafka_ssl_key_password: SecretStr | None = Field(
        None, description="... and the key's passphrase, if it has one.")
    kafka_sasl_mechanism: str | None = Field(
        None, description="With SASL_*: SCRAM-SHA-512 (recommended), SCRAM-SHA-256 or PLAIN.")
    kafka_username: str | None = Field(
        None, description="With SASL_*: this service's own Kafka user (deploy/acls.py grants each service "
        "what it needs: faultline-agent, -operator, -correlator, -sink, -executor).")
    kafka_password: SecretStr | None = Field(
        None, description="With SASL_*: the user's password. From the environment or a mounted secret; "
        "never printed, never on a command line.")
    live_clock: bool = Field(
        False, description="Worker: also advance event time with the wall clock (live, not replay), so "
        "debounce and settle windows close without waiting for the next event.")
    heartbeat_interval_s: float = Field(
        HEARTBEAT_EVERY_S, gt=0, description="Every stage: seconds between its own heartbeats; `faultline status` "
        "shows a stage down once silent for three of them (streams/health.py).")
    metrics_port: int = Field(
        0, description="Serve Prometheus metrics on this port (0: off). Deployments use 9464 agent, "
        "9465 correlator, 9466 sink, 9467 executor (deploy/prometheus/prometheus.yml).")
    metrics_address: str | None = Field(
        None, description="The address the metrics listen on. Unset: 127.0.0.1 (loopback) in development mode, "
        "0.0.0.0 otherwise (Prometheus scrapes from another host); deployments may name an interface.")
    dev_mode: bool = Field(
        False, description="Development: workers and executors start without signing and snapshot keys "
        "(unsigned commands, unauthenticated approvals and results). Said loudly in every stage's log and in "
        "`faultline status`. The demo, `faultline replay` and the tests set it; never set it in production.")
    cluster: str = Field(
        "default", description="The compute cluster (Slurm cluster, Kubernetes cluster) this namespace's commands "
        "are for: the correlator signs it into every command and executors refuse commands for another, so one "
        "key set may serve several clusters. Letters, digits, '.', '_', '-'.")
    signing_keys: SecretStr | None = Field(
        None, description=f"Command keys, {_KEY_FORMAT}. The correlator signs every command (RFC 8785 JSON, "
        "HMAC-SHA256, with namespace, cluster and expiry); executors refuse unsigned, tampered, unknown-key, "
        "expired and other-scope ones. Required by workers and executors unless FAULTLINE_DEV_MODE.")
    operator_keys: SecretStr | None = Field(
        None, description=f"Operator keys, {_KEY_FORMAT}; the key id is the person. `faultline approve`/`deny`/"
        "`quarantine`/`release` sign with the first; executors accept decisions, and the correlator quarantines "
        "and releases, signed by any (one key per operator). Required by workers and executors unless "
        "FAULTLINE_DEV_MODE.")
    executor_keys: SecretStr | None = Field(
        None, description=f"Result keys, {_KEY_FORMAT}. Executors sign every result and learn from the results "
        "topic only what such a key signed. Required by executors unless FAULTLINE_DEV_MODE.")
    webhook_url: SecretStr | None = Field(
        None, description="Webhook executor: where tickets and notifications are POSTed; a secret, as a URL may "
        "carry a token (never on a command line).")
    webhook_token: SecretStr | None = Field(
        None, description="Webhook executor: sent as 'Authorization: Bearer <token>'.")
    command_ttl_s: float = Field(3600, description="Signed commands expire this long (wall clock) after issue.")
    snapshot_every_events: int = Field(
        50_000, description="Worker: snapshot each events partition's correlator state to the compacted topic "
        "'<app id>-snapshots' after this many judged events (0: no snapshots; a takeover then replays the whole "
        "retained partition). A takeover restores the newest snapshot and replays only the events after it, so "
        "this bounds its work (correlators/snapshots.py).")
    snapshot_every_s: float = Field(
        300.0, description="Worker: ...or after this many seconds since the partition's last snapshot, whichever "
        "comes first (checked as records are judged).")
    worker_fetch_wait_ms: int = Field(
        50, ge=1, le=1500, description="Worker: the longest the broker holds one of the worker's fetches waiting for "
        "data. Faust's own 1.5 s left a busy events partition waiting behind a fetch of the worker's empty internal "
        "partitions (correlators/faust_consumer.py); shorter costs one more empty fetch per idle interval.")
    snapshot_key: SecretStr | None = Field(
        None, description="Worker: key that authenticates state snapshots (HMAC-SHA256); every worker of a "
        "namespace needs the same one. Required by workers that take snapshots unless FAULTLINE_DEV_MODE (unset, "
        "only the topic ACL keeps forged state out).")
    replay_batch_events: int = Field(
        500, ge=1, le=10_000, description="`faultline replay`: at most this many events per record of "
        "the events topic (a batch envelope, streams/batch.py; 1: one event per record, the shape readers older "
        "than batches take). Fewer, fuller records are what lets the correlator keep up (producers/batching.py).")
    replay_batch_window_ms: float = Field(
        1000.0, ge=0, description="`faultline replay`: a batch holds events within this much event time of its "
        "first one (a node agent's tick), so a sparse capture's records stay small; batches are runs of consecutive "
        "lines either way, so the capture's order is kept exactly.")
    local_kafka_port: int = Field(19092, description="Port of the local broker started when `kafka` is unset.")
    schema_registry: str | None = Field(
        None, description="A Confluent-compatible schema registry (http(s)://host:8081). Set: `faultline topics "
        "apply` and `faultline schemas register` register every topic's JSON Schema as <topic>-value. Unset: none.")
    schema_registry_username: str | None = Field(None, description="The schema registry's basic-auth user, if any.")
    schema_registry_password: SecretStr | None = Field(
        None, description="The schema registry user's password; never printed.")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        """FAULTLINE_<SECRET>_FILE (common/secret_files.py) after the environment, before .env and secrets_dir."""
        files = SecretFiles(settings_cls, secret_fields(settings_cls, also=("archive",)), "FAULTLINE_")
        return init_settings, env_settings, files, dotenv_settings, file_secret_settings

    @field_validator("cell")
    @classmethod
    def _cell_name(cls, v: str) -> str:
        return check_cell(v)

    @field_validator("cluster")
    @classmethod
    def _cluster_name(cls, v: str) -> str:
        try:
            return check_cell(v)
        except ValueError:
            raise ValueError(f"cluster name {v!r} must be 1-128 characters of letters, digits, '.', '_' or '-'") \
                from None

    @field_validator("kafka", "archive", "archive_endpoint_password_file", "policy", "kafka_sasl_mechanism", "kafka_ssl_ca_file",
                     "kafka_ssl_cert_file", "kafka_ssl_key_file", "metrics_address", "schema_registry",
                     mode="before")
    @classmethod
    def _empty_is_unset(cls, v: object) -> object:
        """``FAULTLINE_POLICY=`` (empty, as compose files write it) means unset, not the current directory."""
        return None if v == "" else v

    @field_validator("kafka", mode="after")
    @classmethod
    def _bootstrap_list(cls, v: str | None) -> str | None:
        """``host[:port],...`` and nothing else (``garbage!!`` fails here, naming the setting, not at the broker)."""
        for server in (v or "").split(",") if v is not None else ():
            m = _BOOTSTRAP_SERVER.fullmatch(server)
            if m is None or (m.group(1) is not None and not 0 < int(m.group(1)) < 65536):
                which = f" ({server!r} is not)" if "," in (v or "") else ""
                raise ValueError(f"expected host:port[,host:port...], each a host name or address and a port from 1 "
                                 f"to 65535{which}")
        return v

    @field_validator("kafka_security_protocol", mode="after")
    @classmethod
    def _known_protocol(cls, v: str) -> str:
        if v.upper() not in _PROTOCOLS:
            raise ValueError(f"unknown Kafka security protocol {v!r}; use one of {', '.join(_PROTOCOLS)}")
        return v.upper()

    @model_validator(mode="after")
    def _sasl_is_complete(self) -> Settings:
        """SASL without a mechanism, user or password would fail later, at the broker, less clearly."""
        if self.kafka_security_protocol.startswith("SASL_"):
            needed = ["kafka_sasl_mechanism"]
            if self.kafka_sasl_mechanism in (None, "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                needed += ["kafka_username", "kafka_password"]
            missing = [f"FAULTLINE_{name.upper()}" for name in needed if not getattr(self, name)]
            if missing:
                raise ValueError(f"FAULTLINE_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs "
                                 f"{', '.join(missing)} too")
        return self

    @field_serializer("archive")
    def _archive_masked(self, v: str | None) -> str | None:
        return mask_url(v) if v else v

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        yield from super().__repr_args__()
        yield "archive", self.archive_shown

    def signing(self) -> SigningKeys | None:
        """The correlator's command keys (FAULTLINE_SIGNING_KEYS), or None."""
        return _keys(self.signing_keys)

    def operators(self) -> SigningKeys | None:
        """The operators' approval keys (FAULTLINE_OPERATOR_KEYS), or None."""
        return _keys(self.operator_keys)

    def executors(self) -> SigningKeys | None:
        """The executors' result keys (FAULTLINE_EXECUTOR_KEYS), or None."""
        return _keys(self.executor_keys)

    def required_keys(self, stage: Stage) -> list[str]:
        """The ``FAULTLINE_*`` key settings ``stage`` needs in production."""
        if stage == "worker":
            return ["FAULTLINE_SIGNING_KEYS", "FAULTLINE_OPERATOR_KEYS"] + (
                ["FAULTLINE_SNAPSHOT_KEY"] if self.snapshot_every_events else [])
        return ["FAULTLINE_SIGNING_KEYS", "FAULTLINE_OPERATOR_KEYS", "FAULTLINE_EXECUTOR_KEYS"]

    def require_keys(self, stage: Stage) -> list[str]:
        """At a stage's start: raise :class:`MissingKeys` naming the key settings that are unset.

        In development mode nothing is raised: the missing settings are returned and logged
        loudly (and the mode itself always is), so it cannot pass unnoticed.
        """
        missing = [name for name in self.required_keys(stage)
                   if getattr(self, name.removeprefix("FAULTLINE_").lower()) is None]
        if self.dev_mode:
            log.warning("*** DEVELOPMENT MODE (FAULTLINE_DEV_MODE=true): faultline %s runs%s; never in "
                        "production ***", stage, f" without {', '.join(missing)}" if missing else "")
            return missing
        if missing:
            raise MissingKeys(
                f"missing {', '.join(missing)}: a production {stage} does not start without "
                f"{'them' if len(missing) > 1 else 'it'}; set {'them' if len(missing) > 1 else 'it'} "
                f"({_KEY_FORMAT}; OPERATIONS.md, 'Keys'), or for development only FAULTLINE_DEV_MODE=true")
        return []

    @property
    def archive_url(self) -> str:
        """Where the archive is (with its credentials: to connect, never to print; see :attr:`archive_shown`)."""
        return self.archive or f"chdb://{(self.data_dir / 'archive').resolve()}"

    @property
    def archive_shown(self) -> str:
        """:attr:`archive_url` with any password masked, for messages and logs."""
        return mask_url(self.archive_url)

    @property
    def metrics_bind(self) -> str:
        """The address the metrics server listens on (see ``metrics_address``)."""
        return self.metrics_address or ("127.0.0.1" if self.dev_mode else "0.0.0.0")

    def child_env(self) -> dict[str, str | None]:
        """Every setting as the ``FAULTLINE_*`` variable that gives it to a child process (None: unset).

        For processes we start (the Faust worker): secrets travel by environment, never argv,
        because a command line is public. Every field, so a new setting cannot be forgotten.
        """
        env: dict[str, str | None] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, bool):
                value = "true" if value else "false"
            env[f"FAULTLINE_{name.upper()}"] = None if value is None else str(value)
        for name in secret_fields(type(self), also=("archive",)):  # the value travels: no *_FILE beside it
            env[f"FAULTLINE_{name.upper()}_FILE"] = None
        return env

    def kafka_security_env(self) -> dict[str, str | None]:
        """The ``FAULTLINE_KAFKA_*`` variables of the broker credentials (None: unset); see :meth:`child_env`."""
        keys = ("FAULTLINE_KAFKA_SECURITY_PROTOCOL", "FAULTLINE_KAFKA_SASL_MECHANISM", "FAULTLINE_KAFKA_USERNAME",
                "FAULTLINE_KAFKA_PASSWORD")
        env = self.child_env()
        return {key: env[key] for key in keys}

    def kafka_config(self, bootstrap: str) -> dict[str, Any]:
        """librdkafka settings for confluent-kafka clients (secrets included: never log this)."""
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": self.kafka_security_protocol}
        if self.kafka_sasl_mechanism:
            conf["sasl.mechanism"] = self.kafka_sasl_mechanism
            conf["sasl.username"] = self.kafka_username or ""
            conf["sasl.password"] = self.kafka_password.get_secret_value() if self.kafka_password else ""
        if self.kafka_security_protocol.endswith("SSL"):
            for key, path in (("ssl.ca.location", self.kafka_ssl_ca_file),
                              ("ssl.certificate.location", self.kafka_ssl_cert_file),
                              ("ssl.key.location", self.kafka_ssl_key_file)):
                if path is not None:
                    conf[key] = str(path)
            if self.kafka_ssl_key_password is not None:
                conf["ssl.key.password"] = self.kafka_ssl_key_password.get_secret_value()
        return conf


_EXPECTED = {
    "int_parsing": "a whole number", "int_from_float": "a whole number", "float_parsing": "a number",
    "bool_parsing": "true or false (also 1/0, yes/no, on/off)", "path_type": "a path",
    "string_type": "text", "json_invalid": "valid JSON", "literal_error": "one of the listed values",
    "greater_than_equal": "a larger number", "less_than_equal": "a smaller number",
}


def describe_settings_error(exc: ValidationError) -> list[str]:
    """One line per bad ``FAULTLINE_*`` value: the variable, what it should be, what it was, what it is for.

    For a person at a terminal instead of pydantic's report. A secret's value is never repeated.
    """
    fields = Settings.model_fields
    lines = []
    for err in exc.errors():
        name = str(err["loc"][0]) if err.get("loc") else ""
        field = fields.get(name)
        if field is None:  # a check across settings (e.g. SASL needs a user): its message names them
            lines.append(str(err["msg"]).removeprefix("Value error, "))
            continue
        var = f"FAULTLINE_{name.upper()}"
        secret = field.annotation is not None and "SecretStr" in str(field.annotation)
        if err["type"] == "value_error":
            what = str(err["msg"]).removeprefix("Value error, ")
        else:
            what = f"expected {_EXPECTED.get(err['type'], str(err['msg']).lower())}"
        shown = mask_url(str(err["input"])) if name == "archive" and "input" in err else str(err.get("input", ""))
        got = "" if secret or "input" not in err else f", got {shown[:60]!r}"
        purpose = (field.description or "").split(". ")[0].rstrip(".")
        purpose = purpose if len(purpose) <= 90 else purpose[:89].rstrip() + "…"
        lines.append(f"{var}: {what}{got}" + (f" ({purpose})" if purpose else ""))
    return lines
def _keys(value: SecretStr | None) -> SigningKeys | None:
    return SigningKeys.parse(value.get_secret_value()) if value is not None else None
