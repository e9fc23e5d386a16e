"""Each stage's own heartbeat: the record a running worker, sink, executor or agent publishes.

`faultline status` used to judge the pipeline by the newest *event* per source, which says nothing of
the stages that move them: after the sink died it showed old times with no age and no "down". Every
stage now publishes a :class:`StageHeartbeat` to the ``heartbeats`` topic every ``interval_s``
(default :data:`HEARTBEAT_EVERY_S`), saying what it is (version, development mode) and how far
behind it is (``lag``: records between its consumer position and the partitions' ends, as it
measured them itself; ``None`` where it does not consume or has not measured yet).

**The rule** (:func:`stage_state`): a stage is *down* once its newest heartbeat is older than
:data:`SILENT_AFTER` times its own interval; *up* otherwise. The sink archives every heartbeat
(table ``stage_heartbeats``), so `status` sees the others through it: while the sink is down
the others' heartbeats wait in the topic, and a stage last heard no earlier than the sink's own
silence is *unknown*, not down (:func:`stage_state` with ``sink_down_since``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from streams.ranges import Int

__all__ = ["HEARTBEAT_EVERY_S", "SILENT_AFTER", "STAGE_KINDS", "StageKind", "StageHeartbeat", "StageState",
           "heartbeat_key", "stage_state"]

StageKind = Literal["worker", "sink", "executor", "agent"]
STAGE_KINDS: tuple[str, ...] = StageKind.__args__  # type: ignore[attr-defined]
StageState = Literal["up", "down", "unknown"]

HEARTBEAT_EVERY_S = 15.0
"""How often a stage publishes its heartbeat, unless it says otherwise in ``interval_s``."""
SILENT_AFTER = 3
"""A stage silent for more than this many of its intervals is down."""


class StageHeartbeat(BaseModel):
    """One stage instance saying it is alive (schema version 1; readers ignore fields they do not know)."""

    model_config = ConfigDict(extra="ignore")

    schema_version: Int = 1
    stage: StageKind
    instance: str  # which one: the host and process, an executor's name, a node
    version: str  # faultline's version in that process
    dev_mode: bool  # FAULTLINE_DEV_MODE in *that* process, not the reader's
    interval_s: float = Field(default=HEARTBEAT_EVERY_S, gt=0)
    lag: Int | None = None
    started_at: datetime
    at: datetime


def heartbeat_key(beat: StageHeartbeat) -> str:
    """The record key: ``<stage>/<instance>`` (one instance's beats stay in order)."""
    return f"{beat.stage}/{beat.instance}"


def stage_state(last_seen: datetime, interval_s: float, now: datetime,
                sink_down_since: datetime | None = None) -> StageState:
    """*down* when silent past :data:`SILENT_AFTER` intervals; *unknown* instead when the sink (through
    which `status` hears everyone) is down, last heard at ``sink_down_since``, and this stage was still
    beating within :data:`SILENT_AFTER` intervals of that."""
    if now - last_seen <= timedelta(seconds=SILENT_AFTER * interval_s):
        return "up"
    if sink_down_since is not None and last_seen >= sink_down_since - timedelta(seconds=SILENT_AFTER * interval_s):
        return "unknown"
    return "down"
