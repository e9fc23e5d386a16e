"""Approvals: what people decided about commands that wait for them.

:func:`send_decision` publishes one decision (``faultline approve`` / ``deny``)
to the namespace's ``approvals`` topic, keyed by command id;
:class:`ApprovalBook` is the executors' view of those decisions.

Fed from the ``approvals`` topic (read from its beginning at every start, so
it needs no state of its own). The first decision on a command id is final:
a later approve cannot undo a deny (nor the reverse), because by then the
executor may already have acted on the first one. A person who changes their
mind asks the correlator (or a colleague) for a new command.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from streams.decisions import Approval
from streams.topics import topic_name

__all__ = ["ApprovalBook", "send_decision"]


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
    """Decisions by command id; the first one per id wins."""

    def __init__(self) -> None:
        self._decisions: dict[str, Approval] = {}

    def record(self, approval: Approval) -> bool:
        """Keep ``approval`` unless its command was decided already; True when it was new."""
        if approval.command in self._decisions:
            return False
        self._decisions[approval.command] = approval
        return True

    def decision(self, command_id: str) -> Approval | None:
        """The decision on ``command_id``, or None while nobody decided."""
        return self._decisions.get(command_id)
