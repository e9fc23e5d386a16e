"""Configuration, validated at start (environment variables ``FAULTLINE_*`` or a .env file).

Every knob is documented here; secrets are ``SecretStr`` and never printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streams.cells import DEFAULT_CELL, check_cell
from streams.signing import SigningKeys

__all__ = ["Settings", "REPO_ROOT"]

REPO_ROOT = Path(__file__).resolve().parents[1]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FAULTLINE_", env_file=".env", extra="ignore")

    kafka: str | None = Field(
        None, description="Kafka bootstrap servers (host:port,...). Unset: start/reuse the local broker.")
    namespace: str = Field("faultline", description="Prefix of every topic name; replays add their own suffix.")
    cell: str = Field(
        DEFAULT_CELL, description="The cell this process's events belong to: a set of nodes that no job, rack or "
        "power domain crosses, judged together by one engine. Events are keyed by it, so a cell stays in one "
        "events partition; a namespace may hold many cells over many partitions (streams/cells.py).")
    data_dir: Path = Field(REPO_ROOT / "var", description="Where the local broker and embedded archive live.")
    archive: str | None = Field(
        None, description="ClickHouse: chdb:///path (embedded) or http(s)://host:8123. Unset: <data_dir>/archive.")
    policy: Path | None = Field(None, description="Correlator policy YAML merged over the defaults.")
    kafka_security_protocol: str = Field("PLAINTEXT", description="PLAINTEXT, SASL_PLAINTEXT, SASL_SSL or SSL.")
    kafka_sasl_mechanism: str | None = Field(None, description="e.g. SCRAM-SHA-512.")
    kafka_username: str | None = None
    kafka_password: SecretStr | None = None
    live_clock: bool = Field(
        False, description="Worker: also advance event time with the wall clock (live, not replay), so "
        "debounce and settle windows close without waiting for the next event.")
    metrics_port: int = Field(
        0, description="Serve Prometheus metrics on this port (0: off). Deployments use 9464 agent, "
        "9465 correlator, 9466 sink, 9467 executor (deploy/prometheus/prometheus.yml).")
    signing_keys: SecretStr | None = Field(
        None, description="'KEY_ID:SECRET,...' (first = active). The correlator signs every command; "
        "executors refuse unsigned, tampered, unknown-key and expired ones. Unset: unsigned (development).")
    command_ttl_s: float = Field(3600, description="Signed commands expire this long (wall clock) after issue.")
    local_kafka_port: int = Field(19092, description="Port of the local broker started when `kafka` is unset.")

    @field_validator("cell")
    @classmethod
    def _cell_name(cls, v: str) -> str:
        return check_cell(v)

    @field_validator("kafka", "archive", "policy", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: object) -> object:
        """``FAULTLINE_POLICY=`` (empty, as compose files write it) means unset, not the current directory."""
        return None if v == "" else v

    def signing(self) -> SigningKeys | None:
        return SigningKeys.parse(self.signing_keys.get_secret_value()) if self.signing_keys else None

    @property
    def archive_url(self) -> str:
        return self.archive or f"chdb://{(self.data_dir / 'archive').resolve()}"

    def kafka_config(self, bootstrap: str) -> dict[str, Any]:
        """librdkafka settings for confluent-kafka clients (secrets included: never log this)."""
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": self.kafka_security_protocol}
        if self.kafka_sasl_mechanism:
            conf["sasl.mechanism"] = self.kafka_sasl_mechanism
            conf["sasl.username"] = self.kafka_username or ""
            conf["sasl.password"] = self.kafka_password.get_secret_value() if self.kafka_password else ""
        return conf
