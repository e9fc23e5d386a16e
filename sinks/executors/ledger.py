"""The result ledger: which command ids this executor has settled, is carrying out, or holds.

This is what makes execution *at most once per id*. A small SQLite file in
the executor's state directory (or memory, for tests and dry runs) keeps one
row per command id:

* ``pending`` — waiting for a person's approval (the command is kept, so an
  approval that arrives after a restart can still run it);
* ``started`` — written *before* the backend is called: an executor that
  crashes mid-way finds the row at its next start and reports the command as
  interrupted instead of running it again;
* ``settled`` — done, failed or denied: every later copy of the id is a
  duplicate.

Each row also keeps the latest result produced for it and whether that result
reached the ``command-results`` topic, so results that were produced but not
delivered (a crash, a broker outage) are sent at the next start (an outbox).

The ledger is rebuilt from the ``command-results`` topic too
(:meth:`ResultLedger.absorb`): a fresh executor, or a second one on another
machine, learns every id already settled under its name and never repeats it.

A ledger belongs to one **scope**: a topic namespace and a cluster
(:meth:`ResultLedger.in_dir` names its file after the executor, the namespace
and the cluster, and the file records its scope and refuses to be opened for
another). Two executors of one name and state directory serving two namespaces
(or clusters) share no entry: an id settled in one is not a duplicate in the
other, and the circuit breaker, refilled from the ledger at start
(:meth:`~sinks.executors.core.Executor.recover`), counts only its own scope's
fences (issue 27, item 6).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from common.private import private_dir
from streams.decisions import Command, CommandResult

__all__ = ["FINAL_STATUSES", "Entry", "LedgerScopeError", "ResultLedger", "Scope"]

FINAL_STATUSES: frozenset[str] = frozenset({"done", "failed", "denied"})

State = Literal["pending", "started", "settled"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('pending', 'started', 'settled')),
    command TEXT,                       -- the Command as JSON, when known
    result TEXT,                        -- the latest CommandResult as JSON, when one was produced
    published INTEGER NOT NULL DEFAULT 0,
    attempted_at REAL                   -- epoch seconds the backend was called; NULL: never
)
"""
_COLUMNS = "id, state, command, result, published, attempted_at"
_SCOPE = "CREATE TABLE IF NOT EXISTS scope (namespace TEXT NOT NULL, cluster TEXT NOT NULL)"

#: (namespace, cluster): what a ledger's entries are about.
Scope = tuple[str, str]


class LedgerScopeError(ValueError):
    """A ledger file opened for another namespace or cluster than the one it records."""


@dataclass(frozen=True)
class Entry:
    """One command id as the ledger knows it."""

    id: str
    state: State
    command: Command | None
    result: CommandResult | None
    published: bool
    attempted_at: datetime | None


