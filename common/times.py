"""Times as machines read them: one RFC 3339 form everywhere faultline writes JSON for a script.

The rule: **UTC, marked ``Z``, always to the microsecond** -- ``2026-04-22T03:10:00.100000Z``. One
fixed width and one zone, so a script parses one form and even sorts the text; microseconds, so a
time read back from an event or a command is the time written (the archive keeps milliseconds,
which this shows as ``.100000``). A naive datetime is taken as UTC. Times for people are
:func:`faultline.terminal.human_time`'s; this is for ``--json`` and every other machine-read output.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["rfc3339"]


def rfc3339(v: datetime) -> str:
    """``v`` as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC (naive: taken as UTC)."""
    u = v.astimezone(UTC) if v.tzinfo is not None else v.replace(tzinfo=UTC)
    return u.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
