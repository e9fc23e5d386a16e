"""Namespaces in the archive: each namespace's rows in a database of their own.

A namespace is the topic prefix a pipeline runs under (``FAULTLINE_NAMESPACE``): the live one
(``faultline``), and the ones replays and demos make for themselves (``faultline.replay-<id>``,
``faultline.demo-<id>``). The archive keeps each namespace's tables and views in one database,
so no query of one namespace can see another's rows, and removing a namespace is one
``DROP DATABASE``.

* The **live** namespace keeps the archive's own database (``default`` for chDB, the URL's for a
  server: what Grafana's data source points at), including every row archived before the
  archive had namespaces: the first namespace opened as the live one claims it.
* **Every other** namespace gets a database named after it.

Which namespace has which database is recorded in the ``namespaces`` table of the archive's own
database (a ReplacingMergeTree on the namespace; a dropped one keeps a row marked ``dropped``).
Names are checked here (topic-name characters only) before they reach any SQL.
"""

from __future__ import annotations

import re
from typing import Any

from clickhouse_connect.driver.client import Client

__all__ = [
    "DEFAULT_NAMESPACE",
    "NamespaceError",
    "check_namespace",
    "database_of",
    "drop_namespace",
    "list_namespaces",
    "resolve",
]

DEFAULT_NAMESPACE = "faultline"
"""The live namespace of a default install (``FAULTLINE_NAMESPACE``'s default)."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_RESERVED = {"system", "information_schema", "default"}


class NamespaceError(ValueError):
    """A namespace that cannot be used or dropped; the message says why and what to do."""


def check_namespace(namespace: str) -> str:
    """``namespace`` if it is a usable name (letters, digits, ``.``, ``_``, ``-``; at most 200)."""
    if not _NAME.match(namespace):
        raise NamespaceError(f"namespace {namespace!r} is not a name: use letters, digits, '.', '_' and '-' "
                             "(at most 200), starting with a letter or digit")
    return namespace


def _ident(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def _registry(base: str) -> str:
    return f"{_ident(base)}.namespaces"


def _ensure_registry(client: Client, base: str) -> None:
    client.command(f"""
        CREATE TABLE IF NOT EXISTS {_registry(base)} (
            namespace String,
            database String,
            at DateTime64(6, 'UTC') DEFAULT now64(6),
            dropped UInt8 DEFAULT 0
        ) ENGINE = ReplacingMergeTree(at) ORDER BY namespace
    """)


def _registered(client: Client, base: str) -> dict[str, dict[str, Any]]:
    _ensure_registry(client, base)
    rows = client.query(f"SELECT namespace, database, at FROM {_registry(base)} FINAL WHERE dropped = 0 "
                        "ORDER BY namespace").named_results()
    return {row["namespace"]: row for row in rows}


def _record(client: Client, base: str, namespace: str, database: str, dropped: bool = False) -> None:
    client.command(f"INSERT INTO {_registry(base)} (namespace, database, dropped) "
                   "SELECT {ns:String}, {db:String}, {dropped:UInt8}",
                   parameters={"ns": namespace, "db": database, "dropped": int(dropped)})


def database_of(client: Client, base: str, namespace: str) -> str | None:
    """The database of a registered namespace, or None."""
    found = _registered(client, base).get(check_namespace(namespace))
    return None if found is None else str(found["database"])


def resolve(client: Client, base: str, namespace: str | None, live: str | None, create: bool = True
            ) -> tuple[str, str]:
    """The namespace and its database (created and recorded on first use).

    ``live`` is the installation's live namespace: it keeps ``base``, the archive's own database,
    if no namespace has claimed it yet; any other namespace gets a database named after it.
    ``namespace`` None means the live one: whichever holds ``base``, else ``live`` (or
    :data:`DEFAULT_NAMESPACE`). Without ``create``, a namespace other than the live one must
    exist already (a reader asking for a replay that is not there gets an error, not a new empty
    namespace).
    """
    known = _registered(client, base)
    holder = next((name for name, row in known.items() if row["database"] == base), None)
    if namespace is None:
        namespace = holder or live or DEFAULT_NAMESPACE
    check_namespace(namespace)
    if namespace in known:
        database = str(known[namespace]["database"])
    elif namespace == (live or namespace) and holder is None:
        database = base
    elif not create:
        names = ", ".join(known) or "none yet"
        raise NamespaceError(f"no namespace {namespace!r} in the archive (it has: {names}); "
                             "`faultline archive list` shows them with their rows")
    else:
        if namespace.lower() in _RESERVED or namespace == base:
            raise NamespaceError(f"namespace {namespace!r} would share a database the archive keeps for "
                                 "itself or for another namespace; choose another name")
        database = namespace
    client.command(f"CREATE DATABASE IF NOT EXISTS {_ident(database)}")
    if namespace not in known:
        _record(client, base, namespace, database)
    return namespace, database


def list_namespaces(client: Client, base: str) -> list[dict[str, Any]]:
    """Every namespace with its database, whether it is the live one (the archive's own database),
    and how many events and incidents it holds."""
    out: list[dict[str, Any]] = []
    for namespace, row in _registered(client, base).items():
        database = str(row["database"])
        counts: dict[str, int | None] = {"events": None, "incidents": None}
        tables = {r[0] for r in client.query("SELECT name FROM system.tables WHERE database = {db:String}",
                                             parameters={"db": database}).result_rows}
        for key, table, what in (("events", "events", "count()"), ("incidents", "incident_versions", "uniqExact(id)")):
            if table in tables:
                counts[key] = int(str(client.command(f"SELECT {what} FROM {_ident(database)}.{table}")))
        out.append({"namespace": namespace, "database": database, "live": database == base,
                    "registered_at": row["at"], **counts})
    return out


def drop_namespace(client: Client, base: str, namespace: str) -> str:
    """Remove every row of ``namespace`` (its database); return the database dropped.

    The namespace holding the archive's own database (the live one) is refused: it is the
    archive itself, and Grafana and the sink point at it.
    """
    known = _registered(client, base)
    if namespace not in known:
        names = ", ".join(known) or "none"
        raise NamespaceError(f"no namespace {namespace!r} in the archive (namespaces: {names}); "
                             "`faultline archive list` shows them")
    database = str(known[namespace]["database"])
    if database == base:
        raise NamespaceError(f"namespace {namespace!r} is the archive's own (live) database and is not dropped; "
                             "drop replays and demos, not the archive")
    client.command(f"DROP DATABASE IF EXISTS {_ident(database)} SYNC")
    _record(client, base, namespace, database, dropped=True)
    return database
