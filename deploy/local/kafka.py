"""Run a real Apache Kafka broker on loopback, without Docker and without a tarball download.

The broker jars are fetched once from Maven Central with the pinned ``pom.xml`` next to this
file (see :func:`ensure_jars`) and the broker runs in KRaft mode as a single combined
broker+controller node bound to ``127.0.0.1`` only.

Two ways to run it:

* :class:`LocalKafka` owns the JVM as a child process (tests, fixtures)::

      with LocalKafka(tmp_path / "kafka") as kafka:
          use(kafka.bootstrap)

* :func:`start_detached` / :func:`stop_detached` / :func:`detached_status` keep a broker
  running after Python exits, recorded in a state directory (CLI, ``faultline replay``)::

      python -m deploy.local.kafka start|stop|status [--state-dir DIR] [--port N]
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from deploy.local.kafka_security import BrokerAuth, write_private

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_STATE_DIR",
    "KAFKA_VERSION",
    "KafkaLaunchError",
    "LocalKafka",
    "detached_status",
    "ensure_jars",
    "main",
    "start_detached",
    "stop_detached",
]

KAFKA_VERSION = "4.4.0"
DEFAULT_PORT = 19092

_HERE = Path(__file__).resolve().parent
_POM = _HERE / "pom.xml"
_LOG4J_CONFIG = _HERE / "log4j2.yaml"
_CACHE_DIR = _HERE / ".kafka"
DEFAULT_STATE_DIR = Path(__file__).resolve().parents[2] / "var" / "kafka"

_LOOPBACK = "127.0.0.1"
_MAVEN_TIMEOUT_S = 600.0
_FORMAT_TIMEOUT_S = 120.0
_POLL_INTERVAL_S = 0.25
_PROBE_TIMEOUT_S = 2.0
_STATE_FILE = "broker.json"
_LOG_FILE = "broker.log"


class KafkaLaunchError(RuntimeError):
    """The local broker could not be fetched, formatted, started or stopped."""


# --------------------------------------------------------------------------- jars


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
    with _file_lock(version_dir / ".lock"):
        if marker.is_file() and marker.read_text().strip() == digest:
            return libs
        _require_tool("java", "a Java 17+ runtime (e.g. `apt-get install openjdk-17-jre-headless`)")
        mvn = _require_tool("mvn", "Apache Maven (e.g. `apt-get install maven`)")
        _fetch_jars(mvn, libs)
        marker.write_text(digest + "\n")
    return libs


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` for the duration of the block."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _require_tool(name: str, what_to_install: str) -> str:
    """Return the path of executable ``name`` or raise saying what to install."""
    found = shutil.which(name)
    if found is None:
        raise KafkaLaunchError(
            f"`{name}` was not found on PATH; the local Kafka broker needs it. Install {what_to_install}."
        )
    return found


def _fetch_jars(mvn: str, libs: Path) -> None:
    """Copy the pom's runtime dependencies into ``libs`` (replacing it only on success)."""
    staging = libs.with_name("libs.partial")
    shutil.rmtree(staging, ignore_errors=True)
    goal = "dependency:copy-dependencies"
    command = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(_POM),
        goal,
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
    ]
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
            f"check network access to Maven Central.\n{_last_lines(result.stdout + result.stderr)}"
        )
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)


# --------------------------------------------------------------------------- helpers


def _free_port(exclude: int | None = None) -> int:
    """Return a currently free TCP port on loopback, different from ``exclude``."""
    for _ in range(20):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((_LOOPBACK, 0))
            port = int(sock.getsockname()[1])
        if port != exclude:
            return port
    raise KafkaLaunchError("could not find a free loopback port")


def _port_open(port: int) -> bool:
    """Whether something accepts TCP connections on ``127.0.0.1:port``."""
    try:
        with socket.create_connection((_LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def _new_cluster_id() -> str:
    """Return a random KRaft cluster id (base64url of 16 bytes, as Kafka's ``Uuid``).

    The top bit of the first byte is cleared so the id never starts with ``-`` or ``_``
    (Kafka avoids a leading dash because the id is passed on command lines).
    """
    raw = bytearray(uuid.uuid4().bytes)
    raw[0] &= 0x7F
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode("ascii")


def _argfile_line(arg: str) -> str:
    """``arg`` as one line of a ``java @argfile``: quoted, with backslashes and quotes escaped."""
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"\n'


def _last_lines(text: str, count: int = 40) -> str:
    """The last ``count`` lines of ``text``."""
    return "\n".join(text.splitlines()[-count:])


def _log_tail(log: Path, count: int = 40) -> str:
    """The last ``count`` lines of the broker log, or a note that there is none."""
    try:
        with log.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64_000))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return f"(no broker log at {log})"
    return f"--- last lines of {log} ---\n{_last_lines(text, count)}"


