"""``faultline replay``: a capture through the real pipeline, its decisions printed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common.settings import Settings
from faultline.commands import Add
from faultline.errors import Failure, UsageError

__all__ = ["register", "incident_line", "command_line", "deadletters_hint"]


def register(add: Add) -> None:
    r = add("replay", "Run a capture through the real pipeline (broker, correlator, archive) and print decisions.",
            "faultline replay ../shared/scenarios/psu_rail_loss.jsonl --json")
    r.add_argument("capture", type=Path)
    r.add_argument("--json", action="store_true", help="print the contract JSON on standard output")
    r.add_argument("--policy", type=Path, help="correlator policy YAML (default: built-in)")
    r.add_argument("--keep-topics", action="store_true", help="leave the replay's topics on the broker")
    r.set_defaults(run=_replay)


def incident_line(inc: dict[str, Any]) -> str:
    """``incident inc-… gpu_off_bus job pt-70b culprit n03 GPU-e406… state restarting`` (contract JSON in)."""
    culprit = inc.get("culprit") or {}
    blamed = " ".join([culprit.get("node") or "", *(culprit.get("gpus") or [])]).strip() or "-"
    return (f"incident {inc['id']} {inc['category']} job {inc.get('job') or '-'} culprit {blamed} "
            f"severity {inc['severity']} state {inc['state']}")


def command_line(c: dict[str, Any], with_time: bool = True) -> str:
    """One command as a person reads it (contract JSON in): when, what, on what, and how."""
    from faultline.story import describe_command
    from faultline.terminal import human_time

    target = " ".join(f"{k} {v}" for k, v in (c.get("target") or {}).items() if v)
    how = describe_command(c["type"], c.get("params") or {}) if c["type"] == "restart_job" else ""
    approval = " (waits for approval)" if c.get("requires_approval") else ""
    when = f"{human_time(c['issued_at'], ms=True)} " if with_time else ""
    return f"command  {when}{c['type']} {target}{f': {how}' if how else ''}{approval}"


def deadletters_hint(archive_namespace: str) -> str:
    """The command that lists why a replay's lines were set aside: its dead letters are in its own namespace."""
    return f"faultline deadletters --namespace {archive_namespace}"


@contextmanager
def _progress(total: int) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on standard error at a terminal; silence in a pipe or log file."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from faultline.terminal import make_console

    console = make_console(stderr=True)
    if not console.is_terminal:
        yield lambda n: None
        return
    with Progress(TextColumn("publishing"), BarColumn(), MofNCompleteColumn(), TextColumn("lines"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("replay", total=total)
        yield lambda n: bar.update(task, completed=n)


def _replay(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.pipeline import replay
    from faultline.terminal import plural, to_json

    if not args.capture.is_file():
        raise UsageError(f"no such capture file {args.capture}; give the path of a JSON Lines capture "
                         "(../shared/contract/README.md describes the format)")
    if args.policy:
        settings = settings.model_copy(update={"policy": args.policy})
    with args.capture.open("rb") as f:
        total = sum(1 for _ in f)
    with _progress(total) as on_line:
        run = replay(args.capture, settings, keep_topics=args.keep_topics, on_line=on_line)
    out = run.contract()
    print(f"replayed {plural(run.lines, 'line')} ({run.bad} bad) as {plural(run.events, 'event')} in namespace "
          f"{run.namespace}; {plural(len(out['incidents']), 'incident')}, {plural(len(out['commands']), 'command')}; "
          f"{plural(run.archived_rows, 'row')} archived to {settings.archive_shown} under namespace "
          f"{run.archive_namespace} (read it with `faultline report --namespace {run.archive_namespace}`, remove it "
          f"with `faultline archive drop {run.archive_namespace}`)", file=sys.stderr)
    if args.json:
        print(to_json(out))
    else:
        for inc in out["incidents"]:
            print(incident_line(inc))
        for c in out["commands"]:
            print(command_line(c))
    if run.lines == 0:
        raise Failure(f"{args.capture} holds no observations; nothing was judged")
    if run.bad == run.lines:
        raise Failure(f"every line of {args.capture} was bad ({plural(run.bad, 'dead letter')}; the reasons: "
                      f"`{deadletters_hint(run.archive_namespace)}`); nothing was judged. Check the capture's format "
                      "against ../shared/contract/README.md")
    return 0
