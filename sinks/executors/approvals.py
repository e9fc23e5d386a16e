"""Approvals: what people decided about commands that wait for them.

:func:`send_decision` publishes one decision (``faultline approve`` / ``deny``)
to the namespace's ``approvals`` topic, keyed by command id;
:class:`ApprovalBook` is the executors' view of those decisions.

Fed from the ``approvals`` topic (read from its beginning at every start, so
it needs no state of its own). A decision names a command by its id *and the
hash of its content* (``command_hash``): it applies to that content only, so
an approval given in advance for a predictable id cannot release a different
command that arrives under it, and a decision naming other content does not
block the right one. The first decision on a command (id and content) is
final: a later approve cannot undo a deny (nor the reverse), because by then
the executor may already have acted on the first one. A person who changes
their mind asks the correlator (or a colleague) for a new command.

Who decided is the key id of the operator key that signed the decision
(:func:`streams.signing.sign_approval`); the executor checks it before it
records anything (:mod:`sinks.executors.trust`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from pydantic import ValidationError

from common.kafka_reader import read_topic
from streams.canonical import content_hash
from streams.decisions import Approval, Command, CommandResult
from streams.signing import KEY_ID, SCHEME
from streams.topics import topic_name

__all__ = ["HELD", "ApprovalBook", "Found", "find_command", "find_held_command", "first_decision", "send_decision"]


#: What an executor's ``waiting_approval`` result says of the content it holds (``held sha256:...``).
HELD = "held "


@dataclass(frozen=True)
class Found:
    """The command to decide on, and every other record under its id that was set aside, with why."""

    command: Command
    ignored: list[tuple[str, str]]  # (content hash, why it is not the command to decide on)
    doubt: str | None = None  # why the only record under the id may not be the correlator's, if it may not


def find_command(conf: Mapping[str, Any], namespace: str, command_id: str, timeout_s: float = 30.0) -> Command:
    """:func:`find_held_command`'s command (the records it set aside are not said)."""
    return find_held_command(conf, namespace, command_id, timeout_s).command


def find_held_command(conf: Mapping[str, Any], namespace: str, command_id: str, timeout_s: float = 30.0, *,
                      check: Callable[[Command], str | None] | None = None,
                      check_result: Callable[[CommandResult], str | None] | None = None) -> Found:
    """The command ``command_id`` whose exact content a person is to decide on, chosen by content.

    Anyone who can write the commands topic can publish a record under a held command's id; it
    must not stop the real one from being decided (issue 27). The rule: **of the records carrying
    the id, those that cannot be the correlator's are set aside** -- unsigned, a malformed signature,
    expired, for another namespace or cluster, or refused by ``check`` (the signature itself, where
    the command keys are at hand) -- **and if more than one content is left, the one an executor's
    ``waiting_approval`` result says it holds** (``check_result``: the executor key, where at hand).
    LookupError (saying what to do) when no content is left, or still more than one.

    The setting aside only chooses among several records: a single record under the id is the one
    to decide on, with a ``doubt`` saying why it may not be the correlator's (an unsigned command in
    development, or a replay's command already expired, is still decided). Deciding on a forgery
    releases nothing: a decision names the content it decides, and executors verify a command's
    signature before they hold or run it.
    """
    topic = topic_name(namespace, "commands")
    found: dict[str, Command] = {}
    for value in read_topic(dict(conf), topic, timeout=timeout_s):
        try:
            cmd = Command.model_validate_json(value)
        except ValidationError:
            continue
        if cmd.id == command_id:
            found[content_hash(cmd)] = cmd
    if not found:
        raise LookupError(f"no command {command_id} on {topic}: check the id (its waiting_approval result; "
                          "`faultline approvals` lists the commands waiting for approval)")
    if len(found) == 1:
        [only] = found.values()
        return Found(only, [], _not_the_correlators(only, namespace, check))
    ignored = [(h, why) for h, cmd in found.items() if (why := _not_the_correlators(cmd, namespace, check))]
    left = {h: cmd for h, cmd in found.items() if h not in dict(ignored)}
    if len(left) > 1:
        held = _held(conf, namespace, command_id, timeout_s, check_result)
        ignored += [(h, "no executor holds this content") for h in left if h not in held]
        left = {h: cmd for h, cmd in left.items() if h in held}
    if len(left) != 1:
        raise LookupError(f"{len(found)} different commands carry the id {command_id} on {topic} and "
                          f"{'none' if not left else len(left)} of them is the one an executor holds, signed: "
                          "someone other than the correlator wrote there. Not deciding blind: report it")
    return Found(next(iter(left.values())), ignored)


