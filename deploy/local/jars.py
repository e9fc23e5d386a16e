"""The pinned Apache Kafka broker jars, fetched once with Maven, and the ``java`` command that runs them.

Every local launcher (:mod:`deploy.local.node`, :mod:`deploy.local.cluster`,
:mod:`deploy.local.detached`) starts the same JVM from the same jars, so the
pin (``pom.xml`` next to this file) is in one place and a fetch happens once
however many brokers start.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = ["KAFKA_VERSION", "KafkaLaunchError", "ensure_jars", "file_lock", "java_command", "last_lines",
           "require_tool"]

KAFKA_VERSION = "4.4.0"

_HERE = Path(__file__).resolve().parent
_POM = _HERE / "pom.xml"
_LOG4J_CONFIG = _HERE / "log4j2.yaml"
_CACHE_DIR = _HERE / ".kafka"
_MAVEN_TIMEOUT_S = 600.0
_JAVA_HINT = "a Java 17+ runtime (e.g. `apt-get install openjdk-17-jre-headless`)"


class KafkaLaunchError(RuntimeError):
    """The local broker could not be fetched, formatted, started or stopped."""


def ensure_jars() -> Path:
    """Fetch the pinned Kafka broker jars with Maven (once) and return the ``libs`` directory.

    The result is cached in ``deploy/local/.kafka/<version>/libs``; a marker file holding
    the pom's digest records a completed fetch, so later calls return immediately and a
    changed pom triggers a new fetch. A file lock makes concurrent callers wait for one fetch.
    """
    version_dir = _CACHE_DIR / KAFKA_VERSION
    libs = version_dir / "libs"
    marker = version_dir / "fetch-complete"
    digest = hashlib.sha256(_POM.read_bytes()).hexdigest()
    version_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(version_dir / ".lock"):
        if marker.is_file() and marker.read_text().strip() == digest:
            return libs
        require_tool("java", _JAVA_HINT)
        mvn = require_tool("mvn", "Apache Maven (e.g. `apt-get install maven`)")
        _fetch_jars(mvn, libs)
        marker.write_text(digest + "\n")
    return libs


def java_command(libs: Path, *jvm_options: str) -> list[str]:
    """The ``java`` command prefix with our log4j config and the jar classpath."""
    java = require_tool("java", _JAVA_HINT)
    return [java, *jvm_options, f"-Dlog4j2.configurationFile={_LOG4J_CONFIG}", "-cp", str(libs / "*")]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` for the duration of the block."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def require_tool(name: str, what_to_install: str) -> str:
    """Return the path of executable ``name`` or raise saying what to install."""
    found = shutil.which(name)
    if found is None:
        raise KafkaLaunchError(
            f"`{name}` was not found on PATH; the local Kafka broker needs it. Install {what_to_install}."
        )
    return found


def last_lines(text: str, count: int = 40) -> str:
    """The last ``count`` lines of ``text``."""
    return "\n".join(text.splitlines()[-count:])


def _fetch_jars(mvn: str, libs: Path) -> None:
    """Copy the pom's runtime dependencies into ``libs`` (replacing it only on success)."""
    staging = libs.with_name("libs.partial")
    shutil.rmtree(staging, ignore_errors=True)
    command = [mvn, "-q", "-B", "-f", str(_POM), "dependency:copy-dependencies",
               f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise KafkaLaunchError(
            f"Maven did not finish fetching the Kafka jars within {_MAVEN_TIMEOUT_S:.0f}s; "
            "check that Maven Central is reachable and retry."
        ) from exc
    if result.returncode != 0:
        raise KafkaLaunchError(
            f"Maven failed to fetch the Kafka {KAFKA_VERSION} jars (exit {result.returncode}); "
            f"check network access to Maven Central.\n{last_lines(result.stdout + result.stderr)}"
        )
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
