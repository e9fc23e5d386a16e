"""kubectl's output conventions for the views: ``-o wide|json|yaml``, ``--watch``, and ``-N`` for the namespace.

* ``-o json`` is ``--json`` (one object per line, :func:`faultline.terminal.to_json`); ``-o yaml`` is the same
  data as YAML (times as the same RFC 3339 strings), one document per ``---``; ``-o wide`` is the table with
  the columns marked ``wide`` too (an incident's summary, a dead letter's example...). The default table
  has an AGE column beside every time a person acts on (kubectl's ``42s``, ``7m``, ``3h``, ``2d``).
* ``-w``/``--watch`` prints the view again every ``--interval`` seconds (2) until interrupted (Ctrl-C:
  exit 130): at a terminal it repaints the screen; into a pipe it prints each round after a
  ``# <time>`` line; as JSON, one object per line per round; as YAML, one document per round.
* ``-N`` is short for ``--namespace``, faultline's *topic* namespace (the archive and topics a replay or
  a live cell uses). It is not ``-n`` on purpose: every Kubernetes user reads ``-n`` as kubectl's
  namespace, which faultline never takes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import yaml

from faultline.errors import UsageError
from faultline.terminal import make_console, rfc3339, to_json

__all__ = ["FORMATS", "add_namespace", "add_output", "emit", "output_format", "repeat"]

FORMATS = ("table", "wide", "json", "yaml")


def add_output(p: argparse.ArgumentParser, watch: bool = False) -> None:
    """``-o``, ``--json`` (its shorthand) and, for a view that changes while one looks, ``-w``/``--interval``."""
    p.add_argument("-o", "--output", choices=FORMATS, default=None,
                   help="table (default), wide (more columns), json (one object per line) or yaml")
    p.add_argument("--json", action="store_true", help="the same as -o json")
    if watch:
        p.add_argument("-w", "--watch", action="store_true",
                       help="print it again every --interval seconds until interrupted (Ctrl-C)")
        p.add_argument("--interval", type=float, default=2.0, help="seconds between two rounds of --watch (2)")


def add_namespace(p: argparse.ArgumentParser, help_: str) -> None:
    p.add_argument("-N", "--namespace", help=help_)


def output_format(args: argparse.Namespace) -> str:
    """The format asked for: ``--json`` and ``-o`` must agree when both are given."""
    chosen = getattr(args, "output", None)
    if getattr(args, "json", False):
        if chosen not in (None, "json"):
            raise UsageError(f"--json and -o {chosen} ask for two formats; give one")
        return "json"
    return chosen or "table"


def emit(args: argparse.Namespace, data: Any, table: Callable[[Any, bool], None]) -> None:
    """``data`` in the format asked for; ``table(data, wide)`` prints the table forms."""
    fmt = output_format(args)
    if fmt == "json":
        print(to_json(data), flush=True)
    elif fmt == "yaml":
        print("---\n" + yaml.safe_dump(json.loads(to_json(data)), sort_keys=False, allow_unicode=True), end="",
              flush=True)
    else:
        table(data, fmt == "wide")


def repeat(args: argparse.Namespace, one_round: Callable[[], None], sleep: Callable[[float], None] | None = None,
           now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
    """One round, or with ``--watch`` a round every ``--interval`` seconds until interrupted (module docstring)."""
    if not getattr(args, "watch", False):
        one_round()
        return
    if args.interval <= 0:
        raise UsageError(f"--interval wants a positive number of seconds, got {args.interval:g}")
    console = make_console()
    table = output_format(args) in ("table", "wide")
    while True:
        if table and console.is_terminal:
            console.clear()
        elif table:
            print(f"# {rfc3339(now())}", flush=True)
        one_round()
        sys.stdout.flush()
        (sleep or time.sleep)(args.interval)