def _not_the_correlators(cmd: Command, namespace: str, check: Callable[[Command], str | None] | None) -> str | None:
    """Why ``cmd`` cannot be a command the correlator signed for ``namespace`` now, or None."""
    if not cmd.signature:
        return "unsigned"
    kind, _, rest = cmd.signature.partition(":")
    if kind != SCHEME or not KEY_ID.fullmatch(rest.partition(":")[0]):
        return "malformed signature"
    if cmd.namespace is not None and cmd.namespace != namespace:
        return f"signed for namespace {cmd.namespace!r}"
    if cmd.expires_at is not None and cmd.expires_at <= datetime.now(UTC):
        return "expired"
    return check(cmd) if check is not None else None


def _held(conf: Mapping[str, Any], namespace: str, command_id: str, timeout_s: float,
          check_result: Callable[[CommandResult], str | None] | None) -> set[str]:
    """The content hashes that executors' ``waiting_approval`` results for ``command_id`` say they hold."""
    held: set[str] = set()
    for value in read_topic(dict(conf), topic_name(namespace, "command-results"), timeout=timeout_s):
        try:
            result = CommandResult.model_validate_json(value)
        except ValidationError:
            continue
        if result.command != command_id or result.status != "waiting_approval" or HELD not in result.detail:
            continue
        if check_result is None or check_result(result) is None:
            held.add(result.detail.rpartition(HELD)[2].split()[0].rstrip(")."))
    return held


def first_decision(conf: Mapping[str, Any], namespace: str, cmd: Command, timeout_s: float = 30.0) -> Approval | None:
    """The decision already on the ``approvals`` topic for ``cmd`` (its id and content), or None: the first
    one is final (:class:`ApprovalBook`), so a person asked to decide again is told who decided, and when."""
    digest = content_hash(cmd)
    book = ApprovalBook()
    for value in read_topic(dict(conf), topic_name(namespace, "approvals"), timeout=timeout_s):
        try:
            approval = Approval.model_validate_json(value)
        except ValidationError:
            continue
        if approval.command == cmd.id and approval.command_hash == digest:
            book.record(approval)
    return book.decision(cmd.id, digest)


def send_decision(conf: Mapping[str, Any], namespace: str, approval: Approval, timeout_s: float = 30.0) -> None:
    """Publish ``approval`` and wait until the broker confirms it (RuntimeError if it does not)."""
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({**conf, "enable.idempotence": True, "acks": "all",
                         "message.timeout.ms": int(timeout_s * 1000)})
    producer.produce(topic_name(namespace, "approvals"), key=approval.command.encode(),
                     value=approval.model_dump_json().encode(), on_delivery=delivered)
    if producer.flush(timeout_s) or errors:
        raise RuntimeError(f"the broker did not confirm the {approval.decision} of {approval.command}: "
                           f"{errors[0] if errors else f'no answer within {timeout_s:g}s'}")


class ApprovalBook:
    """Decisions by command id and content hash; the first one per command wins."""

    def __init__(self) -> None:
        self._decisions: dict[tuple[str, str | None], Approval] = {}

    def record(self, approval: Approval) -> bool:
        """Keep ``approval`` unless its command was decided already; True when it was new."""
        key = (approval.command, approval.command_hash)
        if key in self._decisions:
            return False
        self._decisions[key] = approval
        return True

    def decision(self, command_id: str, command_hash: str) -> Approval | None:
        """The decision on the command ``command_id`` with content ``command_hash``, or None."""
        return self._decisions.get((command_id, command_hash))
