"""Small helpers for tests that start servers of their own on loopback: a free port, a bounded wait."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

__all__ = ["free_port", "wait_until"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.1) -> None:
    """Poll ``check`` until it is true; ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s} s")
        time.sleep(interval_s)