class ResultLedger:
    """Per-id execution state, persisted in SQLite (``path``) or kept in memory (``path=None``).

    With a ``scope`` the file records it on first use and is refused (:class:`LedgerScopeError`)
    when opened for another one.
    """

    def __init__(self, path: Path | None = None, scope: Scope | None = None) -> None:
        if path is not None:
            private_dir(path.parent)  # what it ran and for whom: this user's alone
        self.path = path
        self.scope = scope
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path) if path else ":memory:", check_same_thread=False,
                                   isolation_level=None)
        self._db.execute("PRAGMA synchronous = FULL")
        self._db.execute(_SCHEMA)
        self._db.execute(_SCOPE)
        if scope is not None:
            self._claim(scope)

    @classmethod
    def in_dir(cls, state_dir: Path, executor: str, scope: Scope | None = None) -> ResultLedger:
        """The ledger of the executor named ``executor`` in ``state_dir``, for ``scope`` (namespace, cluster).

        The file is ``<executor>@<namespace>@<cluster>.ledger.sqlite`` (``@`` is in no name, so no
        two scopes meet in one file); without a scope (development, tests) ``<executor>.ledger.sqlite``.
        """
        return cls(cls.file_in(state_dir, executor, scope), scope)

    @staticmethod
    def file_in(state_dir: Path, executor: str, scope: Scope | None = None) -> Path:
        """Where :meth:`in_dir` keeps that ledger (nothing is opened)."""
        return state_dir / f"{'@'.join(_safe(p) for p in [executor, *(scope or ())])}.ledger.sqlite"

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- reads --------------------------------------------------------------------------

    def get(self, command_id: str) -> Entry | None:
        rows = self._select("WHERE id = ?", (command_id,))
        return rows[0] if rows else None

    def missing_commands(self) -> list[str]:
        """Ids held for approval whose command is not known yet (learnt from the results topic)."""
        return [e.id for e in self._select("WHERE state = 'pending' AND command IS NULL")]

    def started(self) -> list[Entry]:
        """Attempts that began and never settled: the executor stopped in the middle."""
        return self._select("WHERE state = 'started'")

    def unpublished(self) -> list[CommandResult]:
        """Results produced but not yet confirmed delivered, oldest first."""
        rows = self._select("WHERE published = 0 AND result IS NOT NULL")
        return sorted((e.result for e in rows if e.result is not None), key=lambda r: r.at)

    def attempted_since(self, since: datetime) -> list[tuple[Command, datetime]]:
        """Commands whose execution began at or after ``since``, with when."""
        rows = self._select("WHERE attempted_at >= ? AND command IS NOT NULL", (since.timestamp(),))
        return [(e.command, e.attempted_at) for e in rows if e.command is not None and e.attempted_at is not None]

    # --- writes -------------------------------------------------------------------------

    def hold(self, cmd: Command, result: CommandResult) -> None:
        """Keep ``cmd`` until a person decides; ``result`` (waiting_approval) is to be published."""
        self._upsert(cmd.id, "pending", cmd, result, published=False, attempted_at=None)

    def begin(self, cmd: Command, at: datetime) -> None:
        """Note that ``cmd`` is about to be carried out (before the backend is called)."""
        self._upsert(cmd.id, "started", cmd, None, published=True, attempted_at=at)

    def settle(self, result: CommandResult, cmd: Command | None = None) -> None:
        """The final word on a command id (done, failed or denied), to be published."""
        if result.status not in FINAL_STATUSES:
            raise ValueError(f"not a final status: {result.status}")
        entry = self.get(result.command)
        self._upsert(result.command, "settled", cmd or (entry.command if entry else None), result,
                     published=False, attempted_at=entry.attempted_at if entry else None)

    def mark_published(self, result: CommandResult) -> None:
        """``result`` reached the topic (only marks the row if that is still its latest result)."""
        with self._tx() as db:
            db.execute("UPDATE ledger SET published = 1 WHERE id = ? AND json_extract(result, '$.status') = ?",
                       (result.command, result.status))

    def absorb(self, result: CommandResult) -> bool:
        """Learn from a result already on the topic; True when it changed what the ledger knows.

        A final result settles the id (already published); a waiting_approval
        result for an unknown id holds it, waiting for its command
        (:meth:`attach`). Other statuses carry no state.
        """
        entry = self.get(result.command)
        if result.status in FINAL_STATUSES:
            if entry is not None and entry.state == "settled":
                return False
            self._upsert(result.command, "settled", entry.command if entry else None, result, published=True,
                         attempted_at=entry.attempted_at if entry else None)
            return True
        if result.status == "waiting_approval" and entry is None:
            self._insert_pending(result)
            return True
        return False

    def attach(self, cmd: Command) -> bool:
        """Give a held id (learnt from the topic) its command; True when it was missing."""
        with self._tx() as db:
            cur = db.execute("UPDATE ledger SET command = ? WHERE id = ? AND state = 'pending' AND command IS NULL",
                             (cmd.model_dump_json(), cmd.id))
            return cur.rowcount > 0

    # --- internals ----------------------------------------------------------------------

    def _claim(self, scope: Scope) -> None:
        """Record ``scope`` in a new file; refuse a file that records another."""
        with self._tx() as db:
            row = db.execute("SELECT namespace, cluster FROM scope").fetchone()
            if row is None:
                db.execute("INSERT INTO scope (namespace, cluster) VALUES (?, ?)", scope)
        if row is not None and tuple(row) != tuple(scope):
            self._db.close()
            raise LedgerScopeError(
                f"ledger {self.path} is namespace {row[0]!r}, cluster {row[1]!r}'s, not namespace {scope[0]!r}, "
                f"cluster {scope[1]!r}'s: an executor's ledger serves one namespace and cluster")

    def _insert_pending(self, result: CommandResult) -> None:
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO ledger (id, state, result, published) VALUES (?, 'pending', ?, 1)",
                       (result.command, result.model_dump_json()))

    def _upsert(self, command_id: str, state: State, cmd: Command | None, result: CommandResult | None, *,
                published: bool, attempted_at: datetime | None) -> None:
        with self._tx() as db:
            db.execute(
                f"INSERT OR REPLACE INTO ledger ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                (command_id, state, cmd.model_dump_json() if cmd else None,
                 result.model_dump_json() if result else None, int(published),
                 attempted_at.timestamp() if attempted_at else None))

    def _select(self, where: str, params: tuple[object, ...] = ()) -> list[Entry]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM ledger {where} ORDER BY rowid", params).fetchall()
        return [
            Entry(id=r[0], state=r[1],
                  command=Command.model_validate_json(r[2]) if r[2] else None,
                  result=CommandResult.model_validate_json(r[3]) if r[3] else None,
                  published=bool(r[4]),
                  attempted_at=datetime.fromtimestamp(r[5], UTC) if r[5] is not None else None)
            for r in rows
        ]

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, committed (durably: synchronous=FULL) on exit."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
