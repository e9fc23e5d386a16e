"""Shared pytest fixtures, and the hooks that keep guarantees from being skipped silently.

Kafka: ``kafka_bootstrap`` gives every ``broker`` test one session-wide broker, chosen in order:
``$FAULTLINE_KAFKA`` (an existing broker), a testcontainers ``KafkaContainer`` when a Docker engine
answers, else a real local broker from :mod:`deploy.local.kafka` (needs ``java`` and ``mvn``).

Reliability: every test RELIABILITY.md names as the proof of a guarantee is marked ``reliability``
(as are tests that carry the mark themselves); the summary counts how those ended and lists every
one that was skipped, with why (``FAULTLINE_STRICT_RELIABILITY=1`` makes such a skip fail the run).
A test marked ``shared_data`` (:func:`tests.harness.shared.needs_shared`) fails, never skips, when
the shared scenarios are missing.
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
from typing import Any

import pytest

pytest_plugins = ["pytester"]  # tests/test_no_silent_skips.py runs the hooks in a pytest of their own

KAFKA_ENV = "FAULTLINE_KAFKA"
REPO = Path(__file__).resolve().parents[1]
RELIABILITY_DOC = REPO / "RELIABILITY.md"
_STRICT_ENV = "FAULTLINE_STRICT_RELIABILITY"
# `tests/x/test_y.py` or `tests/x/test_y.py::test_name` in RELIABILITY.md
_REFERENCE = re.compile(r"`(tests/[\w/.-]+?\.py)(?:::(\w+))?")

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


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A replicated cluster of three local KRaft nodes (:class:`deploy.local.cluster.LocalKafkaCluster`) that
    tests may kill brokers of; each test leaves every node running and in sync again."""
    from deploy.local.cluster import LocalKafkaCluster

    with LocalKafkaCluster(tmp_path_factory.mktemp("cluster"), size=3) as cluster:
        yield cluster


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


# --------------------------------------------------------------------------- no silent skips


def reliability_references(doc: Path = RELIABILITY_DOC) -> set[tuple[str, str | None]]:
    """``(test file, test name or None for the whole file)`` for every test RELIABILITY.md cites."""
    text = doc.read_text(encoding="utf-8") if doc.is_file() else ""
    return {(path, name or None) for path, name in _REFERENCE.findall(text)}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    refs = reliability_references()
    for item in items:
        path = item.path.resolve().relative_to(REPO).as_posix() if item.path.is_relative_to(REPO) else ""
        name = getattr(item, "originalname", item.name)
        if (path, None) in refs or (path, name) in refs:
            item.add_marker(pytest.mark.reliability)


def pytest_runtest_setup(item: pytest.Item) -> None:
    from tests.harness.shared import missing_message

    for mark in item.iter_markers("shared_data"):
        if not all(Path(p).exists() for p in mark.args):
            pytest.fail(missing_message(Path(p) for p in mark.args), pytrace=False)


def _reliability_outcomes(reporter: Any) -> dict[str, list[Any]]:
    """Reliability test reports by outcome, one per test (its worst phase)."""
    worst: dict[str, tuple[int, str, Any]] = {}
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 2}
    for outcome in ("passed", "skipped", "failed", "error"):
        for report in reporter.stats.get(outcome, []):
            if "reliability" not in getattr(report, "keywords", {}):
                continue
            if outcome == "passed" and getattr(report, "when", "call") != "call":
                continue
            key = "failed" if outcome == "error" else outcome
            if report.nodeid not in worst or rank[key] > worst[report.nodeid][0]:
                worst[report.nodeid] = (rank[key], key, report)
    out: dict[str, list[Any]] = {"passed": [], "skipped": [], "failed": []}
    for _, key, report in worst.values():
        out[key].append(report)
    return out


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    outcomes = _reliability_outcomes(terminalreporter)
    if not any(outcomes.values()):
        return
    skipped = outcomes["skipped"]
    terminalreporter.write_sep("=", "reliability tests (RELIABILITY.md)", yellow=bool(skipped), red=bool(
        outcomes["failed"]), green=not skipped and not outcomes["failed"])
    terminalreporter.write_line(f"{len(outcomes['passed'])} passed, {len(outcomes['failed'])} failed, "
                                f"{len(skipped)} SKIPPED")
    for report in sorted(skipped, key=lambda r: r.nodeid):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        terminalreporter.write_line(f"SKIPPED {report.nodeid}: {reason}", yellow=True)
    if skipped and os.environ.get(_STRICT_ENV) == "1":
        terminalreporter.write_line(f"{_STRICT_ENV}=1: a skipped reliability test fails the run", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or os.environ.get(_STRICT_ENV) != "1":
        return
    if _reliability_outcomes(reporter)["skipped"] and exitstatus == 0:
        session.exitstatus = 1