def _broker_answers(
    bootstrap: str, attempts: int, is_alive: Callable[[], bool], deadline: float, security: dict[str, Any] | None = None
) -> bool:
    """Poll ``bootstrap`` with an AdminClient until it lists metadata, the deadline or death."""
    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.connection.setup.timeout.ms": 2000,
            "reconnect.backoff.max.ms": 500,
            "log_level": 0,  # connection-refused noise while the JVM boots
            **(security or {}),
        }
    )
    for _ in range(attempts):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not is_alive():
            return False
        try:
            if admin.list_topics(timeout=min(_PROBE_TIMEOUT_S, remaining)).brokers:
                return True
        except KafkaException:
            pass
        time.sleep(_POLL_INTERVAL_S)
    return False


def _wait_until_ready(
    bootstrap: str, timeout: float, is_alive: Callable[[], bool], log: Path, security: dict[str, Any] | None = None
) -> None:
    """Block until the broker answers metadata requests; raise with the log tail if it does not."""
    deadline = time.monotonic() + timeout
    attempts = int(timeout / _POLL_INTERVAL_S) + 1
    if _broker_answers(bootstrap, attempts, is_alive, deadline, security):
        return
    if not is_alive():
        raise KafkaLaunchError(f"the Kafka broker exited during startup.\n{_log_tail(log)}")
    raise KafkaLaunchError(
        f"the Kafka broker at {bootstrap} did not answer within {timeout:.0f}s.\n{_log_tail(log)}"
    )


# --------------------------------------------------------------------------- LocalKafka


