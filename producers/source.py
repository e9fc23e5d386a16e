"""What every live producer is to the node agent: a :class:`Source` of observations.

A source wraps one real thing on a node (NVML, the kernel log, the BMC, a job's
log file, the scheduler...) and is polled by the agent (:mod:`producers.agent`)
every ``interval_s`` seconds::

    obs = source.poll(now)      # non-blocking: what is new since the last call
    ...
    source.close()              # once, when the agent stops

An :data:`Observation` is exactly one line of the capture format (contract,
section 1) as a JSON-ready ``dict``: ``ts`` (RFC 3339 with an offset),
``source`` (a capture source such as ``"kernel"``), ``node`` and the source's
own fields. The agent serialises it once with ``json.dumps`` and hands that
text both to :func:`producers.capture.parse_capture_line` (so live and replay
share one parsing path) and, when configured, to a capture file (so what was
seen live can be replayed later with ``faultline replay``).

Rules for implementers:

- ``poll`` reads what is available without waiting for more, and bounds the
  work of one call (a subprocess gets a timeout). Each source is polled on a
  thread of its own, so a slow poll delays only its own source; ``poll`` and
  ``close`` are never called concurrently.
- ``poll`` may raise; the agent logs it and backs off that source alone.
- Time comes in as ``now`` (UTC); use it for ``ts`` and for any cadence logic,
  so tests can drive a source with a fake clock.
- Build lines with :func:`observation` so ``ts`` is always well formed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

__all__ = ["Observation", "Source", "observation", "rfc3339"]

#: One capture line (contract, section 1) as a JSON-ready dict.
Observation = dict[str, Any]


class Source(Protocol):
    """A live producer the agent polls; see the module docstring for the rules."""

    #: Short, unique within the agent (the config section name); labels logs and metrics.
    name: str
    #: Seconds between two polls.
    interval_s: float

    def poll(self, now: datetime) -> list[Observation]:
        """What is new since the last call, as capture lines; never blocks for long."""
        ...

    def close(self) -> None:
        """Release files, subprocesses and handles; the source is not polled again."""
        ...


def rfc3339(now: datetime) -> str:
    """``now`` as the capture's ``ts``: RFC 3339, UTC, milliseconds (``2026-04-22T03:00:00.565+00:00``)."""
    return now.astimezone(UTC).isoformat(timespec="milliseconds")


def observation(source: str, now: datetime, **fields: Any) -> Observation:
    """A capture line of ``source`` observed at ``now`` with ``fields`` (``node``, ``line``...)."""
    return {"ts": rfc3339(now), "source": source, **fields}
