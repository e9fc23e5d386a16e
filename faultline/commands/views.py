"""The on-call views over the archive: ``status``, ``incident``, ``timeline``, ``report`` and ``deadletters``."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from common.settings import Settings
from faultline.commands import Add
from faultline.errors import Failure, UsageError
from faultline.output import add_namespace, add_output, emit, output_format, repeat

__all__ = ["register"]

_DEV_MODE_BANNER = ("DEVELOPMENT MODE (FAULTLINE_DEV_MODE=true): workers and executors run without production keys; "
                    "commands, approvals and results may be unsigned. Never in production.")


_NAMESPACE_HELP = ("the archive namespace to read: a replay's or a demo's (faultline.replay-...; "
                   "`faultline archive list` shows them); default: FAULTLINE_NAMESPACE, the live one")


def register(add: Add) -> None:
    st = add("status", "Open incidents, fenced hardware, commands waiting for approval, pipeline health.",
             "faultline status --json")
    add_output(st, watch=True)
    add_namespace(st, _NAMESPACE_HELP)
    st.set_defaults(run=_operator_view)

    inc = add("incident", "One incident's whole story: signals, decisions, commands, results, recovery.",
              "faultline incident inc-0123456789abcdef --html incident.html")
    inc.add_argument("id")
    add_output(inc, watch=True)
    inc.add_argument("--html", type=Path, help="also write a self-contained HTML page with a graphical timeline")
    add_namespace(inc, _NAMESPACE_HELP)
    inc.set_defaults(run=_operator_view)

    tl = add("timeline", "The story of every incident of one job.", "faultline timeline pt-70b --html pt-70b.html")
    tl.add_argument("job")
    add_output(tl)
    tl.add_argument("--html", type=Path, help="write one HTML page per incident: FILE, FILE-2, ...")
    add_namespace(tl, _NAMESPACE_HELP)
    tl.set_defaults(run=_operator_view)

    o = add("report", "Answer the operators' questions from the archive (failures, lost GPU-hours, recovery...); "
            "`report lemons`: the GPUs and nodes that keep hurting jobs; `report checkpoints`: each job's checkpoint "
            "interval against the one the fleet's failure rate advises.", "faultline report --since 7d")
    o.add_argument("topic", nargs="?", choices=["lemons", "checkpoints"],
                   help="lemons: GPUs and nodes by lemon score (failures blamed on software, across jobs), worst "
                        "first; checkpoints: per job, its interval, the advised one (Young) and the GPU-hours a "
                        "day the difference costs")
    o.add_argument("--since", help="window start: a duration back from now (30m, 12h, 7d, 2w) or an ISO date/time")
    o.add_argument("--json", action="store_true", help="print JSON on standard output instead of tables")
    add_namespace(o, _NAMESPACE_HELP)
    o.add_argument("--top", type=int, default=20, help="lemons: how many GPUs and nodes to list (default 20)")
    o.set_defaults(run=_report)

    ap = add("approvals", "Every command an executor holds for a person: what it does, why, until when, and the "
             "line that approves it.", "faultline approvals --json")
    add_output(ap, watch=True)
    add_namespace(ap, _NAMESPACE_HELP)
    ap.set_defaults(run=_approvals)

    d = add("deadletters", "Why records were set aside: reasons, the stage that set them aside, counts, newest first.",
            "faultline deadletters --since 1h --source archive-sink")
    d.add_argument("--since", help="dead letters from then on: a duration back from now (30m, 12h, 7d) or an ISO "
                   "date/time")
    d.add_argument("--reason", default="", help="only reasons that contain this text (any case)")
    d.add_argument("--source", default="", help="only this stage (agent, spool, producer, correlator, "
                   "archive-sink, executor: a prefix before ':' matches every topic or executor of it)")
    d.add_argument("--limit", type=int, default=50, help="how many reasons to list (default 50)")
    add_output(d)
    add_namespace(d, _NAMESPACE_HELP)
    d.set_defaults(run=_deadletters)


def _report(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.preflight import open_archive
    from faultline.report_view import render_report
    from faultline.terminal import to_json
    from sinks.report import build_report

    since = _since(args.since)
    if args.topic == "lemons":
        return _lemons(args, settings, since)
    if args.topic == "checkpoints":
        return _checkpoints(args, settings)
    with open_archive(settings, args.namespace or settings.namespace, live=settings.namespace,
                      create=False) as archive:
        report = build_report(archive, since=since)
    if args.json:
        print(to_json(report.to_json()))
    else:
        render_report(report)
    return 0


def _checkpoints(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.checkpoint_view import render_advice
    from faultline.preflight import open_archive
    from faultline.terminal import to_json
    from sinks.checkpoint_advice import checkpoint_advice

    if args.since:
        raise UsageError("report checkpoints reads the archive's whole history (failure rates need it): "
                         "--since does not apply")
    with open_archive(settings, args.namespace or settings.namespace, live=settings.namespace,
                      create=False) as archive:
        doc = checkpoint_advice(archive)
    print(to_json(doc)) if args.json else render_advice(doc)
    return 0


def _since(text: str | None) -> datetime | None:
    from sinks.report import parse_since

    try:
        return parse_since(text) if text else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _deadletters(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.deadletter_view import DeadLetterFilter, deadletter_data, print_deadletters
    from faultline.preflight import open_archive

    if args.limit < 1:
        raise UsageError(f"--limit wants a positive number, got {args.limit}")
    wanted = DeadLetterFilter(since=_since(args.since), reason=args.reason, source=args.source)
    with open_archive(settings, args.namespace or settings.namespace, live=settings.namespace,
                      create=False) as archive:
        data = deadletter_data(archive, wanted, args.limit)
    emit(args, data, lambda d, wide: print_deadletters(d, wide=wide))
    return 0


def _lemons(args: argparse.Namespace, settings: Settings, since: datetime | None) -> int:
    from correlators.policy import load_policy
    from faultline.lemon_report import lemon_report, print_lemons
    from faultline.preflight import check_policy, open_archive
    from faultline.terminal import to_json

    if args.top < 1:
        raise UsageError(f"--top wants a positive number, got {args.top}")
    check_policy(settings.policy)
    policy = load_policy(settings.policy).lemons
    with open_archive(settings, args.namespace or settings.namespace, live=settings.namespace,
                      create=False) as archive:
        report = lemon_report(archive, policy, since=since, top=args.top)
    print(to_json(report)) if args.json else print_lemons(report)
    return 0


def _topic_namespace(args: argparse.Namespace, settings: Settings) -> str | None:
    """The namespace an approve line must name: the one read, when it is not FAULTLINE_NAMESPACE's."""
    return args.namespace if args.namespace and args.namespace != settings.namespace else None


