"""Setting a namespace up and measuring it: ``schemas``, ``broker``, ``topics``, ``acls``, ``bench``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common.settings import Settings
from faultline.commands import Add

__all__ = ["register"]


def register(add: Add) -> None:
    s = add("schemas", "Export JSON Schema of every topic's records for subscribers.",
            "faultline schemas export build/schemas")
    s.add_argument("action", choices=["export"])
    s.add_argument("dir", type=Path)
    s.set_defaults(run=_schemas)

    b = add("broker", "Start, stop or check the local Kafka broker (KRaft, loopback).", "faultline broker start")
    b.add_argument("action", choices=["start", "stop", "status"])
    b.set_defaults(run=_broker)

    tp = add("topics", "Print the namespace's topic plan with its sizing arithmetic, or apply it to Kafka.",
             "FAULTLINE_KAFKA=kafka:9092 faultline topics apply --dry-run")
    tp.add_argument("action", choices=["plan", "apply"])
    tp.add_argument("--dry-run", action="store_true", help="apply: say what would change; change nothing")
    tp.add_argument("--gpus", type=int, default=10_000, help="GPUs in the fleet (cell) to size for (10000)")
    tp.set_defaults(run=_topics)

    ac = add("acls", "Print the namespace's Kafka ACLs per service (deploy/acls.py), or apply them as the admin.",
             "FAULTLINE_KAFKA_USERNAME=admin faultline acls apply --dry-run")
    ac.add_argument("action", choices=["plan", "apply"])
    ac.add_argument("--dry-run", action="store_true", help="apply: say what would be created; change nothing")
    ac.add_argument("--user", action="append", default=[], metavar="SERVICE=NAME",
                    help="a service's Kafka user when not faultline-<service> (repeatable)")
    ac.set_defaults(run=_acls)

    be = add("bench", "Measure detection latency, throughput, archive rate, replay rate and goodput.",
             "faultline bench --json")
    be.add_argument("--json", action="store_true", help="print the summary as one JSON object (last line)")
    be.add_argument("--quick", action="store_true", help="seconds, small load (what CI runs)")
    be.set_defaults(run=_bench)


def _schemas(args: argparse.Namespace, settings: Settings) -> int:
    from streams.export import export_schemas

    for path in export_schemas(args.dir):
        print(path)
    return 0


def _broker(args: argparse.Namespace, settings: Settings) -> int:
    from deploy.local.kafka import detached_status, start_detached, stop_detached

    state = settings.data_dir / "kafka"
    if args.action == "start":
        print(f"local Kafka broker ready at {start_detached(state, port=settings.local_kafka_port)}")
    elif args.action == "stop":
        print("stopped" if stop_detached(state) else "no local broker was running")
    else:
        status = detached_status(state)
        print(f"running at {status}" if status else "not running")
        return 0 if status else 1
    return 0


def _topics(args: argparse.Namespace, settings: Settings) -> int:
    """``faultline topics plan|apply``: the plan of deploy/topics/; apply is idempotent (only grows)."""
    from deploy.topics import Assumptions, apply_plan, make_plan, render_actions, render_plan

    plan = make_plan(settings.namespace, Assumptions(gpus=args.gpus))
    if args.action == "plan":
        print(render_plan(plan))
        return 0
    from faultline.pipeline import ensure_broker

    actions = apply_plan(settings.kafka_config(ensure_broker(settings)), plan, dry_run=args.dry_run)
    print(render_actions(actions, args.dry_run))
    return 0


def _acls(args: argparse.Namespace, settings: Settings) -> int:
    """``faultline acls plan|apply``: deploy/acls.py's grants; apply only adds what is missing."""
    from deploy.acls import acl_plan, apply_acls, render_plan

    users = dict(u.split("=", 1) for u in args.user if "=" in u)
    if len(users) != len(args.user):
        raise ValueError("--user takes SERVICE=NAME, e.g. --user sink=archive-writer")
    grants = acl_plan(settings.namespace, users)
    if args.action == "plan":
        print(render_plan(grants))
        return 0
    from faultline.pipeline import ensure_broker

    print("\n".join(apply_acls(settings.kafka_config(ensure_broker(settings)), grants, dry_run=args.dry_run)))
    return 0


def _bench(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.bench.runner import run_bench

    result = run_bench(settings, quick=args.quick)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0
