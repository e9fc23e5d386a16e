"""Setting a namespace up and measuring it: ``schemas``, ``broker``, ``topics``, ``acls``, ``bench``; and the
shell's ``completion``."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from common.settings import Settings
from faultline.commands import Add
from faultline.completion import SHELLS
from faultline.errors import Unavailable, UsageError
from faultline.terminal import to_json

__all__ = ["register"]


def register(add: Add) -> None:
    s = add("schemas", "Export JSON Schema of every topic's records for subscribers, or register them in the "
            "schema registry (FAULTLINE_SCHEMA_REGISTRY).", "faultline schemas export build/schemas")
    s.add_argument("action", choices=["export", "register"])
    s.add_argument("dir", type=Path, nargs="?", help="export: where to write <topic>.schema.json")
    s.add_argument("--json", action="store_true", help="print the files written as JSON")
    s.set_defaults(run=_schemas)

    b = add("broker", "Start, stop or check the local Kafka broker (KRaft, loopback).", "faultline broker start")
    b.add_argument("action", choices=["start", "stop", "status"])
    b.add_argument("--json", action="store_true", help="print the broker's state as JSON")
    b.set_defaults(run=_broker)

    tp = add("topics", "Print the namespace's topic plan with its sizing arithmetic, or apply it to Kafka.",
             "FAULTLINE_KAFKA=kafka:9092 faultline topics apply --dry-run")
    tp.add_argument("action", choices=["plan", "apply"])
    tp.add_argument("--dry-run", action="store_true", help="apply: say what would change; change nothing")
    tp.add_argument("--gpus", type=int, default=10_000, help="GPUs in the fleet (cell) to size for (10000)")
    tp.add_argument("--json", action="store_true", help="print the plan (or what apply did) as JSON")
    tp.set_defaults(run=_topics)

    ac = add("acls", "Print the namespace's Kafka ACLs per service (deploy/acls.py), or apply them as the admin.",
             "FAULTLINE_KAFKA_USERNAME=admin faultline acls apply --dry-run")
    ac.add_argument("action", choices=["plan", "apply"])
    ac.add_argument("--dry-run", action="store_true", help="apply: say what would be created; change nothing")
    ac.add_argument("--user", action="append", default=[], metavar="SERVICE=NAME",
                    help="a service's Kafka user when not faultline-<service> (repeatable)")
    ac.add_argument("--json", action="store_true", help="print the grants (or what apply did) as JSON")
    ac.set_defaults(run=_acls)

    be = add("bench", "Measure detection latency, throughput, archive rate, replay rate and goodput.",
             "faultline bench --json")
    be.add_argument("--json", action="store_true", help="print the summary as one JSON object (last line)")
    be.add_argument("--quick", action="store_true", help="seconds, small load (what CI runs)")
    be.add_argument("--only", choices=["storm", "archive", "replay"],
                    help="run this section alone (the 16,384-GPU cell's storm, the archive sink, replay)")
    be.add_argument("--cells", type=int, metavar="N",
                    help="instead: N cells at once, a namespace each with two workers, on a 3-broker cluster "
                         "(FAULTLINE_KAFKA's, or three local nodes), one storm in each at the same moment")
    be.add_argument("--real-job", action="store_true",
                    help="instead: run the torchrun example for real (torch, CPU) with seeded faults, without and "
                         "with faultline's engine, and measure each one's wall-clock ETTR beside the goodput model's")
    be.add_argument("--minutes", type=float, default=20.0, help="--real-job: wall time of each arm (run at once)")
    be.add_argument("--seed", type=int, default=1, help="--real-job: the fault schedule's seed")
    be.set_defaults(run=_bench)

    co = add("completion", "Print the shell completion script (written from this command's own options).",
             "source <(faultline completion bash)")
    co.add_argument("shell", choices=SHELLS, help="zsh loads it through bashcompinit (printed first)")
    co.set_defaults(run=_completion)


def _completion(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.cli import parser
    from faultline.completion import script

    print(script(parser(), args.shell), end="")
    return 0


def _register(settings: Settings) -> list[dict[str, object]]:
    from common.schema_registry import register_schemas

    if not settings.schema_registry:
        raise UsageError("no schema registry configured: set FAULTLINE_SCHEMA_REGISTRY=http(s)://host:8081")
    password = settings.schema_registry_password.get_secret_value() if settings.schema_registry_password else None
    try:
        done = register_schemas(settings.schema_registry, settings.namespace, settings.schema_registry_username,
                                password)
    except RuntimeError as exc:
        raise Unavailable(str(exc)) from None
    return [dataclasses.asdict(r) for r in done]


def _schemas(args: argparse.Namespace, settings: Settings) -> int:
    from streams.export import export_schemas

    if args.action == "register":
        done = _register(settings)
        if args.json:
            print(to_json({"registry": settings.schema_registry, "registered": done}))
        else:
            for r in done:
                print(f"registered {r['subject']} as id {r['schema_id']} ({r['uri']})")
        return 0
    if args.dir is None:
        raise UsageError("schemas export needs the directory to write to, e.g. faultline schemas export build/schemas")
    paths = export_schemas(args.dir)
    if args.json:
        print(to_json({"written": [str(p) for p in paths]}))
    else:
        for path in paths:
            print(path)
    return 0


def _broker(args: argparse.Namespace, settings: Settings) -> int:
    from deploy.local.kafka import detached_status, start_detached, stop_detached

    state = settings.data_dir / "kafka"
    if args.action == "start":
        address: str | None = start_detached(state, port=settings.local_kafka_port)
        text = f"local Kafka broker ready at {address}"
    elif args.action == "stop":
        stopped = stop_detached(state)
        address = None
        text = "stopped" if stopped else "no local broker was running"
    else:
        address = detached_status(state)
        text = f"running at {address}" if address else f"not running (its state dir: {state}); `faultline broker start`"
    if args.json:
        print(to_json({"action": args.action, "running": address is not None, "bootstrap": address,
                       "state_dir": str(state)}))
    else:
        print(text)
    if args.action == "status" and address is None:
        return 1  # `faultline broker status && ...` in scripts: not running is a failure, said above
    return 0


def _topics(args: argparse.Namespace, settings: Settings) -> int:
    """``faultline topics plan|apply``: the plan of deploy/topics/; apply is idempotent (only grows)."""
    from deploy.topics import Assumptions, apply_plan, make_plan, render_actions, render_plan

    plan = make_plan(settings.namespace, Assumptions(gpus=args.gpus))
    if args.action == "plan":
        print(to_json(dataclasses.asdict(plan)) if args.json else render_plan(plan))
        return 0
    from faultline.preflight import ensure_broker

    actions = apply_plan(settings.kafka_config(ensure_broker(settings)), plan, dry_run=args.dry_run)
    registered = _register(settings) if settings.schema_registry and not args.dry_run else []
    if args.json:
        print(to_json({"dry_run": args.dry_run, "actions": [dataclasses.asdict(a) for a in actions],
                       "schemas_registered": registered}))
    else:
        print(render_actions(actions, args.dry_run))
        for r in registered:
            print(f"schema     {r['subject']}: registered as id {r['schema_id']}")
    return 0


def _acls(args: argparse.Namespace, settings: Settings) -> int:
    """``faultline acls plan|apply``: deploy/acls.py's grants; apply only adds what is missing."""
    from deploy.acls import acl_plan, apply_acls, render_plan

    users = dict(u.split("=", 1) for u in args.user if "=" in u)
    if len(users) != len(args.user):
        raise UsageError("--user takes SERVICE=NAME, e.g. --user sink=archive-writer")
    grants = acl_plan(settings.namespace, users)
    if args.action == "plan":
        print(to_json({"grants": [dataclasses.asdict(g) for g in grants]}) if args.json else render_plan(grants))
        return 0
    from faultline.preflight import ensure_broker

    done = apply_acls(settings.kafka_config(ensure_broker(settings)), grants, dry_run=args.dry_run)
    print(to_json({"dry_run": args.dry_run, "done": done}) if args.json else "\n".join(done))
    return 0


def _bench(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.bench.runner import run_bench

    if args.real_job:
        from faultline.bench.real_job import run_real_job, summary

        if args.cells is not None or args.only or args.quick or args.minutes <= 0:
            raise UsageError("--real-job takes --minutes (over 0), --seed and --json, and no other section")
        result = run_real_job(minutes=args.minutes, seed=args.seed)
        print(json.dumps(result, default=str) if args.json else summary(result))
        return 0
    if args.cells is not None:
        from faultline.bench.two_cells import run_cells

        if args.cells < 1 or args.only:
            raise UsageError("--cells takes a number of cells (1 or more) and no --only")
        result = run_cells(settings, quick=args.quick, cells=args.cells)
    else:
        result = run_bench(settings, quick=args.quick, only=args.only)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0
