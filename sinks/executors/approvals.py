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

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from pydantic import ValidationError

from common.kafka_reader import read_topic
from streams.canonical import content_hash
from streams.decisions import Approval, Command
from streams.topics import topic_name

__all__ = ["ApprovalBook", "find_command", "send_decision"]


def find_command(conf: Mapping[str, Any], namespace: str, command_id: str, timeout_s: float = 30.0) -> Command:
    """The command ``command_id`` as the namespace's commands topic holds it, to decide on its exact content.

    LookupError (saying what to do) when no command has that id, or when records of different
    content carry it: then someone other than the correlator wrote to the topic, and a person
    must not approve blind.
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
                          "`faultline status` lists the commands waiting for approval)")
    if len(found) > 1:
        raise LookupError(f"{len(found)} different commands carry the id {command_id} on {topic}: someone other "
                          "than the correlator wrote there. Not deciding blind: report it, and decide once the "
                          "forgery is understood")
    return next(iter(found.values()))


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
