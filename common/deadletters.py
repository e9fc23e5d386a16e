"""Dead letters: a record a stage could not use, kept with the reason, built in one place.

Every stage that sets a record aside (the capture screen and the node agent for bad
observations, the correlator for an undecodable event, the archive sink and the executor for
records they cannot read) builds its :class:`~streams.decisions.DeadLetter` here, so the caps
are the same everywhere: at most :data:`RAW_KEPT_BYTES` of the record (a flood of huge bad
records stays small) and :data:`REASON_KEPT_CHARS` of the reason, and the whole dead letter within
:data:`streams.bounds.MAX_RECORD_BYTES` however its text escapes in JSON (the raw part is cut further).
"""

from __future__ import annotations

from datetime import UTC, datetime

from streams.bounds import MAX_RECORD_BYTES, record_bytes
from streams.decisions import DeadLetter

__all__ = ["RAW_KEPT_BYTES", "REASON_KEPT_CHARS", "dead_letter"]

#: The most of a bad record a dead letter keeps.
RAW_KEPT_BYTES = 10_000
#: The most of the reason a dead letter keeps (a validation error can be long).
REASON_KEPT_CHARS = 2_000


def dead_letter(stage: str, reason: str, raw: bytes | str | None, at: datetime | None = None,
                raw_limit: int = RAW_KEPT_BYTES) -> DeadLetter:
    """The dead letter of ``raw`` set aside by ``stage`` for ``reason`` (``at``: now when not given)."""
    if raw is None:
        text = ""
    elif isinstance(raw, bytes):
        text = raw[:raw_limit].decode("utf-8", "replace")
    else:
        text = raw[:raw_limit]
    dl = DeadLetter(stage=stage[:100], reason=reason[:REASON_KEPT_CHARS], raw=text, at=at or datetime.now(UTC))
    while record_bytes(dl) > MAX_RECORD_BYTES:  # control characters escape to six bytes each in JSON
        dl = dl.model_copy(update={"raw": dl.raw[: len(dl.raw) // 2]})
    return dl
