"""What makes two events the same event: their source, their id and their content, never the id alone.

Ids are predictable (a scheduler event's comes from its capture line), and anyone who may write the
events topic can publish a record under the id the next real event will carry. Judged by id alone,
the real one is then dropped as a duplicate (issue 27: a heartbeat under the next ``job_started``'s id
left a later XID without its job). The rule: **an event is a duplicate of an earlier one only when it
has the same source, the same id and the same content** (:func:`identity`: the id and a hash of the
source and the whole record as the schema writes it). A re-sent line, a spool's redelivery and a
replay give the same record, so they are still dropped; a record of other content under a known id
is judged as what it is, and takes nothing from the real one.
"""

from __future__ import annotations

import hashlib

from streams.events import Event

__all__ = ["identity"]

_DIGEST_HEX = 16  # 64 bits: a collision needs ~2**32 records of one id, and buys one dropped event


def identity(event: Event) -> str:
    """``<id>#<hash of source and content>``: what duplicates are judged on (the seen window's key)."""
    digest = hashlib.sha256(event.source.encode() + b"\0" + event.model_dump_json().encode()).hexdigest()
    return f"{event.id}#{digest[:_DIGEST_HEX]}"
