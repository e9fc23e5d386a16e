"""The Docker Compose deployment and the image build file.

``docker compose config`` checks the file without an engine (none runs here). Compose is the
docker CLI's plugin; where the machine has none, ``deploy/local/setup.sh`` builds one into
``.tools/bin`` and points a project-local ``DOCKER_CONFIG`` (``.tools/docker``) at it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "deploy" / "compose" / "compose.yaml"
ENV_EXAMPLE = REPO / "deploy" / "compose" / ".env.example"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
FAULTLINE_SERVICES = ("topics", "correlator", "sink", "executor", "executor-slurm", "agent", "agent-gpu")
METRICS_PORTS = {"agent": 9464, "correlator": 9465, "sink": 9466, "executor": 9467}  # common/metrics.py


@functools.cache
def _compose() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | str:
    """The compose command and extra environment, or why there is none."""
    docker = shutil.which("docker")
    if docker is None:
        return "the docker CLI is not installed"
    candidates: list[dict[str, str]] = [{}]
    local = REPO / ".tools" / "docker"
    if (local / "config.json").is_file():
        candidates.append({"DOCKER_CONFIG": str(local)})
    for extra in candidates:
        done = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=30,
                              env={**os.environ, **extra})
        if done.returncode == 0:
            return (docker, "compose"), tuple(extra.items())
    return "the docker CLI has no compose plugin, and deploy/local/setup.sh has not built one into .tools/bin"


def _run(*args: str, env_file: Path = ENV_EXAMPLE) -> subprocess.CompletedProcess[str]:
    found = _compose()
    if isinstance(found, str):
        pytest.skip(found)
    command, extra = found
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAULTLINE_", "CLICKHOUSE_", "GRAFANA_"))}
    return subprocess.run([*command, "-f", str(COMPOSE), "--env-file", str(env_file), *args],
                          capture_output=True, text=True, timeout=60, env={**env, **dict(extra)})


@functools.cache
def _config() -> dict[str, Any]:
    done = _run("--profile", "agent", "--profile", "gpu", "--profile", "slurm", "config", "--format", "json")
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = json.loads(done.stdout)
    return config


def _env_keys(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value
    return out


# --------------------------------------------------------------------------- without compose


def test_env_example_names_every_variable_and_keeps_comments_off_values() -> None:
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", COMPOSE.read_text()))
    example = _env_keys(ENV_EXAMPLE)
    assert used <= set(example), sorted(used - set(example))
    assert not [k for k, v in example.items() if "#" in v]  # compose would read a trailing comment as the value


def test_dockerfile_is_slim_non_root_and_installs_the_project() -> None:
    text = DOCKERFILE.read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    assert "pip install ." in text
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    for source in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
        assert (REPO / source).exists(), source
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", "var", ".git", "tests"} <= set(ignored)


# --------------------------------------------------------------------------- docker compose config


def test_compose_config_is_valid_with_the_example_env() -> None:
    done = _run("config", "--quiet")
    assert done.returncode == 0, done.stderr


def test_a_missing_secret_is_refused(tmp_path: Path) -> None:
    env = tmp_path / "env"
    env.write_text("\n".join(line for line in ENV_EXAMPLE.read_text().splitlines()
                             if not line.startswith("CLICKHOUSE_PASSWORD=")))
    done = _run("config", "--quiet", env_file=env)
    assert done.returncode != 0 and "set CLICKHOUSE_PASSWORD" in done.stderr


def test_every_stage_is_there_and_waits_for_the_topic_plan() -> None:
    services = _config()["services"]
    assert set(services) == {"kafka", "clickhouse", "topics", "correlator", "sink", "executor", "executor-slurm",
                             "agent", "agent-gpu", "prometheus", "alertmanager", "grafana"}
    assert services["topics"]["command"] == ["faultline", "topics", "apply"]
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    for name in ("correlator", "sink", "executor", "executor-slurm", "agent", "agent-gpu"):
        assert services[name]["depends_on"]["topics"]["condition"] == "service_completed_successfully", name
    assert services["sink"]["depends_on"]["clickhouse"]["condition"] == "service_healthy"
    assert services["correlator"]["command"] == ["faultline", "worker"]
    assert services["sink"]["command"] == ["faultline", "sink", "run"]
    assert services["sink"]["environment"]["FAULTLINE_ARCHIVE_FILE"] == "/run/secrets/archive_url"  # it has a password
    assert services["executor"]["command"][-1] == "--dry-run"  # the example's safe default
    assert services["correlator"]["environment"]["FAULTLINE_LIVE_CLOCK"] == "true"
    for stage in ("correlator", "sink", "executor"):  # served where prometheus.yml scrapes
        assert services[stage]["environment"]["FAULTLINE_METRICS_PORT"] == str(METRICS_PORTS[stage])
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft


def test_faultline_containers_are_locked_down() -> None:
    services = _config()["services"]
    for name in FAULTLINE_SERVICES:
        s = services[name]
        assert s["cap_drop"] == ["ALL"] and s["read_only"] is True, name
        assert "no-new-privileges:true" in s["security_opt"], name
        assert s["build"]["dockerfile"] == "deploy/docker/Dockerfile", name
        if not name.startswith("agent"):
            assert "user" not in s, name  # the image's unprivileged user


def test_the_agent_reads_kmsg_read_only_and_the_gpu_profile_uses_the_nvidia_runtime() -> None:
    services = _config()["services"]
    for name in ("agent", "agent-gpu"):
        agent = services[name]
        assert agent["devices"] == [{"source": "/dev/kmsg", "target": "/dev/kmsg", "permissions": "r"}]
        assert agent["cap_add"] == ["SYSLOG"]
        assert agent["command"] == ["faultline", "agent", "--config", "/etc/faultline/agent.yaml"]
        assert {p["target"] for p in agent["ports"]} == {METRICS_PORTS["agent"]}
    assert services["agent"]["profiles"] == ["agent"] and "runtime" not in services["agent"]
    assert services["agent-gpu"]["profiles"] == ["gpu"] and services["agent-gpu"]["runtime"] == "nvidia"
    assert services["agent-gpu"]["environment"]["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    config = yaml.safe_load((COMPOSE.parent / "agent.yaml").read_text())
    assert config["sources"]["kernel_log"]["mode"] == "kmsg" and config["metrics_port"] == METRICS_PORTS["agent"]


def test_monitoring_is_provisioned_from_the_repository() -> None:
    services = _config()["services"]
    grafana = {v["target"]: Path(v["source"]) for v in services["grafana"]["volumes"] if v["type"] == "bind"}
    assert grafana["/etc/grafana/provisioning"] == REPO / "deploy" / "grafana" / "provisioning"
    assert grafana["/var/lib/grafana/dashboards/faultline"] == REPO / "deploy" / "grafana" / "dashboards"
    env = services["grafana"]["environment"]
    assert env["FAULTLINE_CLICKHOUSE_HOST"] == "clickhouse" and env["FAULTLINE_CLICKHOUSE_USER"] == "grafana"
    prometheus = {v["target"]: Path(v["source"]) for v in services["prometheus"]["volumes"] if v["type"] == "bind"}
    rules = prometheus["/etc/prometheus"]
    assert rules == REPO / "deploy" / "prometheus"
    # Prometheus' static targets are compose service names on the stages' metrics ports.
    scrape = rules / "prometheus.yml"
    if scrape.is_file():
        text = scrape.read_text()
        for stage in ("correlator", "sink", "executor"):
            if f"{stage}:" in text:
                assert f"{stage}:{METRICS_PORTS[stage]}" in text and stage in services
        if "alertmanager:9093" in text:
            assert "alertmanager" in services


# --------------------------------------------------------------------------- agent configs


# (the Helm chart's agent and job-source configs are rendered and checked in test_helm_chart.py)
AGENT_CONFIGS = ("deploy/compose/agent.yaml", "deploy/slurm/agent.yaml", "deploy/slurm/scheduler.yaml")


@pytest.mark.parametrize("path", AGENT_CONFIGS)
def test_every_shipped_agent_config_is_valid(path: str, tmp_path: Path) -> None:
    """The agent configs the deployments ship load, and each source's section validates."""
    from pydantic import ValidationError

    from producers.agent import load_config
    from producers.registry import SourceContext, load_factory

    config = load_config(REPO / path)
    assert config.sources
    ctx = SourceContext(node="gpu-node-01", state_dir=tmp_path)
    for name, settings in config.sources.items():
        try:
            source = load_factory(name)(ctx, settings)
        except ValidationError as exc:
            pytest.fail(f"{path}: sources.{name}: {exc}")
        except Exception:
            continue  # not a config error: a device or tool this machine lacks
        if source is not None:
            source.close()


