"""One KRaft Kafka node on loopback, run as a child JVM: a lone development broker, or a cluster's member.

Each node is a combined broker+controller (``process.roles=broker,controller``) bound to
``127.0.0.1`` only. Alone, it is its own controller quorum and keeps one copy of everything;
as a member of :class:`deploy.local.cluster.LocalKafkaCluster` it is given the cluster's
quorum, cluster id and replication factor. Storage is formatted only the first time a data
dir is used, so a restart (or a restart after :meth:`LocalKafka.kill`) keeps earlier records.

    with LocalKafka(tmp_path / "kafka") as kafka:
        use(kafka.bootstrap)
"""

from __future__ import annotations

import atexit
import base64
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from common.replication import min_insync
from deploy.local.jars import KafkaLaunchError, ensure_jars, java_command, last_lines
from deploy.local.kafka_security import BrokerAuth, write_private
from deploy.local.probe import LOOPBACK, free_ports, port_open, wait_until_ready

__all__ = ["LocalKafka", "new_cluster_id"]

_FORMAT_TIMEOUT_S = 120.0
_LOG_FILE = "broker.log"


def new_cluster_id() -> str:
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


class LocalKafka:
    """A KRaft Kafka node on loopback, run as a child JVM process.

    ``data_dir`` holds ``server.properties``, the log directories and ``broker.log``.
    ``port`` / ``controller_port`` default to free loopback ports chosen at construction.
    ``auth`` (:class:`~deploy.local.kafka_security.BrokerAuth`) makes clients authenticate with
    SCRAM-SHA-512 and, by default, turns ACLs on; clients then need :meth:`client_config`.

    A cluster's member also gets ``node_id``, ``voters`` (the whole quorum, as
    ``controller.quorum.voters`` spells it), the shared ``cluster_id``, the cluster's
    ``replication`` (its internal topics and the default of new topics) and ``overrides``
    (more broker settings, e.g. faster failure detection).
    """

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        controller_port: int | None = None,
        heap: str = "384m",
        auth: BrokerAuth | None = None,
        *,
        node_id: int = 1,
        voters: str | None = None,
        cluster_id: str | None = None,
        replication: int = 1,
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        taken = {p for p in (port, controller_port) if p is not None}
        fresh = iter(free_ports(2, exclude=taken))
        self.port = port if port is not None else next(fresh)
        self.controller_port = controller_port if controller_port is not None else next(fresh)
        self.heap = heap
        self.auth = auth
        self.node_id = node_id
        self.voters = voters or f"{node_id}@{LOOPBACK}:{self.controller_port}"
        self.cluster_id = cluster_id
        self.replication = replication
        self.overrides = dict(overrides or {})
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_handle: IO[bytes] | None = None

    def __repr__(self) -> str:
        return (
            f"LocalKafka(data_dir={str(self.data_dir)!r}, port={self.port}, "
            f"controller_port={self.controller_port}, heap={self.heap!r}, auth={self.auth!r}, "
            f"node_id={self.node_id}, running={self.is_running()})"
        )

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` clients should use as ``bootstrap.servers``."""
        return f"{LOOPBACK}:{self.port}"

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

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 90) -> None:
        """Start the broker (no-op if running) and wait until it answers metadata requests."""
        if self.is_running():
            return
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the JVM without waiting for it (a cluster launches every node before any is ready)."""
        if self.is_running():
            return
        command = self.prepare()
        self._log_handle = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log_handle, stderr=subprocess.STDOUT
        )
        atexit.register(self.stop)

    def wait_ready(self, timeout: float = 90, brokers: int = 1) -> None:
        """Wait until this node answers with ``brokers`` brokers in its metadata; stop it if it never does."""
        try:
            wait_until_ready(self.bootstrap, timeout, self.is_running, self.log_path, self.client_config(),
                             brokers)
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
        self._close_log()

    def terminate(self) -> None:
        """Send SIGTERM without waiting (a cluster asks every node at once; :meth:`stop` then waits)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()

    def kill(self) -> None:
        """SIGKILL the JVM now: no controlled shutdown, no flush, no leadership handed over (a crash)."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        self._close_log()

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

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def _close_log(self) -> None:
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    # --- configuration ------------------------------------------------------------------------

    def prepare(self) -> list[str]:
        """Fetch jars, write the config, format storage on first use; return the broker command."""
        if port_open(self.port):
            raise KafkaLaunchError(
                f"port {self.port} on {LOOPBACK} is already in use; choose another port "
                "or stop whatever listens there."
            )
        libs = ensure_jars()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_private(self.config_path, self._server_properties())  # with auth, it holds the admin's password
        if not (self._log_dir / "meta.properties").exists():
            self._format_storage(libs)
        return [*java_command(libs, f"-Xmx{self.heap}"), "kafka.Kafka", str(self.config_path)]

    @property
    def _log_dir(self) -> Path:
        return self.data_dir / "kraft-logs"

    def _server_properties(self) -> str:
        """The broker configuration: combined KRaft node, loopback listeners, the cluster's replication."""
        rf, isr = str(self.replication), str(min_insync(self.replication))
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self._log_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.num.partitions": "1",
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "group.initial.rebalance.delay.ms": "0",
            # The log cleaner allocates its dedupe buffer (128 MB by default) at start: on a small heap, a broker
            # restarted with many compacted topics (the correlator's changelogs and snapshots) dies of it.
            "log.cleaner.dedupe.buffer.size": str(32 << 20),
            **self.overrides,
        }
        if self.auth is not None:
            settings.update(self.auth.server_properties(LOOPBACK, self.port, self.controller_port))
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def _format_storage(self, libs: Path) -> None:
        """Format the KRaft log dir with the cluster's id (first start of a data dir only)."""
        format_args = ["format", "-t", self.cluster_id or new_cluster_id(), "-c", str(self.config_path)]
        if self.auth is not None:
            format_args += self.auth.format_arguments()
        # Through a private `java @argfile` (main class and arguments), never argv: with auth they
        # hold the admin's password, and any local user can read a command line.
        argfile = self.data_dir / "format.args"
        write_private(argfile, "".join(_argfile_line(arg) for arg in ["kafka.tools.StorageTool", *format_args]))
        command = [*java_command(libs), f"@{argfile}"]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=_FORMAT_TIMEOUT_S)
        finally:
            argfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise KafkaLaunchError(
                f"formatting Kafka storage in {self._log_dir} failed (exit {result.returncode}); "
                f"delete {self.data_dir} and retry.\n{last_lines(result.stdout + result.stderr)}"
            )
