"""A local broker that outlives the Python process that started it, recorded in a state directory.

What the CLI (``python -m deploy.local.kafka start|stop|status``, ``faultline broker``) and
``faultline replay`` use: :func:`start_detached` launches a :class:`~deploy.local.node.LocalKafka`
node in a session of its own (reparented away from us), records its pid and ports in
``<state dir>/broker.json``, and a later process finds it there (:func:`detached_status`) or stops
it (:func:`stop_detached`). A recorded pid is signalled only while its command line is still
that broker's, so a pid reused by an unrelated process is never killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from deploy.local.jars import KAFKA_VERSION, KafkaLaunchError, file_lock
from deploy.local.node import LocalKafka
from deploy.local.probe import broker_answers, wait_until_ready

__all__ = ["DEFAULT_PORT", "DEFAULT_STATE_DIR", "detached_status", "start_detached", "stop_detached"]

DEFAULT_PORT = 19092
DEFAULT_STATE_DIR = Path(__file__).resolve().parents[2] / "var" / "kafka"

_STATE_FILE = "broker.json"
_POLL_INTERVAL_S = 0.25
_PROBE_TIMEOUT_S = 2.0


def start_detached(state_dir: Path, port: int = DEFAULT_PORT, timeout: float = 90) -> str:
    """Start a broker that outlives this process and return its bootstrap address.

    The broker's data lives in ``state_dir/data``; its pid and ports are recorded in
    ``state_dir/broker.json``. A live broker already recorded there that answers is reused
    (whatever its port); a recorded one that does not answer is stopped and replaced.
    Concurrent callers on one state dir are serialised by a lock file, so they share one broker.
    """
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(state_dir / ".lock"):
        running = detached_status(state_dir)
        if running is not None:
            return running
        stop_detached(state_dir)
        return _launch_detached(state_dir, port, timeout)


def _launch_detached(state_dir: Path, port: int, timeout: float) -> str:
    """Launch a detached broker for ``state_dir``, record it and wait until it answers."""
    kafka = LocalKafka(state_dir / "data", port=port)
    pid = _spawn_detached(kafka.prepare(), kafka.log_path)
    state: dict[str, object] = {
        "pid": pid,
        "bootstrap": kafka.bootstrap,
        "port": kafka.port,
        "controller_port": kafka.controller_port,
        "kafka_version": KAFKA_VERSION,
    }
    _write_state(state_dir, state)
    try:
        wait_until_ready(kafka.bootstrap, timeout, partial(_is_our_broker, pid, state_dir), kafka.log_path)
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
        if broker_answers(bootstrap, 3, partial(_is_our_broker, pid, state_dir), deadline)
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