class LocalKafka:
    """A single-node KRaft Kafka broker on loopback, run as a child JVM process.

    ``data_dir`` holds ``server.properties``, the log directories and ``broker.log``; storage
    is formatted only the first time a data dir is used, so a restart keeps earlier messages.
    ``port`` / ``controller_port`` default to free loopback ports chosen at construction.
    ``auth`` (:class:`~deploy.local.kafka_security.BrokerAuth`) makes clients authenticate with
    SCRAM-SHA-512 and, by default, turns ACLs on; clients then need :meth:`client_config`.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        controller_port: int | None = None,
        heap: str = "384m",
        auth: BrokerAuth | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port if port is not None else _free_port()
        self.controller_port = controller_port if controller_port is not None else _free_port(self.port)
        self.heap = heap
        self.auth = auth
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_handle: IO[bytes] | None = None

    def __repr__(self) -> str:
        return (
            f"LocalKafka(data_dir={str(self.data_dir)!r}, port={self.port}, "
            f"controller_port={self.controller_port}, heap={self.heap!r}, auth={self.auth!r}, "
            f"running={self.is_running()})"
        )

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` clients should use as ``bootstrap.servers``."""
        return f"{_LOOPBACK}:{self.port}"

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings an admin client needs here: the bootstrap, and the admin's credentials."""
        return {"bootstrap.servers": self.bootstrap, **(self.auth.client_config() if self.auth else {})}

    @property
    def log_path(self) -> Path:
        """Where the broker's stdout/stderr (log4j WARN and above) goes."""
        return self.data_dir / _LOG_FILE

    @property
    def config_path(self) -> Path:
        """The generated ``server.properties``."""
        return self.data_dir / "server.properties"

    def start(self, timeout: float = 90) -> None:
        """Start the broker (no-op if running) and wait until it answers metadata requests."""
        if self.is_running():
            return
        command = self._prepare()
        self._log_handle = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log_handle, stderr=subprocess.STDOUT
        )
        atexit.register(self.stop)
        try:
            _wait_until_ready(self.bootstrap, timeout, self.is_running, self.log_path, self.client_config())
        except KafkaLaunchError:
            self.stop()
            raise

    def stop(self, timeout: float = 30) -> None:
        """Stop the broker: SIGTERM, wait up to ``timeout`` seconds, then SIGKILL."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def restart(self, timeout: float = 90) -> None:
        """Stop (if running) and start again on the same data dir and ports."""
        self.stop()
        self.start(timeout)

    def is_running(self) -> bool:
        """Whether the broker JVM is alive (it may still be starting up)."""
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> LocalKafka:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _prepare(self) -> list[str]:
        """Fetch jars, write the config, format storage on first use; return the broker command."""
        if _port_open(self.port):
            raise KafkaLaunchError(
                f"port {self.port} on {_LOOPBACK} is already in use; choose another port "
                "or stop whatever listens there."
            )
        libs = ensure_jars()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_private(self.config_path, self._server_properties())  # with auth, it holds the admin's password
        if not (self._log_dir / "meta.properties").exists():
            self._format_storage(libs)
        return [
            *self._java(libs, f"-Xmx{self.heap}"),
            "kafka.Kafka",
            str(self.config_path),
        ]

    @property
    def _log_dir(self) -> Path:
        return self.data_dir / "kraft-logs"

    def _java(self, libs: Path, *jvm_options: str) -> list[str]:
        """The ``java`` command prefix with our log4j config and the jar classpath."""
        java = _require_tool("java", "a Java 17+ runtime (e.g. `apt-get install openjdk-17-jre-headless`)")
        return [
            java,
            *jvm_options,
            f"-Dlog4j2.configurationFile={_LOG4J_CONFIG}",
            "-cp",
            str(libs / "*"),
        ]

    def _server_properties(self) -> str:
        """The broker configuration: combined KRaft node, loopback listeners, RF 1 everywhere."""
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{_LOOPBACK}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{_LOOPBACK}:{self.port},CONTROLLER://{_LOOPBACK}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{_LOOPBACK}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self._log_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.num.partitions": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.auth is not None:
            settings.update(self.auth.server_properties(_LOOPBACK, self.port, self.controller_port))
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def _format_storage(self, libs: Path) -> None:
        """Format the KRaft log dir with a fresh cluster id (first start of a data dir only)."""
        format_args = ["format", "-t", _new_cluster_id(), "-c", str(self.config_path)]
        if self.auth is not None:
            format_args += self.auth.format_arguments()
        # Through a private `java @argfile` (main class and arguments), never argv: with auth they
        # hold the admin's password, and any local user can read a command line.
        argfile = self.data_dir / "format.args"
        write_private(argfile, "".join(_argfile_line(arg) for arg in ["kafka.tools.StorageTool", *format_args]))
        command = [*self._java(libs), f"@{argfile}"]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=_FORMAT_TIMEOUT_S)
        finally:
            argfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise KafkaLaunchError(
                f"formatting Kafka storage in {self._log_dir} failed (exit {result.returncode}); "
                f"delete {self.data_dir} and retry.\n{_last_lines(result.stdout + result.stderr)}"
            )


# --------------------------------------------------------------------------- detached mode


def start_detached(state_dir: Path, port: int = DEFAULT_PORT, timeout: float = 90) -> str:
    """Start a broker that outlives this process and return its bootstrap address.

    The broker's data lives in ``state_dir/data``; its pid and ports are recorded in
    ``state_dir/broker.json``. A live broker already recorded there that answers is reused
    (whatever its port); a recorded one that does not answer is stopped and replaced.
    Concurrent callers on one state dir are serialised by a lock file, so they share one broker.
    """
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    with _file_lock(state_dir / ".lock"):
        running = detached_status(state_dir)
        if running is not None:
            return running
        stop_detached(state_dir)
        return _launch_detached(state_dir, port, timeout)


def _launch_detached(state_dir: Path, port: int, timeout: float) -> str:
    """Launch a detached broker for ``state_dir``, record it and wait until it answers."""
    kafka = LocalKafka(state_dir / "data", port=port)
    pid = _spawn_detached(kafka._prepare(), kafka.log_path)
    state: dict[str, object] = {
        "pid": pid,
        "bootstrap": kafka.bootstrap,
        "port": kafka.port,
        "controller_port": kafka.controller_port,
        "kafka_version": KAFKA_VERSION,
    }
    _write_state(state_dir, state)
    try:
        _wait_until_ready(kafka.bootstrap, timeout, partial(_is_our_broker, pid, state_dir), kafka.log_path)
    except KafkaLaunchError:
        stop_detached(state_dir)
        raise
    return kafka.bootstrap


def stop_detached(state_dir: Path, timeout: float = 30) -> bool:
    """Stop the broker recorded in ``state_dir``; return whether a running broker was stopped.

    Sends SIGTERM, waits up to ``timeout`` seconds, then SIGKILL. The record is removed either way.
    """
    state_dir = Path(state_dir).resolve()
    state = _read_state(state_dir)
    (state_dir / _STATE_FILE).unlink(missing_ok=True)
    pid = _recorded_pid(state)
    if not pid or not _is_our_broker(pid, state_dir):
        return False
    _terminate(pid, timeout)
    return True


def detached_status(state_dir: Path) -> str | None:
    """The bootstrap address of the broker recorded in ``state_dir`` if it is alive and answering."""
    state_dir = Path(state_dir).resolve()
    state = _read_state(state_dir)
    pid, bootstrap = _recorded_pid(state), str(state.get("bootstrap", ""))
    if not pid or not bootstrap or not _is_our_broker(pid, state_dir):
        return None
    deadline = time.monotonic() + 2 * _PROBE_TIMEOUT_S
    return (
        bootstrap
        if _broker_answers(bootstrap, 3, partial(_is_our_broker, pid, state_dir), deadline)
        else None
    )


def _spawn_detached(command: Sequence[str], log: Path) -> int:
    """Run ``command`` in a new session, reparented away from us (double fork); return its pid.

    A short-lived ``sh`` starts the broker in the background with its output appended to
    ``log`` and prints the broker's pid, so the broker is never our child or zombie.
    """
    launcher = [
        "sh",
        "-c",
        'log=$1; shift; "$@" >>"$log" 2>&1 </dev/null & echo $!',
        "sh",
        str(log),
        *command,
    ]
    result = subprocess.run(launcher, capture_output=True, text=True, timeout=30, start_new_session=True)
    if result.returncode != 0 or not result.stdout.strip().isdigit():
        raise KafkaLaunchError(f"could not launch the Kafka broker: {result.stderr.strip()}")
    return int(result.stdout.strip())


def _read_state(state_dir: Path) -> dict[str, object]:
    """The recorded broker state, or ``{}`` when missing or unreadable."""
    try:
        state = json.loads((state_dir / _STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _recorded_pid(state: dict[str, object]) -> int:
    """The pid in a broker record, or 0 when absent or malformed."""
    pid = state.get("pid")
    return pid if isinstance(pid, int) and pid > 0 else 0


def _write_state(state_dir: Path, state: dict[str, object]) -> None:
    """Record the detached broker's pid and ports in ``state_dir``."""
    (state_dir / _STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def _is_our_broker(pid: int, state_dir: Path) -> bool:
    """Whether ``pid`` is alive and is the broker for ``state_dir``.

    Checking the command line guards against signalling an unrelated process that reused a
    stale pid. Where ``/proc`` is unavailable only liveness is checked.
    """
    if not _pid_alive(pid):
        return False
    try:
        cmdline = (Path("/proc") / str(pid) / "cmdline").read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except OSError:
        return False
    args = cmdline.split("\0")
    return "kafka.Kafka" in args and str(state_dir / "data" / "server.properties") in args


def _terminate(pid: int, timeout: float) -> None:
    """SIGTERM ``pid``, wait up to ``timeout`` seconds for it to exit, then SIGKILL."""
    os.kill(pid, signal.SIGTERM)
    if _wait_for_exit(pid, timeout):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _wait_for_exit(pid, 10)


def _wait_for_exit(pid: int, timeout: float) -> bool:
    """Poll until ``pid`` has exited (or is a zombie); return whether it did within ``timeout``."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / _POLL_INTERVAL_S) + 1):
        if not _pid_alive(pid):
            return True
        if time.monotonic() >= deadline:
            break
        time.sleep(_POLL_INTERVAL_S)
    return not _pid_alive(pid)


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (reaping it if it is our child)."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m deploy.local.kafka start|stop|status [--state-dir DIR] [--port N]``."""
    parser = argparse.ArgumentParser(
        prog="python -m deploy.local.kafka",
        description=f"Run a local Apache Kafka {KAFKA_VERSION} broker (KRaft, 127.0.0.1 only) in the background.",
    )
    parser.add_argument("command", choices=["start", "stop", "status"])
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="default: %(default)s")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="client port for start (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            return _cli_start(args.state_dir, args.port)
        if args.command == "stop":
            return _cli_stop(args.state_dir)
        return _cli_status(args.state_dir)
    except KafkaLaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _cli_start(state_dir: Path, port: int) -> int:
    state_dir = state_dir.resolve()
    already = detached_status(state_dir)
    if already is None:
        print(
            f"Starting Kafka {KAFKA_VERSION} on port {port} (the first run fetches ~43 MB of jars with Maven)..."
        )
    bootstrap = already or start_detached(state_dir, port)
    print(f"Kafka {'was already running' if already else 'is ready'} at {bootstrap}")
    print(f"  broker log: {state_dir / 'data' / _LOG_FILE}")
    print(f"  use it:     export FAULTLINE_KAFKA={bootstrap}")
    print(f"  stop it:    python -m deploy.local.kafka stop --state-dir {state_dir}")
    return 0


def _cli_stop(state_dir: Path) -> int:
    if stop_detached(state_dir):
        print(f"Stopped the Kafka broker recorded in {state_dir}.")
    else:
        print(f"No running Kafka broker recorded in {state_dir}; nothing to stop.")
    return 0


def _cli_status(state_dir: Path) -> int:
    bootstrap = detached_status(state_dir)
    if bootstrap is None:
        print(
            f"No Kafka broker answering for {state_dir}. Start one with: python -m deploy.local.kafka start"
        )
        return 1
    print(f"Kafka is running at {bootstrap}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