def _approvals(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.approval_view import approval_rows, print_approvals
    from faultline.preflight import open_archive

    def one_round() -> None:
        with open_archive(settings, args.namespace or settings.namespace, live=settings.namespace,
                          create=False) as archive:
            rows = approval_rows(archive, namespace=_topic_namespace(args, settings))
        emit(args, {"waiting_for_approval": rows},
             lambda d, wide: print_approvals(d["waiting_for_approval"], wide=wide))

    repeat(args, one_round)
    return 0


def _operator_view(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.operator_views import (
        incident_data,
        job_incidents,
        print_incident,
        print_status,
        status_data,
    )
    from faultline.preflight import open_archive
    from faultline.timeline_html import render_timeline

    if args.cmd == "status":
        def status_round() -> None:
            with open_archive(settings, args.namespace or settings.namespace, live=settings.namespace,
                              create=False) as archive:
                data = {**status_data(archive, _topic_namespace(args, settings)), "dev_mode": settings.dev_mode}
            if settings.dev_mode and output_format(args) in ("table", "wide"):
                print(_DEV_MODE_BANNER)
            emit(args, data, lambda d, wide: print_status(d, wide=wide))

        repeat(args, status_round)
        return 0

    def stories() -> list[dict[str, Any]]:
        with open_archive(settings, args.namespace or settings.namespace, live=settings.namespace,
                          create=False) as archive:
            ids = [args.id] if args.cmd == "incident" else job_incidents(archive, args.job)
            found = [d for i in ids if (d := incident_data(archive, i)) is not None]
        if not found:
            what = f"incident {args.id}" if args.cmd == "incident" else f"incidents of job {args.job}"
            raise Failure(f"no {what} in {settings.archive_shown}; check the id with `faultline status` "
                          "(or FAULTLINE_ARCHIVE, if it is another archive)")
        return found

    def story_round() -> None:
        for n, story in enumerate(stories()):
            emit(args, story, lambda d, wide: print_incident(d, wide=wide))
            if args.html:
                path = args.html if n == 0 else args.html.with_name(f"{args.html.stem}-{n + 1}{args.html.suffix}")
                path.write_text(render_timeline(story["incident"], story["timeline"]), encoding="utf-8")
                print(f"wrote {path}", file=sys.stderr)

    repeat(args, story_round)
    return 0
