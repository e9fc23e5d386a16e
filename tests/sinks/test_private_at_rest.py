"""Issue 27 item 5: nothing faultline keeps is another local user's to read, and its endpoint cannot be held open.

The archive is made by the real `faultline` command (its umask, its checks) under a directory anyone may
enter, as /var/lib is; another local user (``nobody``) then finds nothing in it to read. An existing
directory others may enter is made private at start; the endpoint closes what it cannot serve and what
sends nothing.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.private import NotPrivate, private_dir
from common.settings import REPO_ROOT
from sinks.archive import endpoint as ep
from sinks.archive.store import Archive


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A directory every local user may enter (0755, as /var/lib is): only the modes below it protect."""
    base = Path(tempfile.mkdtemp(prefix="faultline-private-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _lax(root: Path) -> list[str]:
    """Every path under ``root`` (itself included) that group or others may read, write or enter."""
    paths = [root, *root.rglob("*")]
    return [f"{p} {stat.S_IMODE(p.lstat().st_mode):04o}" for p in paths
            if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) & 0o077]


def test_the_archive_the_command_makes_is_private_from_creation(open_base: Path) -> None:
    archive = open_base / "archive"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}
    env.update(PYTHONPATH=str(REPO_ROOT), FAULTLINE_ARCHIVE=f"chdb://{archive}", FAULTLINE_DATA_DIR=str(open_base),
               FAULTLINE_DEV_MODE="true")
    done = subprocess.run([sys.executable, "-m", "faultline.cli", "status", "--json"], env=env, cwd=open_base,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert archive.is_dir() and any(archive.rglob("*"))
    assert _lax(archive) == []
    if os.geteuid() == 0 and shutil.which("find"):  # another local user looks for anything to read
        seen = subprocess.run(["find", str(archive), "-type", "f", "-readable"], user="nobody",
                              capture_output=True, text=True, timeout=60)
        assert seen.stdout == "", seen.stdout[:500]


def test_an_existing_directory_others_may_read_is_made_private_at_start(open_base: Path) -> None:
    lax = open_base / "ledger"
    lax.mkdir(mode=0o755)
    lax.chmod(0o755)
    assert private_dir(lax) == lax and stat.S_IMODE(lax.stat().st_mode) == 0o700
    with Archive.open(f"chdb://{open_base / 'old-archive'}"):
        pass
    (open_base / "old-archive").chmod(0o755)
    with Archive.open(f"chdb://{open_base / 'old-archive'}"):
        assert stat.S_IMODE((open_base / "old-archive").stat().st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="needs to hand a directory to another user")
def test_a_directory_of_another_user_is_refused_with_what_to_do(open_base: Path) -> None:
    theirs = open_base / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(NotPrivate, match="belongs to uid 65534"):
        private_dir(theirs)


def test_the_endpoint_bounds_its_threads_and_closes_silent_connections(
        tmp_path: Path) -> None:
    """1,000 half-open connections grew the sink from 37 to 701 threads; now at most MAX_CONNECTIONS are served,
    the rest closed on arrival, and the silent ones closed after the idle timeout; a real client still gets in."""
    endpoint = ep.ArchiveEndpoint(str(private_dir(tmp_path / "archive")), idle_timeout_s=1.0)
    socks: list[socket.socket] = []
    try:
        before = threading.active_count()
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", endpoint.port), timeout=5)
            socks.append(s)
        time.sleep(0.3)
        assert threading.active_count() - before <= ep.MAX_CONNECTIONS
        deadline = time.monotonic() + 15
        closed: set[int] = set()
        while len(closed) < len(socks) and time.monotonic() < deadline:  # every one ends: refused or idle
            for i, s in enumerate(socks):
                if i not in closed:
                    s.settimeout(0.01)
                    try:
                        if s.recv(1) == b"":
                            closed.add(i)
                    except TimeoutError:
                        pass
                    except OSError:
                        closed.add(i)
        assert len(closed) == len(socks)
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as s:
            s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert s.recv(1024).startswith(b"HTTP/1.")
    finally:
        for s in socks:
            s.close()
        endpoint.close()
