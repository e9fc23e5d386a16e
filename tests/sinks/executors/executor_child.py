"""The Slurm executor the crash test kills, with a fault point the test chooses.

``python -m tests.sinks.executors.executor_child BOOTSTRAP NAMESPACE STATE_DIR CALLS POINT COMMAND_ID``
(``SLURM_CONF`` and ``FAULTLINE_SIGNING_KEYS`` in the environment.)

The runner, core, ledger (SQLite in ``STATE_DIR``) and Slurm backend of ``faultline executor
run --backend slurm``, against the test's real slurmctld, verifying signatures. The process
SIGKILLs itself at ``POINT`` while handling ``COMMAND_ID``:

- ``before-act``: the ledger says "started", ``scontrol`` has not run;
- ``after-act``: ``scontrol`` has drained the node, the ledger still says "started" -- between
  acting and recording the result;
- ``after-record``: the ledger has settled the command, its result is not published;
- ``after-publish``: the result is on the topic, the command's offset is not committed;
- ``none``: no fault point.

The backend writes to ``CALLS`` a line ``exec <command id>`` each time it starts carrying a
command out, and ``update <command id> <argv>`` for each ``scontrol update`` it completes, so the
test counts, per command, the executions and what really changed on Slurm.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from sinks.executors.approvals import ApprovalBook
from sinks.executors.breaker import CircuitBreaker
from sinks.executors.core import Executor
from sinks.executors.ledger import ResultLedger
from sinks.executors.runner import ExecutorRunner
from sinks.executors.slurm import CommandLine, SlurmBackend
from streams.decisions import Command, CommandResult
from streams.signing import SigningKeys

POINTS = ("before-act", "after-act", "after-record", "after-publish", "none")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Fault:
    """Where and on which command the process dies."""

    def __init__(self, point: str, command_id: str) -> None:
        assert point in POINTS, point
        self.point, self.command_id = point, command_id

    def at(self, point: str, command_id: str) -> None:
        if (point, command_id) == (self.point, self.command_id):
            _die()


class CountingSlurm(SlurmBackend):
    """The Slurm backend, each completed call written down with the command it was for."""

    def __init__(self, calls: Path, fault: Fault) -> None:
        self._calls = open(calls, "a", buffering=1, encoding="utf-8")
        self._fault = fault
        self._current = "-"
        line = CommandLine(timeout_s=20, env={"SLURM_CONF": os.environ["SLURM_CONF"]})

        def run(argv: Sequence[str]) -> str:
            out = line(argv)
            if argv[:2] == ["scontrol", "update"]:  # the acts; `show` and `sinfo` only look
                self._calls.write(f"update {self._current} {' '.join(argv)}\n")
            return out

        super().__init__(run)

    def execute(self, cmd: Command) -> str:
        self._fault.at("before-act", cmd.id)
        self._calls.write(f"exec {cmd.id}\n")
        self._current = cmd.id
        try:
            detail = super().execute(cmd)
        finally:
            self._current = "-"
        self._fault.at("after-act", cmd.id)
        return detail


class FaultyLedger(ResultLedger):
    fault: Fault

    def settle(self, result: CommandResult, cmd: Command | None = None) -> None:
        super().settle(result, cmd)
        self.fault.at("after-record", result.command)


class FaultyExecutor(Executor):
    fault: Fault

    def published(self, result: CommandResult) -> None:
        super().published(result)
        self.fault.at("after-publish", result.command)


def main(bootstrap: str, namespace: str, state_dir: str, calls: str, point: str, command_id: str) -> None:
    fault = Fault(point, command_id)
    keys = SigningKeys.parse(os.environ["FAULTLINE_SIGNING_KEYS"])
    backend = CountingSlurm(Path(calls), fault)
    ledger = FaultyLedger(Path(state_dir) / "slurm.ledger.sqlite")
    ledger.fault = fault
    executor = FaultyExecutor(backend, ledger, ApprovalBook(),
                              CircuitBreaker(max_share=1.0, window=timedelta(minutes=10), fleet_size=1, min_nodes=1),
                              name="slurm", keys=keys)
    executor.fault = fault
    # A short session: the next executor joins once this one is evicted, not after Kafka's 45 s.
    conf = {"bootstrap.servers": bootstrap, "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
    with ExecutorRunner(executor, conf, namespace) as runner:
        runner.run(threading.Event(), poll_s=0.2)


if __name__ == "__main__":
    main(*sys.argv[1:])