# --------------------------------------------------------------------------- least exposure (issue 15)


def test_every_published_port_listens_on_loopback_only() -> None:
    services = _config()["services"]
    published = {name: s["ports"] for name, s in services.items() if s.get("ports")}
    assert {"kafka", "prometheus", "alertmanager", "grafana", "agent"} <= set(published)
    for name, ports in published.items():
        assert all(p.get("host_ip") == "127.0.0.1" for p in ports), (name, ports)


def test_the_broker_requires_sasl_on_every_listener_and_has_an_authorizer() -> None:
    env = _config()["services"]["kafka"]["environment"]
    protocols = dict(pair.split(":") for pair in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(protocols.values()) == {"SASL_PLAINTEXT"}, protocols
    listeners = env["KAFKA_LISTENERS"].split(",")
    assert {item.split(":")[0] for item in listeners} == set(protocols)
    assert "CONTROLLER://localhost:" in env["KAFKA_LISTENERS"]  # the controller: inside the container only
    # Who may log in: one JAAS file's KafkaServer section, for every listener (test_no_service_takes_a_password...)
    assert env["KAFKA_OPTS"] == "-Djava.security.auth.login.config=/run/secrets/kafka_server_jaas"
    assert not [k for k in env if k.endswith("SASL_JAAS_CONFIG")]
    assert env["KAFKA_AUTHORIZER_CLASS_NAME"].endswith("StandardAuthorizer")
    assert env["KAFKA_SUPER_USERS"] == "User:faultline-admin"
    stages = _config()["services"]
    for name in ("correlator", "sink", "executor", "topics"):
        assert stages[name]["environment"]["FAULTLINE_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT", name


def test_prometheus_has_no_lifecycle_api() -> None:
    assert not [a for a in _config()["services"]["prometheus"]["command"] if "lifecycle" in a]


# Every faultline setting that holds a secret, as its variable (common/secret_files.py names the same set).
_SECRET_VARS = ("FAULTLINE_SIGNING_KEYS", "FAULTLINE_OPERATOR_KEYS", "FAULTLINE_EXECUTOR_KEYS", "FAULTLINE_SNAPSHOT_KEY",
                "FAULTLINE_KAFKA_PASSWORD", "FAULTLINE_WEBHOOK_URL", "FAULTLINE_WEBHOOK_TOKEN")


def test_the_stages_take_their_keys_from_secret_files_never_the_environment() -> None:
    """Issue 27, item 6: Compose passed every key as a container environment variable (what `docker inspect`
    shows). Now each reaches its stage as a Docker secret, a file under /run/secrets that the stage's
    FAULTLINE_<SETTING>_FILE names; no faultline service has a key, token or password in its environment."""
    config = _config()
    services, secrets = config["services"], config["secrets"]
    example = _env_keys(ENV_EXAMPLE)
    for name, keys in {"correlator": ("signing_keys", "operator_keys", "snapshot_key", "kafka_correlator_password"),
                       "executor": ("signing_keys", "operator_keys", "executor_keys", "webhook_url", "webhook_token",
                                    "kafka_executor_password"),
                       "executor-slurm": ("signing_keys", "operator_keys", "executor_keys", "kafka_executor_password"),
                       "sink": ("kafka_sink_password",), "topics": ("kafka_admin_password",),
                       "agent": ("kafka_agent_password",), "agent-gpu": ("kafka_agent_password",)}.items():
        mounted = {s["source"]: s["target"] for s in services[name]["secrets"]}
        env = services[name]["environment"]
        for key in keys:
            assert mounted[key] == f"/run/secrets/{key}", (name, key)
            var = "FAULTLINE_KAFKA_PASSWORD" if key.startswith("kafka_") else f"FAULTLINE_{key.upper()}"
            assert env[f"{var}_FILE"] == f"/run/secrets/{key}", (name, var)
        assert not [v for v in _SECRET_VARS if v in env], name
        assert "FAULTLINE_DEV_MODE" not in env, name
    for key in ("signing_keys", "operator_keys", "executor_keys", "snapshot_key", "webhook_url", "webhook_token"):
        assert secrets[key]["file"] == str(COMPOSE.parent / "secrets" / key), key  # FAULTLINE_SECRETS_DIR
    assert secrets["kafka_agent_password"]["environment"] == "KAFKA_AGENT_PASSWORD"  # shared with the broker
    assert not [k for k in example if k in _SECRET_VARS]  # the keys are not in .env either
    for name in FAULTLINE_SERVICES:
        values = set(services[name].get("environment", {}).values())
        assert not values & {v for k, v in example.items() if "PASSWORD" in k and v}, name


def test_no_secret_is_on_a_command_line() -> None:
    for name, service in _config()["services"].items():
        command = " ".join(service.get("command") or [])
        assert "--url" not in command and "PASSWORD" not in command and "KEYS" not in command, (name, command)


# A variable that holds a secret by its name, unless it names the file that holds it.
_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|JAAS|_KEYS?$|_KEYS?_|^FAULTLINE_ARCHIVE$")
_STAGE_USERS = ("agent", "correlator", "sink", "executor", "operator")


def test_no_service_takes_a_password_from_its_environment() -> None:
    """Issue 27, item 6 (Compose): the faultline stages read their keys from files, but the broker's login
    table (every Kafka user's password), ClickHouse's and Grafana's passwords and the sink's archive URL were
    still container environment variables, which `docker inspect` shows. Now no service, infrastructure
    included, has a password in its environment, its health check or its command: each reads it from a Docker
    secret, through its image's documented file mechanism (the broker a JAAS file named by KAFKA_OPTS,
    ClickHouse CLICKHOUSE_PASSWORD_FILE, Grafana GF_SECURITY_ADMIN_PASSWORD__FILE and $__file{} in its
    provisioning, the sink FAULTLINE_ARCHIVE_FILE)."""
    config = _config()
    services, secrets = config["services"], config["secrets"]
    example = _env_keys(ENV_EXAMPLE)
    passwords = {k: v for k, v in example.items() if "PASSWORD" in k and v}
    assert len(passwords) >= 9, passwords
    for name, service in services.items():
        env = {k: v or "" for k, v in (service.get("environment") or {}).items()}
        for key, value in env.items():
            assert not [k for k, p in passwords.items() if p in value], (name, key)
            assert not _SECRET_NAME.search(key) or key.endswith("_FILE") or value == "", (name, key)
        elsewhere = json.dumps([service.get("command"), service.get("entrypoint"), service.get("healthcheck")])
        assert not [k for k, p in passwords.items() if p in elsewhere], name
        for secret in service.get("secrets", []):
            assert secret["target"] == f"/run/secrets/{secret['source']}", (name, secret)
    # The broker: a JAAS file (KafkaServer, for every listener) made by compose from .env's passwords.
    kafka = services["kafka"]
    assert kafka["environment"]["KAFKA_OPTS"] == "-Djava.security.auth.login.config=/run/secrets/kafka_server_jaas"
    assert {s["source"] for s in kafka["secrets"]} == {"kafka_server_jaas", "kafka_admin_password"}
    assert secrets["kafka_server_jaas"]["environment"] == "KAFKA_SERVER_JAAS"
    jaas = example["KAFKA_SERVER_JAAS"]
    assert jaas.startswith("KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required ")
    assert jaas.endswith("; };") and 'password="${KAFKA_ADMIN_PASSWORD:?' in jaas
    for user in _STAGE_USERS:
        assert f'user_faultline-{user}="${{KAFKA_{user.upper()}_PASSWORD:?set KAFKA_{user.upper()}_PASSWORD' in jaas
    assert "/run/secrets/kafka_admin_password" in " ".join(kafka["healthcheck"]["test"])
    # ClickHouse: the image's CLICKHOUSE_PASSWORD_FILE; its first-start script reads the files too.
    clickhouse = services["clickhouse"]
    assert clickhouse["environment"]["CLICKHOUSE_PASSWORD_FILE"] == "/run/secrets/clickhouse_password"
    assert clickhouse["environment"]["GRAFANA_CLICKHOUSE_PASSWORD_FILE"] == "/run/secrets/grafana_clickhouse_password"
    assert {s["source"] for s in clickhouse["secrets"]} == {"clickhouse_password", "grafana_clickhouse_password"}
    init = (COMPOSE.parent / "clickhouse" / "grafana-user.sh").read_text()
    assert '"$CLICKHOUSE_PASSWORD_FILE"' in init and '"$GRAFANA_CLICKHOUSE_PASSWORD_FILE"' in init
    assert "$CLICKHOUSE_PASSWORD " not in init and "${GRAFANA_CLICKHOUSE_PASSWORD}" not in init
    # Grafana: GF_<SECTION>_<KEY>__FILE, and its data source's password through Grafana's $__file{} expander.
    grafana = services["grafana"]
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/secrets/grafana_admin_password"
    assert {s["source"] for s in grafana["secrets"]} == {"grafana_admin_password", "grafana_clickhouse_password"}
    datasource = yaml.safe_load((REPO / "deploy" / "grafana" / "provisioning" / "datasources" / "clickhouse.yaml")
                                .read_text())["datasources"][0]
    assert datasource["secureJsonData"]["password"] == "$__file{/run/secrets/grafana_clickhouse_password}"
    # The sink: its archive URL (which carries ClickHouse's password) from a file, made from .env's password.
    assert services["sink"]["environment"]["FAULTLINE_ARCHIVE_FILE"] == "/run/secrets/archive_url"
    assert secrets["archive_url"]["environment"] == "FAULTLINE_ARCHIVE_URL"
    assert example["FAULTLINE_ARCHIVE_URL"].startswith("http://faultline:${CLICKHOUSE_PASSWORD:?")
    for key, var in (("clickhouse_password", "CLICKHOUSE_PASSWORD"), ("grafana_admin_password", "GRAFANA_ADMIN_PASSWORD"),
                     ("grafana_clickhouse_password", "GRAFANA_CLICKHOUSE_PASSWORD")):
        assert secrets[key]["environment"] == var, key


def test_a_missing_kafka_password_is_refused(tmp_path: Path) -> None:
    """The broker's login table names every stage's user: compose refuses to start without one's password."""
    env = tmp_path / "env"
    env.write_text("\n".join(line for line in ENV_EXAMPLE.read_text().splitlines()
                             if not line.startswith("KAFKA_SINK_PASSWORD=")))
    done = _run("config", "--quiet", env_file=env)
    assert done.returncode != 0 and "set KAFKA_SINK_PASSWORD" in done.stderr
