"""Run a real Apache Kafka broker on loopback, without Docker and without a tarball download.

The broker jars are fetched once from Maven Central with the pinned ``pom.xml`` next to this
file (:mod:`deploy.local.jars`) and every broker runs in KRaft mode bound to ``127.0.0.1`` only.
This module is the launcher's front door: the command line, and the names callers import.

* :class:`LocalKafka` (:mod:`deploy.local.node`) owns one combined broker+controller JVM as a
  child process (tests, fixtures)::

      with LocalKafka(tmp_path / "kafka") as kafka:
          use(kafka.bootstrap)

* :class:`LocalKafkaCluster` (:mod:`deploy.local.cluster`) owns three such nodes sharing one
  quorum, with every topic replicated three times (``min.insync.replicas=2``): what the
  reliability tests kill brokers of.

* :func:`start_detached` / :func:`stop_detached` / :func:`detached_status`
  (:mod:`deploy.local.detached`) keep a broker running after Python exits, recorded in a state
  directory (CLI, ``faultline replay``)::

      python -m deploy.local.kafka start|stop|status [--state-dir DIR] [--port N]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from deploy.local.cluster import LocalKafkaCluster
from deploy.local.detached import (
    DEFAULT_PORT,
    DEFAULT_STATE_DIR,
    detached_status,
    start_detached,
    stop_detached,
)
from deploy.local.jars import KAFKA_VERSION, KafkaLaunchError, ensure_jars
from deploy.local.node import LocalKafka

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_STATE_DIR",
    "KAFKA_VERSION",
    "KafkaLaunchError",
    "LocalKafka",
    "LocalKafkaCluster",
    "detached_status",
    "ensure_jars",
    "main",
    "start_detached",
    "stop_detached",
]


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
    print(f"  broker log: {state_dir / 'data' / 'broker.log'}")
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
