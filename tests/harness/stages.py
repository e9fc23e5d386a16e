"""Pipeline stages the fault tests run in their own process, around the real worker process.

* :class:`Agent` -- a node agent's durable delivery path: capture lines through the disk-spooled
  publisher, in a steady trickle (``every`` lines, then a pump and ``pause_s``), the end marker last;
  it can be held at a line (:meth:`Agent.hold_at`) so a fault lands exactly there, then let go;
* :class:`Recorder` -- an executor backend that carries a command out by counting it, per id;
* :class:`Background` -- a stage's loop on a thread, keeping what it raised;
* :func:`wait` -- a bounded wait for a condition, naming it when it does not come.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from faultline.pipeline import end_marker
from producers.capture import BadInput, parse_capture_line
from producers.spool import SpoolingPublisher
from streams.decisions import Command, DeadLetter

__all__ = ["Agent", "Background", "Recorder", "wait"]


class Agent:
    """A node agent's delivery path: capture lines through the disk spool, in a steady trickle."""

    def __init__(self, conf: dict[str, Any], namespace: str, spool_dir: Path, lines: list[bytes],
                 deadline_s: float = 240.0, every: int = 40, pause_s: float = 0.05) -> None:
        self.pub = SpoolingPublisher(conf, namespace, spool_dir, max_inflight=200, retry_backoff_s=(0.2, 1.0))
        self.lines = lines
        self.deadline_s = deadline_s
        self.every, self.pause_s = every, pause_s
        self.event_ids: list[str] = []  # handed to the spool, in order
        self.delivered = False
        self.error: BaseException | None = None
        self.held_at = 0  # the line it is held before (0: not held)
        self._hold_at: int | None = None
        self._go = threading.Event()
        self.thread = threading.Thread(target=self._run, name="agent", daemon=True)

    def hold_at(self, line: int | None) -> None:
        """Stop before handing line ``line`` to the spool until told to go on (None: do not stop), and go on now."""
        self._hold_at = line
        self.held_at = 0
        self._go.set()

    def _wait_if_held(self, n: int) -> None:
        """Held, it reads nothing new, but keeps pumping what is spooled, as a live agent does."""
        if self._hold_at is not None and n >= self._hold_at:
            self._go.clear()
            self.held_at = n
            deadline = time.monotonic() + self.deadline_s
            while not self._go.wait(0.1):
                self.pub.pump()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"held at line {n} for {self.deadline_s:.0f}s")

    def _run(self) -> None:
        try:
            last = None
            for n, raw in enumerate(self.lines, 1):
                self._wait_if_held(n)
                try:
                    events = parse_capture_line(raw)
                except BadInput as exc:
                    self.pub.dead_letter(DeadLetter(stage="producer", reason=exc.reason,
                                                    raw=raw.decode("utf-8", "replace"), at=datetime.now(UTC)))
                    continue
                self.pub.publish(events)
                self.event_ids += [e.id for e in events]
                last = events[-1].ts if events else last
                if n % self.every == 0:
                    self.pub.pump()
                    time.sleep(self.pause_s)
            marker = end_marker(len(self.lines), last)
            self.pub.publish([marker])
            self.event_ids.append(marker.id)
            self.delivered = self.pub.flush(self.deadline_s)
            self.pub.close()
        except BaseException as exc:  # reported by the test
            self.error = exc


class Recorder:
    """An executor backend that carries every command out by counting it."""

    name = "recorder"

    def __init__(self) -> None:
        self.executed: Counter[str] = Counter()

    def supports(self, cmd_type: str) -> bool:
        return True

    def plan(self, cmd: Command) -> str:
        return f"would {cmd.type}"

    def execute(self, cmd: Command) -> str:
        self.executed[cmd.id] += 1
        return f"{cmd.type} done"

    def fleet_size(self) -> int | None:
        return 100

    def knows_node(self, node: str) -> bool:
        return True


class Background:
    """Runs ``loop(stop)`` in a thread; keeps what it raised."""

    def __init__(self, name: str, loop: Callable[[threading.Event], None]) -> None:
        self.stop = threading.Event()
        self.failures: list[BaseException] = []

        def run() -> None:
            try:
                loop(self.stop)
            except BaseException as exc:
                self.failures.append(exc)

        self.thread = threading.Thread(target=run, name=name, daemon=True)
        self.thread.start()

    def end(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and not self.failures, self.failures


def wait(what: str, done: Callable[[], bool], timeout_s: float = 240.0, every_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(every_s)
