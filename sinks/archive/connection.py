"""How a process reaches the archive: a ClickHouse server, or a chDB directory it owns or another serves.

:func:`acquire` gives the process's one :class:`Connection` to a target (archives opened on the
same target share it, and its lock: a client runs one query at a time):

* ``http(s)://host:port[/database]``: a clickhouse-connect client to that server;
* ``chdb:///abs/path``: in order,

  1. the directory's owner, if another process serves it (its endpoint file, see
     :mod:`sinks.archive.endpoint`): an HTTP client to it, the same code as for a server;
  2. otherwise the directory itself, if nobody holds its lock: this process becomes the owner,
     opens the embedded engine and serves it to the others until its last archive closes;
  3. otherwise (the owner is starting and has not written its endpoint file yet, or it is an
     older faultline that serves nothing) wait, up to ``wait_s``, for 1 or 2 to become possible.

A process that reads through an owner that stops (a short-lived ``faultline report`` that owned
the directory when the sink started, say) finds the new owner, or becomes it, on its next call:
:meth:`Connection.reconnect`, which :class:`~sinks.archive.store.Archive` calls when the owner
it used no longer answers.
"""

from __future__ import annotations

import fcntl
import hmac
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

import clickhouse_connect
import urllib3
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from common.private import private_dir
from common.redact import mask_url
from sinks.archive.endpoint import ArchiveEndpoint
from sinks.archive.endpoint_file import ENDPOINT_USER, IDENTITY_PATH, EndpointFile, identity_proof

__all__ = ["SCHEMA_LOCK", "ArchiveBusy", "Connection", "acquire", "call", "normalise", "owner_gone", "release",
           "schema_lock"]

log = logging.getLogger(__name__)

DEFAULT_WAIT_S = 30.0
"""How long :func:`acquire` waits for a chDB directory's owner to serve it (or to let go)."""
_POLL_S = 0.1
SCHEMA_LOCK = "faultline-schema.lock"
"""The file in a chDB directory whose flock a process holds while it changes the schema (:func:`schema_lock`)."""
_T = TypeVar("_T")


class ArchiveBusy(RuntimeError):
    """The chDB directory is held by a process that does not serve it (none appeared in time)."""


@dataclass
class Connection:
    """One process's way to one archive target: the client, its lock, and how it got there."""

    target: str
    client: Client
    base_database: str  # the target's own database: the live namespace keeps its tables there
    endpoint: ArchiveEndpoint | None = None  # this process owns the chDB directory and serves it
    via: EndpointFile | None = None  # another process's endpoint this connection goes through
    pool: urllib3.PoolManager | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    users: int = 0

    @property
    def data_dir(self) -> str | None:
        return self.target.removeprefix("chdb://") if self.target.startswith("chdb://") else None

    @property
    def role(self) -> str:
        """``owner`` (serving this chDB directory), ``reader`` (through its owner) or ``server``."""
        return "owner" if self.endpoint is not None else "reader" if self.via is not None else "server"

    def stale(self) -> bool:
        """Whether the owner this reader goes through has stopped (or handed over) for sure."""
        data_dir = self.data_dir
        if self.via is None or data_dir is None:
            return False
        return not self.via.alive() or EndpointFile.read(data_dir) != self.via

    def reconnect(self, wait_s: float = DEFAULT_WAIT_S) -> None:
        """After the owner this connection went through stopped: find its successor, or become it."""
        data_dir = self.data_dir
        assert data_dir is not None and self.via is not None, "only a reader reconnects"
        with self.lock:
            self._close_client()
            fresh = _open_chdb(self.target, data_dir, wait_s)
            self.client, self.endpoint, self.via, self.pool = fresh.client, fresh.endpoint, fresh.via, fresh.pool
        log.info("archive %s: the owner changed; now %s", self.target, self.role)

    def _close_client(self) -> None:
        try:
            self.client.close()
        finally:
            if self.endpoint is not None:
                self.endpoint.close()
                self.endpoint = None
            if self.pool is not None:
                self.pool.clear()
                self.pool = None


