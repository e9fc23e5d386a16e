"""``faultline replay``: a capture through the real pipeline, its decisions printed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common.settings import Settings
from faultline.commands import Add

__all__ = ["register"]


def register(add: Add) -> None:
    r = add("replay", "Run a capture through the real pipeline (broker, correlator, archive) and print decisions.",
            "faultline replay ../shared/scenarios/psu_rail_loss.jsonl --json")
    r.add_argument("capture", type=Path)
    r.add_argument("--json", action="store_true", help="print the contract JSON on standard output")
    r.add_argument("--policy", type=Path, help="correlator policy YAML (default: built-in)")
    r.add_argument("--keep-topics", action="store_true", help="leave the replay's topics on the broker")
    r.set_defaults(run=_replay)


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
          f"{run.archived_rows} rows archived to {settings.archive_url} under namespace {run.archive_namespace} "
          f"(read it with `faultline report --namespace {run.archive_namespace}`, remove it with "
          f"`faultline archive drop {run.archive_namespace}`)", file=sys.stderr)
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
