"""The `faultline` command."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path

from faultline.settings import Settings

__all__ = ["main"]

EXAMPLES = {
    "replay": "faultline replay ../shared/scenarios/psu_rail_loss.jsonl --json",
    "demo": "faultline demo",
    "worker": "FAULTLINE_KAFKA=127.0.0.1:9092 faultline worker",
    "schemas": "faultline schemas export build/schemas",
    "broker": "faultline broker start",
    "bench": "faultline bench --json",
    "status": "faultline status --json",
    "incident": "faultline incident inc-0123456789abcdef --html incident.html",
    "timeline": "faultline timeline pt-70b --html pt-70b.html",
    "agent": "faultline agent --config producers/agent.example.yaml",
    "report": "faultline report --since 7d",
    "executor": "faultline executor run --backend slurm --fleet-size 512",
    "approve": "faultline approve cmd-3f2a9c41 --by alice --reason 'job checkpointed; reboot is safe'",
    "deny": "faultline deny cmd-3f2a9c41 --by alice --reason 'the RMA visit tomorrow replaces the board'",
    "topics": "FAULTLINE_KAFKA=kafka:9092 faultline topics apply --dry-run",
    "acls": "FAULTLINE_KAFKA_USERNAME=admin faultline acls apply --dry-run",
    "sink": "FAULTLINE_ARCHIVE=http://clickhouse:8123 faultline sink run",
    "capture": "faultline capture --config producers/agent.example.yaml --out node.jsonl --seconds 600",
    "quarantine": "faultline quarantine n03:2 --reason 'XID 48 twice this week' --by alice",
    "release": "faultline release n03:GPU-e40650f3-142a-c640-c614-51c2be1a1ec0 --validated-by 'dcgmi diag -r 3 passed' --by bob",
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="faultline", description="Incident pipeline for GPU training clusters.")
    p.add_argument("-v", "--verbose", action="store_true", help="log more (to standard error)")
    sub = p.add_subparsers(dest="cmd", required=True)

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_, epilog=f"example: {EXAMPLES[name]}",
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    r = add("replay", "Run a capture through the real pipeline (broker, correlator, archive) and print decisions.")
    r.add_argument("capture", type=Path)
    r.add_argument("--json", action="store_true", help="print the contract JSON on standard output")
    r.add_argument("--policy", type=Path, help="correlator policy YAML (default: built-in)")
    r.add_argument("--keep-topics", action="store_true", help="leave the replay's topics on the broker")

    d = add("demo", "Simulate a small fleet in which a GPU fails; print incidents and commands as they happen.")
    d.add_argument("--seconds", type=float, default=20, help="wall-clock length of the demo")

    add("worker", "Run the Faust correlator worker (reads FAULTLINE_* settings).")

    s = add("schemas", "Export JSON Schema of every topic's records for subscribers.")
    s.add_argument("action", choices=["export"])
    s.add_argument("dir", type=Path)

    st = add("status", "Open incidents, fenced hardware, commands waiting for approval, pipeline health.")
    st.add_argument("--json", action="store_true", help="machine-readable output")

    inc = add("incident", "One incident's whole story: signals, decisions, commands, results, recovery.")
    inc.add_argument("id")
    inc.add_argument("--json", action="store_true")
    inc.add_argument("--html", type=Path, help="also write a self-contained HTML page with a graphical timeline")

    tl = add("timeline", "The story of every incident of one job.")
    tl.add_argument("job")
    tl.add_argument("--json", action="store_true")
    tl.add_argument("--html", type=Path, help="write one HTML page per incident: FILE, FILE-2, ...")

    q = add("quarantine", "Take a GPU (NODE:INDEX or NODE:UUID) or a whole NODE out of service by hand.")
    q.add_argument("hardware", help="NODE, NODE:INDEX or NODE:UUID")
    q.add_argument("--reason", required=True)
    q.add_argument("--by", default=None, help="who (default: $USER)")
    q.add_argument("--cell", default=None, help="the node's cell, where a namespace holds several "
                   "(default: FAULTLINE_CELL)")

    rl = add("release", "Return a GPU or NODE to service; only with a passing validation recorded.")
    rl.add_argument("hardware", help="NODE, NODE:INDEX or NODE:UUID")
    rl.add_argument("--validated-by", required=True, help="what validated it, e.g. 'dcgmi diag -r 3 passed'")
    rl.add_argument("--by", default=None, help="who (default: $USER)")
    rl.add_argument("--reason", default="")
    rl.add_argument("--cell", default=None, help="the node's cell (default: FAULTLINE_CELL)")

    sk = add("sink", "Archive the namespace's topics into ClickHouse until stopped (SIGTERM).")
    sk.add_argument("action", choices=["run"])

    be = add("bench", "Measure detection latency, throughput, archive rate, replay rate and goodput.")
    be.add_argument("--json", action="store_true", help="print the summary as one JSON object (last line)")
    be.add_argument("--quick", action="store_true", help="seconds, small load (what CI runs)")

    b = add("broker", "Start, stop or check the local Kafka broker (KRaft, loopback).")
    b.add_argument("action", choices=["start", "stop", "status"])

    a = add("agent", "Run the node agent: every configured source of this node, published to Kafka.")
    a.add_argument("--config", type=Path, required=True, help="agent YAML (see producers/agent.example.yaml)")

    cp = add("capture", "Record what this node's producers observe, in the contract's capture format, for replay.")
    cp.add_argument("--config", type=Path, required=True, help="agent YAML: which sources to run")
    cp.add_argument("--out", type=Path, required=True, help="capture file (appended)")
    cp.add_argument("--seconds", type=float, help="stop after this long (default: until Ctrl-C)")

    o = add("report", "Answer the operators' questions from the archive (failures, lost GPU-hours, recovery...).")
    o.add_argument("--since", help="window start: a duration back from now (30m, 12h, 7d, 2w) or an ISO date/time")
    o.add_argument("--json", action="store_true", help="print JSON on standard output instead of tables")

    e = add("executor", "Carry the namespace's commands out (Slurm, Kubernetes or a webhook), each at most once.")
    e.add_argument("action", choices=["run"])
    e.add_argument("--backend", choices=["slurm", "kubernetes", "webhook"], required=True)
    e.add_argument("--url", help="webhook: where tickets and notifications are POSTed")
    e.add_argument("--name", help="executor name (default: the backend's); names its results, ledger and group")
    e.add_argument("--dry-run", action="store_true", help="report what would run; change nothing")
    e.add_argument("--state-dir", type=Path, help="where the ledger lives (default: <data_dir>/executors)")
    e.add_argument("--fleet-size", type=int, help="nodes in the fleet, for the circuit breaker (default: ask)")
    e.add_argument("--max-share", type=float, default=0.10, help="most of the fleet fenced per window (0.10)")
    e.add_argument("--window-min", type=float, default=10.0, help="the circuit breaker's window in minutes (10)")
    for verb in ("approve", "deny"):
        v = add(verb, f"{verb.capitalize()} a command that waits for a person (sent to the approvals topic).")
        v.add_argument("id", help="the command id (from its waiting_approval result)")
        v.add_argument("--by", help="who decides (default: your login name)")
        v.add_argument("--reason", default="", help="why, for the record")

    tp = add("topics", "Print the namespace's topic plan with its sizing arithmetic, or apply it to Kafka.")
    tp.add_argument("action", choices=["plan", "apply"])
    tp.add_argument("--dry-run", action="store_true", help="apply: say what would change; change nothing")
    tp.add_argument("--gpus", type=int, default=10_000, help="GPUs in the fleet (cell) to size for (10000)")

    ac = add("acls", "Print the namespace's Kafka ACLs per service (deploy/acls.py), or apply them as the admin.")
    ac.add_argument("action", choices=["plan", "apply"])
    ac.add_argument("--dry-run", action="store_true", help="apply: say what would be created; change nothing")
    ac.add_argument("--user", action="append", default=[], metavar="SERVICE=NAME",
                    help="a service's Kafka user when not faultline-<service> (repeatable)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()
    try:
        return _dispatch(args, settings)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a person reads this: say what went wrong and what to do
        if args.verbose:
            raise
        print(f"faultline {args.cmd}: {exc}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.cmd == "replay":
        return _replay(args, settings)
    if args.cmd == "demo":
        from faultline.demo import run_demo

        return run_demo(settings, seconds=args.seconds)
    if args.cmd == "worker":
        from correlators.app import make_app

        sys.argv = ["faultline", "worker", "-l", "info" if args.verbose else "warn", "--without-web"]
        make_app(settings).main()
        return 0
    if args.cmd == "schemas":
        from streams.export import export_schemas

        for path in export_schemas(args.dir):
            print(path)
        return 0
    if args.cmd == "broker":
        return _broker(args.action, settings)
    if args.cmd in ("status", "incident", "timeline"):
        return _operator_view(args, settings)
    if args.cmd in ("quarantine", "release"):
        return _operator_action(args, settings)
    if args.cmd == "sink":
        return _sink(settings)
    if args.cmd == "bench":
        from bench.runner import run_bench

        result = run_bench(settings, quick=args.quick)
        print(json.dumps(result) if args.json else json.dumps(result, indent=2))
        return 0
    if args.cmd == "capture":
        from producers.agent import run_capture

        return run_capture(args.config, args.out, args.seconds)
    if args.cmd == "agent":
        from producers.agent import run_agent

        return run_agent(args.config, settings)
    if args.cmd == "report":
        return _report(args, settings)
    if args.cmd == "executor":
        return _executor(args, settings)
    if args.cmd in ("approve", "deny"):
        return _decide(args, settings)
    if args.cmd == "topics":
        return _topics(args, settings)
    if args.cmd == "acls":
        return _acls(args, settings)
    return 2


def _replay(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.pipeline import replay

    if not args.capture.is_file():
        print(f"faultline replay: no such capture file {args.capture}", file=sys.stderr)
        return 2
    if args.policy:
        settings = settings.model_copy(update={"policy": args.policy})
    total = sum(1 for _ in args.capture.open("rb"))
    step = max(1, total // 20)

    def progress(n: int) -> None:  # on standard error, so --json output stays clean
        if n % step == 0 or n == total:
            print(f"\rreplay: {n}/{total} lines published ({100 * n // max(total, 1)}%)", end="", file=sys.stderr,
                  flush=True)

    run = replay(args.capture, settings, keep_topics=args.keep_topics, on_line=progress)
    print(file=sys.stderr)
    out = run.contract()
    print(f"replayed {run.lines} lines ({run.bad} bad) as {run.events} events in namespace {run.namespace}; "
          f"{len(out['incidents'])} incidents, {len(out['commands'])} commands; "
          f"{run.archived_rows} rows archived to {settings.archive_url}", file=sys.stderr)
    if args.json:
        print(json.dumps(out))
    else:
        for inc in out["incidents"]:
            print(f"incident {inc['id']} {inc['category']} job={inc['job']} culprit={inc['culprit']} "
                  f"state={inc['state']}")
        for c in out["commands"]:
            target = " ".join(f"{k}={v}" for k, v in c["target"].items() if v)
            extra = ""
            if c["type"] == "restart_job":
                p = c["params"]
                extra = (f" from step {(p.get('checkpoint') or {}).get('step')} on {p.get('gpus')} GPUs, "
                         f"excluding {p.get('exclude')}")
            print(f"command  {c['issued_at']} {c['type']} {target}{extra}"
                  f"{' (needs approval)' if c['requires_approval'] else ''}")
    return 0


def _report(args: argparse.Namespace, settings: Settings) -> int:
    from sinks.archive.store import Archive
    from sinks.report import build_report, parse_since, render_report

    try:
        since = parse_since(args.since) if args.since else None
    except ValueError as exc:
        print(f"faultline report: {exc}", file=sys.stderr)
        return 2
    with Archive.open(settings.archive_url) as archive:
        report = build_report(archive, since=since)
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        render_report(report)
    return 0


def _executor(args: argparse.Namespace, settings: Settings) -> int:
    import signal
    import threading
    from datetime import timedelta

    from faultline.pipeline import ensure_broker
    from faultline.topic_io import create_namespace_topics
    from sinks.executors.launch import ExecutorOptions, make_executor
    from sinks.executors.runner import ExecutorRunner

    options = ExecutorOptions(backend=args.backend, state_dir=args.state_dir or settings.data_dir / "executors",
                              name=args.name, dry_run=args.dry_run, url=args.url, fleet_size=args.fleet_size,
                              max_share=args.max_share, window=timedelta(minutes=args.window_min),
                              keys=settings.signing())
    conf = settings.kafka_config(ensure_broker(settings))
    create_namespace_topics(conf, settings.namespace)
    if settings.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with ExecutorRunner(make_executor(options), conf, settings.namespace) as runner:
        print(f"executor {runner.executor.name}: carrying out {settings.namespace}.commands; Ctrl-C stops it",
              file=sys.stderr)
        runner.run(stop)
    return 0


def _topics(args: argparse.Namespace, settings: Settings) -> int:
    """``faultline topics plan|apply``: the plan of deploy/topics.py; apply is idempotent (only grows)."""
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


def _decide(args: argparse.Namespace, settings: Settings) -> int:
    import getpass
    from datetime import UTC, datetime

    from faultline.pipeline import ensure_broker
    from sinks.executors.approvals import send_decision
    from streams.decisions import Approval

    approval = Approval(command=args.id, decision="approve" if args.cmd == "approve" else "deny",
                        by=args.by or getpass.getuser(), at=datetime.now(UTC), reason=args.reason)
    send_decision(settings.kafka_config(ensure_broker(settings)), settings.namespace, approval)
    print(f"{'approved' if approval.decision == 'approve' else 'denied'} {approval.command} as {approval.by}")
    return 0


def _operator_view(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.operator_views import (
        incident_data,
        job_incidents,
        print_incident,
        print_status,
        status_data,
    )
    from faultline.timeline_html import render_timeline
    from sinks.archive.store import Archive

    with Archive.open(settings.archive_url) as archive:
        if args.cmd == "status":
            data = status_data(archive)
            print(json.dumps(data, default=str)) if args.json else print_status(data)
            return 0
        ids = [args.id] if args.cmd == "incident" else job_incidents(archive, args.job)
        stories = [d for i in ids if (d := incident_data(archive, i)) is not None]
    if not stories:
        what = f"incident {args.id}" if args.cmd == "incident" else f"incidents of job {args.job}"
        print(f"faultline {args.cmd}: no {what} in {settings.archive_url}; check the id with `faultline status`",
              file=sys.stderr)
        return 1
    for n, story in enumerate(stories):
        print(json.dumps(story, default=str)) if args.json else print_incident(story)
        if args.html:
            path = args.html if n == 0 else args.html.with_name(f"{args.html.stem}-{n + 1}{args.html.suffix}")
            path.write_text(render_timeline(story["incident"], story["timeline"]), encoding="utf-8")
            print(f"wrote {path}", file=sys.stderr)
    return 0


def _operator_action(args: argparse.Namespace, settings: Settings) -> int:
    import getpass
    import uuid
    from datetime import UTC, datetime

    from faultline.pipeline import ensure_broker
    from producers.delivery import EventPublisher
    from streams.events import Event, GpuRef, OperatorAction

    node, _, gpu = args.hardware.partition(":")
    ref = (GpuRef(index=int(gpu)) if gpu.isdigit() else GpuRef(uuid=gpu)) if gpu else None
    action = "cordon_node" if args.cmd == "quarantine" and ref is None else (
        "quarantine_gpu" if args.cmd == "quarantine" else "release_gpu")
    by = args.by or getpass.getuser()
    body = OperatorAction(action=action, gpu=ref, by=by, reason=args.reason,
                          validated_by=getattr(args, "validated_by", None))
    cell = args.cell or settings.cell
    bootstrap = ensure_broker(settings)
    pub = EventPublisher(settings.kafka_config(bootstrap), settings.namespace, cell)
    pub.publish([Event(id=f"operator-{uuid.uuid4().hex}", ts=datetime.now(UTC), source="operator", node=node,
                       body=body)])
    pub.flush()
    print(f"{action} {args.hardware} by {by} sent to {settings.namespace}.events (cell {cell}); the "
          f"correlator records it and issues the command (see `faultline status`)")
    return 0


def _sink(settings: Settings) -> int:
    import signal
    import threading

    from faultline.pipeline import ensure_broker
    from sinks.archive.store import Archive
    from sinks.archive_sink import ArchiveSink

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    bootstrap = ensure_broker(settings)
    if settings.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port)
    with Archive.open(settings.archive_url) as archive, \
            ArchiveSink(archive, bootstrap, settings.namespace, consumer_config=settings.kafka_config(bootstrap)) as sink:
        where = re.sub(r"//[^/@]*@", "//***@", settings.archive_url)  # never print credentials
        print(f"archiving {settings.namespace}.* from {bootstrap} into {where}", file=sys.stderr)
        sink.run(stop)
    return 0


def _broker(action: str, settings: Settings) -> int:
    from deploy.local.kafka import detached_status, start_detached, stop_detached

    state = settings.data_dir / "kafka"
    if action == "start":
        print(f"local Kafka broker ready at {start_detached(state, port=settings.local_kafka_port)}")
    elif action == "stop":
        print("stopped" if stop_detached(state) else "no local broker was running")
    else:
        status = detached_status(state)
        print(f"running at {status}" if status else "not running")
        return 0 if status else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
