"""``faultline backtest``: a candidate policy over an archive window (or a capture), compared."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common.settings import Settings
from faultline.commands import Add
from faultline.errors import Failure, UsageError
from streams.decisions import Command, Incident

__all__ = ["register"]


def register(add: Add) -> None:
    b = add("backtest", "What a candidate policy would have decided over archived history (or a capture), "
            "compared with the current policy or with what was decided live.",
            "faultline backtest my-policy.yaml --since 30d --html backtest.html")
    b.add_argument("policy", type=Path, help="the candidate policy (YAML merged over the built-in one)")
    b.add_argument("--since", help="window start: a duration back from now (12h, 7d, 30d) or an ISO date/time")
    b.add_argument("--from", dest="from_", metavar="TIME", help="window start (ISO date/time; same as --since TIME)")
    b.add_argument("--to", help="window end (ISO date/time or a duration back from now); default: the newest event")
    b.add_argument("--warmup", default="1d",
                   help="judged before the window but not compared, so the window starts as it did live "
                        "(default 1d; lemon scores remember weeks: 14d for a lemon policy edit)")
    b.add_argument("--against", choices=["current", "live"], default="current",
                   help="current (default): the current policy judged here on the same events, so every "
                        "difference is the policy's; live: the decisions the live correlator archived")
    b.add_argument("--baseline-policy", type=Path,
                   help="the policy to compare with (default: FAULTLINE_POLICY, else the built-in one)")
    b.add_argument("-N", "--namespace", help="the archive namespace to read (default: FAULTLINE_NAMESPACE, the live one)")
    b.add_argument("--capture", type=Path, help="replay this capture instead of the archive (its own order)")
    b.add_argument("--json", action="store_true", help="one JSON object with every difference")
    b.add_argument("--html", type=Path, help="also write a page with the differing incidents side by side")
    b.add_argument("--fail-on-diff", action="store_true", help="exit 1 when the candidate decides differently")
    b.add_argument("--workers", type=_workers, metavar="N",
                   help="processes that judge: each policy side in its own, the same decisions either way "
                        "(default: the CPUs, at most one per side; 1: this process, in one pass)")
    b.set_defaults(run=_backtest)


def _when(text: str | None, what: str) -> datetime | None:
    from sinks.report import parse_since

    if text is None:
        return None
    try:
        return parse_since(text)
    except ValueError:
        raise UsageError(f"{what} wants a duration (12h, 7d, 30d) or an ISO date/time, got {text!r}") from None


_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _duration(text: str) -> timedelta:
    match = _SPAN.match(text)
    if match is None or (match.group(2) is None and float(match.group(1)) != 0):
        raise UsageError(f"--warmup wants a duration (0, 6h, 1d, 14d), got {text!r}")
    return timedelta(seconds=float(match.group(1)) * _UNIT_S[(match.group(2) or "s").lower()])


def _workers(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"wants a whole number of processes, 1 or more, got {text!r}")
    return int(text)


def _backtest(args: argparse.Namespace, settings: Settings) -> int:
    from correlators.policy import load_policy
    from faultline.backtest.render import render
    from faultline.backtest.run import backtest
    from faultline.backtest.source import from_archive, from_capture
    from faultline.preflight import check_policy, open_archive
    from faultline.terminal import to_json

    if args.since and args.from_:
        raise UsageError("give the window's start once: --since or --from")
    since, until = _when(args.since or args.from_, "--since/--from"), _when(args.to, "--to")
    if since and until and until < since:
        raise UsageError(f"--to ({until.isoformat()}) is before the window's start ({since.isoformat()})")
    warmup = _duration(args.warmup)
    current_path = args.baseline_policy or settings.policy
    for path in (args.policy, current_path):
        if path is not None:
            check_policy(Path(path))
    if not args.policy.is_file():
        raise UsageError(f"no candidate policy file {args.policy}; copy correlators/policy.yaml and edit it")
    candidate, current = load_policy(args.policy), load_policy(current_path)
    labels = {"candidate": str(args.policy), "baseline": "live" if args.against == "live"
              else str(current_path) if current_path else "built-in policy"}
    if args.capture is not None:
        if args.against == "live":
            raise UsageError("a capture has no live decisions to compare with: drop --against live, or "
                             "backtest the archive namespace it was replayed into (--namespace)")
        if not args.capture.is_file():
            raise UsageError(f"no such capture file {args.capture}")
        result = backtest(from_capture(args.capture, since, until), candidate, current, labels=labels,
                          workers=args.workers)
    else:
        from sinks.archive.history import decided

        with open_archive(settings, args.namespace or settings.namespace, live=settings.namespace,
                          create=False) as archive:
            src = from_archive(archive, since, until, warmup)
            lo, hi = src.since, src.until or datetime.max.replace(tzinfo=UTC)

            def archived() -> tuple[list[Incident], list[Command]]:
                return decided(archive, lo, hi) if lo else ([], [])

            live = archived if args.against == "live" else None
            result = backtest(src, candidate, None if live else current, live, labels, args.workers)
    out = result.to_json()
    if args.json:
        print(to_json(out))
    else:
        render(out)
    if args.html:
        from faultline.backtest.page import render_page

        args.html.write_text(render_page(result), encoding="utf-8")
        print(f"wrote {args.html}", file=sys.stderr)
    if result.judged.events == 0:
        raise Failure(f"no events to judge in {result.source.describe} for this window; widen it (--since) or "
                      "check the namespace (`faultline archive list`)")
    if args.fail_on_diff and result.differs:
        raise Failure("the candidate policy decides differently (--fail-on-diff)")
    return 0
