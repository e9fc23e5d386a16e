"""People's actions: ``quarantine`` and ``release`` hardware, ``approve`` and ``deny`` held commands."""

from __future__ import annotations

import argparse
import getpass
import sys
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from common.settings import Settings
from faultline.commands import Add
from faultline.errors import UsageError
from faultline.terminal import rfc3339, to_json
from streams.topics import topic_name

if TYPE_CHECKING:
    from streams.decisions import Command

__all__ = ["register"]


def register(add: Add) -> None:
    q = add("quarantine", "Take a GPU (NODE:INDEX or NODE:UUID) or a whole NODE out of service by hand.",
            "faultline quarantine n03:2 --reason 'XID 48 twice this week' --by alice")
    q.add_argument("hardware", help="NODE, NODE:INDEX or NODE:UUID")
    q.add_argument("--reason", required=True)
    q.add_argument("--by", default=None, help="who (default: $USER)")
    q.add_argument("--cell", default=None, help="the node's cell, where a namespace holds several "
                   "(default: FAULTLINE_CELL)")
    q.add_argument("--json", action="store_true", help="print the event sent as JSON")
    q.set_defaults(run=_operator_action)

    rl = add("release", "Return a GPU or NODE to service; only with a passing validation recorded.",
             "faultline release n03:GPU-e40650f3-142a-c640-c614-51c2be1a1ec0 --validated-by 'dcgmi diag -r 3 passed' "
             "--by bob")
    rl.add_argument("hardware", help="NODE, NODE:INDEX or NODE:UUID")
    rl.add_argument("--validated-by", required=True, help="what validated it, e.g. 'dcgmi diag -r 3 passed'")
    rl.add_argument("--by", default=None, help="who (default: $USER)")
    rl.add_argument("--reason", default="")
    rl.add_argument("--cell", default=None, help="the node's cell (default: FAULTLINE_CELL)")
    rl.add_argument("--json", action="store_true", help="print the event sent as JSON")
    rl.set_defaults(run=_operator_action)

    examples = {"approve": "faultline approve cmd-3f2a9c41 --by alice --reason 'job checkpointed; reboot is safe'",
                "deny": "faultline deny cmd-3f2a9c41 --by alice --reason 'the RMA visit tomorrow replaces the board'"}
    for verb, example in examples.items():
        v = add(verb, f"{verb.capitalize()} a command that waits for a person (sent to the approvals topic).",
                example)
        v.add_argument("id", help="the command id (from its waiting_approval result); the decision names its "
                       "exact content, signed with FAULTLINE_OPERATOR_KEYS")
        v.add_argument("--by", help="who decides: your operator key's id (default: it; without a key, your login)")
        v.add_argument("--reason", default="", help="why, for the record")
        v.add_argument("--json", action="store_true", help="print the decision sent as JSON")
        v.set_defaults(run=_decide)


