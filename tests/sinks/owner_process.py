"""The parent's side of :mod:`tests.sinks.archive_owner`: start the owner process, wait for its lines, stop it."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from common.settings import REPO_ROOT

__all__ = ["Owner", "owner"]


class Owner:
    """The owner process; ``stop()`` closes its standard input, ``kill()`` SIGKILLs it."""

    def __init__(self, url: str, bare: bool = False, still: bool = False, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.sinks.archive_owner", url,
                                      *(["--bare"] if bare else []), *(["--still"] if still else [])],
                                     cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO_ROOT)})
        self.role = self._line("ready", 60).split()[-1]

    def _line(self, prefix: str, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        with selectors.DefaultSelector() as sel:  # not select(): it refuses descriptors past 1023
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            return self._wait_line(sel, prefix, deadline, seen)

    def _wait_line(self, sel: selectors.BaseSelector, prefix: str, deadline: float, seen: list[str]) -> str:
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            if sel.select(0.5):
                line = self.proc.stdout.readline().decode(errors="replace")
                if not line:
                    break
                seen.append(line)
                if line.startswith(prefix):
                    return line.strip()
        raise AssertionError(f"the owner did not say {prefix!r}; it said:\n{''.join(seen)}")

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self._line("closed", 60)
        assert self.proc.wait(30) == 0

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


@contextmanager
def owner(url: str, bare: bool = False, still: bool = False, env: dict[str, str] | None = None) -> Iterator[Owner]:
    o = Owner(url, bare, still, env)
    try:
        yield o
    finally:
        if o.proc.poll() is None:
            o.kill()
