"""What a refused send is: the record's own fault (never publishable as it is), a passing fault, or unknown.

The broker (or the client, before it sends) refuses a record **for good** when the record itself is
wrong: too large for the request or the topic (``MESSAGE_TOO_LARGE`` = 10, ``RECORD_LIST_TOO_LARGE``
= 18), or invalid (``CORRUPT_MESSAGE`` = 2, ``INVALID_RECORD`` = 87). Sending it again fails again, so
a worker that let it fail the agent would die on it, and so would every successor: the publisher
replaces it instead (:mod:`correlators.worker.publisher`). A **transient** refusal (the client's
``retriable`` errors and timeouts: a leader moving, a broker restarting) is the broker's, not the
record's: it is sent again, a bounded number of times. Anything else is unknown and raises, as before.

The errors are read by their Kafka error code (``errno``) and ``retriable`` flag along the exception's
chain (Faust wraps aiokafka's in ``ProducerSendError``), so nothing here imports a Kafka client.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["FOR_GOOD", "Refusal", "classify"]

#: Kafka error codes of a record refused for good, and the ``reason`` label each is counted under.
FOR_GOOD: dict[int, str] = {10: "too_large", 18: "too_large", 2: "invalid", 87: "invalid"}
_NAMES = {"MessageSizeTooLarge": "too_large", "RecordTooLarge": "too_large", "RecordListTooLarge": "too_large",
          "CorruptRecord": "invalid", "InvalidRecord": "invalid"}

Refusal = tuple[Literal["for_good", "transient", "unknown"], str]


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in out and len(out) < 8:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def classify(exc: BaseException) -> Refusal:
    """(kind, reason): ``for_good`` with ``too_large``/``invalid``; ``transient``; or ``unknown``."""
    chain = _chain(exc)
    for e in chain:
        code = getattr(e, "errno", None)
        if isinstance(code, int) and code in FOR_GOOD and not isinstance(e, OSError):
            return "for_good", FOR_GOOD[code]
        text = f"{type(e).__name__} {e}"
        for name, reason in _NAMES.items():
            if name in text:
                return "for_good", reason
    for e in chain:
        if getattr(e, "retriable", False) is True or type(e).__name__ in ("KafkaTimeoutError", "RequestTimedOutError"):
            return "transient", type(e).__name__
    return "unknown", type(exc).__name__