def _decide(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.preflight import ensure_broker
    from sinks.executors.approvals import find_held_command, send_decision
    from streams.decisions import Approval, CommandResult
    from streams.signing import approval_for, sign_approval, verify, verify_result

    conf = settings.kafka_config(ensure_broker(settings))
    commands, executors = settings.signing(), settings.executors()

    def signed(c: Command) -> str | None:  # the MAC itself, where this host holds the command keys
        return verify(c, commands, datetime.now(UTC), namespace=settings.namespace, cluster=settings.cluster) \
            if commands is not None else None

    def reported(r: CommandResult) -> str | None:
        return verify_result(r, executors) if executors is not None else None

    try:
        found = find_held_command(conf, settings.namespace, args.id, check=signed, check_result=reported)
    except LookupError as exc:
        print(f"faultline {args.cmd}: {exc}", file=sys.stderr)
        return 1
    cmd = found.command
    refused = _undecidable(cmd, conf, settings.namespace)
    if refused is not None:
        print(f"faultline {args.cmd}: {cmd.id} ({cmd.type}) {refused}; nothing was sent", file=sys.stderr)
        return 1
    if found.doubt is not None:
        print(f"faultline {args.cmd}: warning: the only command under the id {cmd.id} may not be the correlator's "
              f"({found.doubt}); executors that verify signatures will not run it: if yours do, report it",
              file=sys.stderr)
    for digest, why in found.ignored:
        print(f"faultline {args.cmd}: ignored another record under the id {cmd.id} ({digest[:19]}...): {why}; "
              "someone other than the correlator wrote it: report it", file=sys.stderr)
    keys = settings.operators()
    by = args.by or (keys.active if keys else getpass.getuser())
    if keys is not None and by != keys.active:
        print(f"faultline {args.cmd}: --by {by} is not the key id of your operator key ({keys.active}): a "
              "decision is signed as the person whose key signs it", file=sys.stderr)
        return 1
    target = " ".join(f"{k}={v}" for k, v in cmd.target.model_dump().items() if v)
    print(f"{args.cmd} {cmd.id}: {cmd.type} {target} ({cmd.reason or 'no reason given'})", file=sys.stderr)
    approval = approval_for(cmd, Approval(command=cmd.id, decision="approve" if args.cmd == "approve" else "deny",
                                          by=by, at=datetime.now(UTC), reason=args.reason))
    if keys is not None:
        approval = sign_approval(approval, keys)
    else:
        print(f"faultline {args.cmd}: FAULTLINE_OPERATOR_KEYS is unset: this decision is unsigned, and executors "
              "in production ignore it", file=sys.stderr)
    send_decision(conf, settings.namespace, approval)
    if args.json:
        print(to_json({"sent_to": topic_name(settings.namespace, "approvals"),
                       "approval": approval}))
    else:
        print(f"{'approved' if approval.decision == 'approve' else 'denied'} {approval.command} as {approval.by}")
    return 0


def _undecidable(cmd: Command, conf: dict[str, Any], namespace: str) -> str | None:
    """Why a person cannot decide ``cmd`` now, or None."""
    from sinks.executors.approvals import first_decision

    if not cmd.requires_approval:
        return "needs no approval: executors carry it out without one"
    if cmd.expires_at is not None and cmd.expires_at <= datetime.now(UTC):
        return (f"expired at {rfc3339(cmd.expires_at)}: no executor runs it now; if it is still needed, the "
                "correlator issues a new command when the incident asks again")
    prior = first_decision(conf, namespace, cmd)
    if prior is not None:
        return (f"was {'approved' if prior.decision == 'approve' else 'denied'} by {prior.by} at "
                f"{rfc3339(prior.at)}: the first decision on a command is final (an executor may have acted on "
                "it); to change course, ask the correlator or a colleague for a new command")
    return None


def _not_in_inventory(settings: Settings, node: str, gpu: str) -> str | None:
    """What the archive's inventory says is wrong with ``node`` (and its GPU ``gpu``: an index or a UUID), or
    None -- also when it cannot tell (no archive here, or no inventory in it yet: the correlator still checks)."""
    from clickhouse_connect.driver.exceptions import DatabaseError

    from faultline.errors import Failure, Unavailable
    from faultline.preflight import open_archive

    try:
        with open_archive(settings, settings.namespace, create=False) as archive:
            rows = archive.query("SELECT node, gpu_index, uuid FROM gpu_inventory")
    except (Unavailable, Failure, ImportError, DatabaseError):
        # It cannot tell: no archive here or not this namespace (Unavailable, Failure), no chDB installed
        # (ImportError), or an archive without the table yet (DatabaseError). Anything else is a bug: raised.
        return None
    if not rows:
        return None
    here = [r for r in rows if r["node"] == node]
    if not here:
        known = len({r["node"] for r in rows})
        return f"no node {node} in the inventory ({known} node{'' if known == 1 else 's'} known)"
    if gpu and not any(str(r["gpu_index"]) == gpu or (r["uuid"] or "").lower() == gpu.lower() for r in here):
        indexes = sorted(r["gpu_index"] for r in here)
        return f"{node} has no GPU {gpu} in the inventory (its GPUs: {', '.join(map(str, indexes))})"
    return None


def _operator_action(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.preflight import ensure_broker
    from producers.delivery import EventPublisher
    from streams.events import Event, GpuRef, OperatorAction
    from streams.signing import sign_operator_action

    node, _, gpu = args.hardware.partition(":")
    if not node:
        raise UsageError(f"{args.hardware!r} names no node; give NODE, NODE:INDEX or NODE:UUID (e.g. n03:2)")
    ref = (GpuRef(index=int(gpu)) if gpu.isdigit() else GpuRef(uuid=gpu)) if gpu else None
    action = "cordon_node" if args.cmd == "quarantine" and ref is None else (
        "quarantine_gpu" if args.cmd == "quarantine" else "release_gpu")
    keys = settings.operators()
    by = args.by or (keys.active if keys else getpass.getuser())
    if keys is not None and by != keys.active:
        print(f"faultline {args.cmd}: --by {by} is not the key id of your operator key ({keys.active}): an "
              "action is signed as the person whose key signs it", file=sys.stderr)
        return 1
    unknown = _not_in_inventory(settings, node, gpu) if action != "release_gpu" else None
    if unknown is not None:
        print(f"faultline {args.cmd}: {unknown}: nothing was fenced (the correlator refuses hardware no inventory "
              "or job names); check the name with `faultline status`", file=sys.stderr)
        return 1
    body = OperatorAction(action=action, gpu=ref, by=by, reason=args.reason,
                          validated_by=getattr(args, "validated_by", None))
    cell = args.cell or settings.cell
    bootstrap = ensure_broker(settings)
    pub = EventPublisher(settings.kafka_config(bootstrap), settings.namespace, cell)
    event = Event(id=f"operator-{uuid.uuid4().hex}", ts=datetime.now(UTC), source="operator", node=node, body=body)
    if keys is not None:
        event = sign_operator_action(event, keys, namespace=settings.namespace, cluster=settings.cluster)
    else:
        print(f"faultline {args.cmd}: FAULTLINE_OPERATOR_KEYS is unset: this action is unsigned, and a correlator "
              "in production ignores it", file=sys.stderr)
    pub.publish([event])
    pub.flush()
    if args.json:
        print(to_json({"sent_to": topic_name(settings.namespace, "events"), "cell": cell,
                       "event": event}))
    else:
        print(f"{action} {args.hardware} by {by} sent to {settings.namespace}.events (cell {cell}); the "
              f"correlator records it and issues the command (see `faultline status`)")
    return 0
