"""``faultline archive``: the archive's namespaces, listed and dropped."""

from __future__ import annotations

import argparse
import sys

from common.settings import Settings
from faultline.commands import Add

__all__ = ["register"]


def register(add: Add) -> None:
    a = add("archive", "List the archive's namespaces (live, replays, demos) or drop the rows of some.",
            "faultline archive drop faultline.replay-ab63543b39")
    a.add_argument("action", choices=["list", "drop"])
    a.add_argument("namespaces", nargs="*", metavar="NAMESPACE", help="drop: the namespaces to remove")
    a.add_argument("--scratch", action="store_true",
                   help="drop: every replay and demo namespace of FAULTLINE_NAMESPACE (<ns>.replay-*, <ns>.demo-*)")
    a.add_argument("--json", action="store_true", help="list: one JSON object per namespace, one per line")
    a.set_defaults(run=_archive)


def _archive(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.terminal import to_json
    from sinks.archive.store import Archive

    with Archive.open(settings.archive_url, live=settings.namespace, create=False) as archive:  # the live one
        known = archive.namespaces()
        if args.action == "list":
            for ns in known:
                if args.json:
                    print(to_json(ns))
                else:
                    where = "the archive's own database (live)" if ns["live"] else f"database {ns['database']}"
                    print(f"{ns['namespace']}: {ns['events'] or 0} events, {ns['incidents'] or 0} incidents; {where}")
            return 0
        targets = list(args.namespaces)
        if args.scratch:
            prefixes = (f"{settings.namespace}.replay-", f"{settings.namespace}.demo-")
            targets += [ns["namespace"] for ns in known if ns["namespace"].startswith(prefixes)]
        if not targets:
            print("faultline archive drop: name the namespaces to drop, or --scratch for every replay and demo "
                  "(`faultline archive list` shows them)", file=sys.stderr)
            return 2
        for name in dict.fromkeys(targets):
            database = archive.drop_namespace(name)
            print(f"dropped namespace {name} (database {database})")
    return 0
