"""The "Pipeline" section of `faultline status`: each stage instance's own heartbeat, its age, up or down.

Read from the archive's ``stage_heartbeats`` (each instance's newest beat; :mod:`streams.health`).
The rule, :func:`streams.health.stage_state`: an instance is *down* once its newest heartbeat is
older than three of its own intervals, *up* otherwise, and *unknown* when the sink -- through which
`status` hears everyone -- is down and the instance was still beating when the sink fell silent.
A pipeline with no heartbeat at all says so (stages older than heartbeats, or none running).

AGE is kubectl's: ``42s``, ``7m``, ``3h``, ``2d`` since the newest heartbeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from faultline.terminal import Column, age
from sinks.archive.store import Archive
from streams.health import stage_state

__all__ = ["COLUMNS", "age", "judge", "pipeline_rows"]

COLUMNS = [Column("stage"), Column("instance"), Column("state"), Column("version"), Column("dev_mode", "dev mode"),
           Column("lag", kind="number"), Column("last_seen", "last seen", "time"), Column("age")]

_NEWEST = ("SELECT stage, instance, argMax(version, at) AS version, argMax(dev_mode, at) AS dev_mode, "
           "argMax(lag, at) AS lag, argMax(interval_s, at) AS interval_s, argMax(started_at, at) AS started_at, "
           "max(at) AS last_seen FROM stage_heartbeats GROUP BY stage, instance ORDER BY stage, instance")


def _utc(v: datetime) -> datetime:
    return v.astimezone(UTC) if v.tzinfo is not None else v.replace(tzinfo=UTC)


def judge(newest: Sequence[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """Each instance's newest heartbeat with its ``state``, ``age`` (kubectl's) and ``age_s``."""
    rows = [{**r, "last_seen": _utc(r["last_seen"])} for r in newest]
    sink_down_since = None
    for r in rows:
        if r["stage"] == "sink" and stage_state(r["last_seen"], r["interval_s"], now) == "down":
            latest = sink_down_since or r["last_seen"]
            sink_down_since = max(latest, r["last_seen"])
    if any(r["stage"] == "sink" and stage_state(r["last_seen"], r["interval_s"], now) == "up" for r in rows):
        sink_down_since = None  # another sink instance still archives
    out = []
    for r in rows:
        seconds = (now - r["last_seen"]).total_seconds()
        state = stage_state(r["last_seen"], r["interval_s"], now, None if r["stage"] == "sink" else sink_down_since)
        out.append({"stage": r["stage"], "instance": r["instance"], "state": state, "version": r["version"],
                    "dev_mode": bool(r["dev_mode"]), "lag": r["lag"], "interval_s": r["interval_s"],
                    "started_at": r.get("started_at"), "last_seen": r["last_seen"], "age": age(seconds),
                    "age_s": round(seconds, 3)})
    return out


def pipeline_rows(archive: Archive, now: datetime | None = None) -> list[dict[str, Any]]:
    """The Pipeline section's rows, judged at ``now`` (default: the wall clock)."""
    return judge(archive.query(_NEWEST), now or datetime.now(UTC))
