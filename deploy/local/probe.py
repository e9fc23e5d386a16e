"""Loopback ports and readiness: what the local launchers ask before and after a broker JVM starts.

A broker is *ready* when an admin client bootstrapped on it lists metadata with as many
brokers as the caller waits for (one for a lone node; every node for a cluster, so a test
never starts on a cluster that is still forming). Every wait is bounded and stops early
when the process it waits for has died, with the log's last lines in the error.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from deploy.local.jars import KafkaLaunchError, last_lines

__all__ = ["LOOPBACK", "broker_answers", "free_ports", "log_tail", "port_open", "wait_until_ready"]

LOOPBACK = "127.0.0.1"
_POLL_INTERVAL_S = 0.25
_PROBE_TIMEOUT_S = 2.0


def free_ports(count: int, exclude: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """``count`` distinct TCP ports free on loopback now, none of them in ``exclude``."""
    ports: list[int] = []
    for _ in range(20 * count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port = int(sock.getsockname()[1])
        if port not in exclude and port not in ports:
            ports.append(port)
            if len(ports) == count:
                return ports
    raise KafkaLaunchError("could not find free loopback ports")


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on ``127.0.0.1:port``."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def log_tail(log: Path, count: int = 40) -> str:
    """The last ``count`` lines of a broker log, or a note that there is none."""
    try:
        with log.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64_000))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return f"(no broker log at {log})"
    return f"--- last lines of {log} ---\n{last_lines(text, count)}"


def broker_answers(bootstrap: str, attempts: int, is_alive: Callable[[], bool], deadline: float,
                   security: dict[str, Any] | None = None, brokers: int = 1) -> bool:
    """Poll ``bootstrap`` until its metadata lists ``brokers`` brokers, the deadline or death."""
    admin = AdminClient({
        "bootstrap.servers": bootstrap,
        "socket.connection.setup.timeout.ms": 2000,
        "reconnect.backoff.max.ms": 500,
        "log_level": 0,  # connection-refused noise while the JVM boots
        **(security or {}),
    })
    for _ in range(attempts):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not is_alive():
            return False
        try:
            if len(admin.list_topics(timeout=min(_PROBE_TIMEOUT_S, remaining)).brokers) >= brokers:
                return True
        except KafkaException:
            pass
        time.sleep(_POLL_INTERVAL_S)
    return False


def wait_until_ready(bootstrap: str, timeout: float, is_alive: Callable[[], bool], log: Path,
                     security: dict[str, Any] | None = None, brokers: int = 1) -> None:
    """Block until the broker answers metadata requests; raise with the log tail if it does not."""
    deadline = time.monotonic() + timeout
    attempts = int(timeout / _POLL_INTERVAL_S) + 1
    if broker_answers(bootstrap, attempts, is_alive, deadline, security, brokers):
        return
    if not is_alive():
        raise KafkaLaunchError(f"the Kafka broker exited during startup.\n{log_tail(log)}")
    raise KafkaLaunchError(
        f"the Kafka broker at {bootstrap} did not answer (with {brokers} broker(s)) within {timeout:.0f}s."
        f"\n{log_tail(log)}"
    )
