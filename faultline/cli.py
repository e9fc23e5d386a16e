"""The `faultline` command."""

from __future__ import annotations

import argparse
import json
import logging
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
    "agent": "faultline agent --config producers/agent.example.yaml",
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="faultline", description="Incident pipeline for GPU training clusters.")
    p.add_argument("-v", "--verbose", action="store_true", help="log more (to standard error)")
    sub = p.add_subparsers(dest="cmd", required=True)

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_, epilog=f"example: {EXAMPLES[name]}")

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

    b = add("broker", "Start, stop or check the local Kafka broker (KRaft, loopback).")
    b.add_argument("action", choices=["start", "stop", "status"])

    a = add("agent", "Run the node agent: every configured source of this node, published to Kafka.")
    a.add_argument("--config", type=Path, required=True, help="agent YAML (see producers/agent.example.yaml)")
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
        from correlators.app import app

        sys.argv = ["faultline", "worker", "-l", "info" if args.verbose else "warn", "--without-web"]
        app.main()
        return 0
    if args.cmd == "schemas":
        from streams.export import export_schemas

        for path in export_schemas(args.dir):
            print(path)
        return 0
    if args.cmd == "broker":
        return _broker(args.action, settings)
    if args.cmd == "agent":
        from producers.agent import run_agent

        return run_agent(args.config, settings)
    return 2


def _replay(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.pipeline import replay

    if not args.capture.is_file():
        print(f"faultline replay: no such capture file {args.capture}", file=sys.stderr)
        return 2
    if args.policy:
        settings = settings.model_copy(update={"policy": args.policy})
    run = replay(args.capture, settings, keep_topics=args.keep_topics)
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
            print(f"command  {c['issued_at']} {c['type']} {c['target']}"
                  f"{' (needs approval)' if c['requires_approval'] else ''}")
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