_CONNECTIONS: dict[str, Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def normalise(url: str) -> str:
    """The target of ``url``: spellings of one chDB path share one engine (created if missing)."""
    parsed = urlparse(url)
    if parsed.scheme == "chdb":
        if not parsed.path or parsed.netloc:
            raise ValueError(f"chdb archive url must be chdb:///absolute/path, got {mask_url(url)!r}")
        path = os.path.realpath(parsed.path)
        private_dir(path)  # the archive is this user's alone (common/private.py)
        return f"chdb://{path}"
    if parsed.scheme in ("http", "https"):
        return url
    raise ValueError(f"archive url must be chdb:///path or http(s)://host:port, got {mask_url(url)!r}")


def acquire(url: str, wait_s: float = DEFAULT_WAIT_S) -> Connection:
    """This process's connection to ``url``, one more user counted; :func:`release` it after."""
    target = normalise(url)
    with _CONNECTIONS_LOCK:
        conn = _CONNECTIONS.get(target)
        if conn is None:
            if target.startswith("chdb://"):
                conn = _open_chdb(target, target.removeprefix("chdb://"), wait_s)
            else:
                client = clickhouse_connect.get_client(dsn=target, tz_mode="aware")
                conn = Connection(target, client, client.database or str(client.command("SELECT currentDatabase()")))
            _CONNECTIONS[target] = conn
        conn.users += 1
        return conn


def release(conn: Connection) -> None:
    """One user fewer; the last one closes the client (and stops serving, if this process owned it)."""
    with _CONNECTIONS_LOCK:
        conn.users -= 1
        if conn.users > 0:
            return
        _CONNECTIONS.pop(conn.target, None)
    with conn.lock:
        conn._close_client()


def call(conn: Connection, database: str, work: Callable[[Client], _T]) -> _T:
    """Run ``work`` on the connection's client in ``database``, under the connection's lock.

    When the owner this connection reads through has stopped, find the new one (or become it)
    and run ``work`` once more: every archive call is safe to repeat (reads, idempotent DDL,
    inserts carrying their deduplication token).
    """
    with conn.lock:
        if conn.stale():  # the usual way an owner goes: it exits and removes its endpoint file
            conn.reconnect()
        try:
            conn.client.database = database
            return work(conn.client)
        except DatabaseError as exc:
            if conn.via is None or not owner_gone(exc):
                raise
            log.info("archive %s: its owner (pid %d) stopped answering; reconnecting", conn.target, conn.via.pid)
            conn.reconnect()
            conn.client.database = database
            return work(conn.client)


@contextmanager
def schema_lock(conn: Connection, wait_s: float = DEFAULT_WAIT_S) -> Iterator[None]:
    """While held, no other process changes the schema of ``conn``'s chDB directory (nothing to hold for a server).

    Every process that opens an archive migrates it; the owner through its own client, the others through
    its endpoint, which runs their statements beside the owner's. Two of them migrating at once interleave
    their DDL: one's ``CREATE OR REPLACE VIEW incident_facts`` takes the view away while the other creates
    a view that reads it, and the sink that was starting exits ("Unknown table expression identifier").
    Take it outside :func:`call` (the owner serves the others' statements while it waits). Waits at most
    ``wait_s``, then :class:`ArchiveBusy`.
    """
    if conn.data_dir is None:
        yield
        return
    try:
        fd = os.open(Path(conn.data_dir) / SCHEMA_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:  # a directory this process may read through its owner but not write: as before the lock
        log.debug("archive %s: no schema lock (%s)", conn.data_dir, exc)
        yield
        return
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ArchiveBusy(f"another process has been changing the schema of the archive {conn.data_dir} "
                                      f"for {wait_s:.0f} s: wait for it to finish, then try again") from None
                time.sleep(_POLL_S)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def owner_gone(exc: BaseException) -> bool:
    """Whether ``exc`` says the process serving the archive no longer answers (not a query's error)."""
    return isinstance(exc, OperationalError) and isinstance(exc.__cause__, urllib3.exceptions.HTTPError)


def _open_chdb(target: str, data_dir: str, wait_s: float) -> Connection:
    deadline = time.monotonic() + wait_s
    while True:
        found = EndpointFile.read(data_dir)
        if found is not None and found.pid != os.getpid() and found.alive():
            try:
                return _through(target, found)
            except (urllib3.exceptions.HTTPError, _Impostor) as exc:
                log.debug("archive %s: endpoint of pid %d does not answer as the owner (%s)", data_dir, found.pid, exc)
            except DatabaseError as exc:
                if not owner_gone(exc):
                    raise
                log.debug("archive %s: endpoint of pid %d does not answer (%s)", data_dir, found.pid, exc)
        if not _held(data_dir):
            try:
                client = clickhouse_connect.get_client(dsn=target, tz_mode="aware")
            except DatabaseError as exc:  # taken between the look and the open: look again
                log.debug("archive %s: open failed (%s); looking again", data_dir, exc)
            else:
                try:
                    return Connection(target, client, "default", endpoint=ArchiveEndpoint(data_dir))
                except BaseException:
                    client.close()
                    raise
        if time.monotonic() >= deadline:
            raise ArchiveBusy(
                f"the archive {data_dir} is open in another process that does not serve it to others "
                f"(an older faultline, or one still starting): stop that process or wait for it, then try again")
        time.sleep(_POLL_S)


class _Impostor(Exception):
    """The port of an endpoint file answers, but not as the owner that wrote the file."""


def _through(target: str, found: EndpointFile) -> Connection:
    """An HTTP client to the owner's endpoint (a pool of its own: no proxy from the environment)."""
    pool = urllib3.PoolManager(maxsize=4)
    try:
        nonce = secrets.token_hex(16)
        answer = pool.request("GET", f"http://127.0.0.1:{found.port}{IDENTITY_PATH}?nonce={nonce}", timeout=5.0,
                              retries=False)
        if answer.status != 200 or not hmac.compare_digest(answer.data, identity_proof(found.token, nonce).encode()):
            raise _Impostor(f"127.0.0.1:{found.port} does not answer as the archive's owner (pid {found.pid})")
        client = clickhouse_connect.get_client(
            host="127.0.0.1", port=found.port, username=ENDPOINT_USER, password=found.token, compress=False,
            tz_mode="aware", connect_timeout=5, autogenerate_session_id=False, pool_mgr=pool)
    except BaseException:
        pool.clear()
        raise
    return Connection(target, client, "default", via=found, pool=pool)


def _held(data_dir: str) -> bool:
    """Whether an engine holds the directory (ClickHouse flocks its ``status`` file while it runs).

    Asking first keeps chDB from printing "Cannot lock file" for an open that is bound to fail.
    """
    try:
        fd = os.open(Path(data_dir) / "status", os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops our lock, if we got it
    return False
