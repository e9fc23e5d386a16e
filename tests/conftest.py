"""Shared pytest fixtures.

Kafka: ``kafka_bootstrap`` gives every ``broker`` test one session-wide broker, chosen in order:
``$FAULTLINE_KAFKA`` (an existing broker), a testcontainers ``KafkaContainer`` when a Docker engine
answers, else a real local broker from :mod:`deploy.local.kafka` (needs ``java`` and ``mvn``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

KAFKA_ENV = "FAULTLINE_KAFKA"

# The tests run in development mode (common/settings.py): stages start without production keys.
# A test of the production posture removes it (monkeypatch.delenv).
os.environ.setdefault("FAULTLINE_DEV_MODE", "true")


# --------------------------------------------------------------------------- Kafka broker


def _docker_engine_answers(timeout: float = 5.0) -> bool:
    """Whether ``docker info`` succeeds quickly (a CLI without an engine does not count)."""
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        result = subprocess.run([docker, "info"], capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


@contextlib.contextmanager
def _container_kafka() -> Iterator[str]:
    """A KRaft Kafka broker in a testcontainers container."""
    from testcontainers.community.kafka import KafkaContainer

    with KafkaContainer().with_kraft() as container:
        yield container.get_bootstrap_server()


@contextlib.contextmanager
def _local_kafka(data_dir: Path) -> Iterator[str]:
    """A real Kafka broker run from Maven-fetched jars, stopped on exit."""
    from deploy.local.kafka import LocalKafka

    with LocalKafka(data_dir) as kafka:
        yield kafka.bootstrap


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of the session's Kafka broker (see the module docstring for the choice)."""
    external = os.environ.get(KAFKA_ENV)
    if external:
        yield external
    elif _docker_engine_answers():
        with _container_kafka() as bootstrap:
            yield bootstrap
    else:
        with _local_kafka(tmp_path_factory.mktemp("kafka")) as bootstrap:
            yield bootstrap


# --------------------------------------------------------------------------- naming


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A fresh name for this test's topics / consumer groups, limited to ``[A-Za-z0-9._-]``."""
    raw = f"t-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"
    return re.sub(r"[^A-Za-z0-9._-]", "-", raw)


# --------------------------------------------------------------------------- Kubernetes API server


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real etcd + kube-apiserver for the session (:mod:`tests.kube_apiserver`); skipped, with the
    reason, where the binaries were not built."""
    from tests.kube_apiserver import apply_chart_rbac, missing_apiserver, start_apiserver
    from tests.kube_objects import Objects

    reason = missing_apiserver()
    if reason:
        pytest.skip(reason)
    with start_apiserver(tmp_path_factory.mktemp("kube")) as server:
        Objects(server.client()).crds()
        apply_chart_rbac(server)  # the executor and job source users get exactly the chart's grants
        yield server
