"""Answers to the questions operators ask, from the archive: `faultline report`.

Each :class:`Section` reads one ``report_*`` answer view of the archive (migration 5 of
:mod:`sinks.archive.migrations`); every view aggregates the incidents opened (checkpoint saves
made, for the trend) within an event-time window ``[since, until]``, passed to the view as epoch
milliseconds (``report_recovery(since_ms = ..., until_ms = ...)``):

========================  ===============================================================
section                   question
========================  ===============================================================
``hardware_share``        How often do jobs fail for hardware?
``failure_causes``        What do job incidents come from, and what did each cause cost?
``gpu_models``            Which GPU models cost the most lost GPU-hours?
``checkpoint_loss``       How much compute is lost between checkpoints when a job fails?
``recovery``              What is the mean time to recovery?
``first_restart``         How often does the first restart succeed?
``checkpoint_trend``      Are checkpoint writes getting slower?
``fault_hotspots``        Which racks and nodes concentrate faults?
``lost_phases``           Where did the lost GPU-hours go? (migration 9)
========================  ===============================================================

:func:`build_report` runs them; :meth:`Report.to_json` gives plain JSON for scripts;
:func:`faultline.report_view.render_report` prints them for people. On an empty archive every
section is empty or holds zero counts: nothing here raises for lack of data.

Definitions the answers share:

* **Lost GPU-hours** of a failure: the GPUs of the job's run times the time from its newest saved
  checkpoint (or the run's start, when that is later) to the failure's first evidence (the
  incident's ``opened_at``): the compute the failure throws away. The time until the job runs
  again is not in it; that is the time to recovery (``recovery``). The correlator computes the
  incident's ``lost_gpu_hours`` the same way when it restarts the job, and ``checkpoint_loss``
  recomputes it from the archived checkpoints.
* **Shares and rates** (``hardware_share``, ``share``, ``success_rate``) are fractions from 0 to 1
  in JSON, shown as percentages.
* **A checkpoint trend** needs at least four saves in the window; with fewer, the trend says
  ``too few saves`` and its figures (halves, change, slope) are null.
* **The window** is the event time of the incidents' opening (of the saves, for the trend);
  without ``since``/``until`` it is the whole archive (``since``/``until`` null in JSON).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from common.times import rfc3339
from sinks.archive.store import Archive

__all__ = [
    "SECTIONS",
    "Report",
    "Section",
    "build_report",
    "PERCENT_COLUMNS",
    "parse_since",
    "section_sql",
]

_BEGINNING = datetime(1970, 1, 1, tzinfo=UTC)
_END_OF_TIME = datetime(2299, 12, 31, 23, 59, 59, tzinfo=UTC)  # DateTime64(3)'s last year
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class Section:
    """One operator question: the answer view that holds it and the columns shown, in order."""

    key: str
    title: str
    question: str
    view: str
    columns: tuple[str, ...]
    note: str = ""  # what the answer cannot tell, shown under its table


SECTIONS: tuple[Section, ...] = (
    Section(
        "hardware_share", "Hardware failures", "How often do jobs fail for hardware?",
        "report_hardware_share",
        ("job_incidents", "hardware_incidents", "hardware_share", "jobs", "jobs_hit_by_hardware"),
    ),
    Section(
        "failure_causes", "Causes of job incidents", "What do job incidents come from?",
        "report_failure_causes",
        ("category", "is_hardware", "incidents", "jobs", "share", "lost_gpu_hours"),
    ),
    Section(
        "gpu_models", "GPU models by lost GPU-hours", "Which GPU models cost the most lost GPU-hours?",
        "report_gpu_models",
        ("gpu_name", "incidents", "culprit_gpus", "categories", "lost_gpu_hours"),
    ),
    Section(
        "checkpoint_loss", "Compute lost between checkpoints",
        "How old was the newest checkpoint when a job failed, and what did that cost?",
        "report_checkpoint_loss",
        ("job", "failures", "avg_checkpoint_age_s", "max_checkpoint_age_s", "avg_lost_gpu_hours",
         "lost_gpu_hours"),
    ),
    Section(
        "recovery", "Time to recovery", "How long from a failure to a job progressing again?",
        "report_recovery",
        ("category", "incidents", "recovered", "escalated", "still_open", "mttr_s", "median_ttr_s",
         "max_ttr_s"),
    ),
    Section(
        "first_restart", "First restarts", "How often does the first restart succeed?",
        "report_first_restart",
        ("category", "restarted", "resolved", "failed_again", "escalated", "undecided", "success_rate"),
    ),
    Section(
        "checkpoint_trend", "Checkpoint write times", "Are checkpoint writes getting slower?",
        "report_checkpoint_trend",
        ("job", "saves", "avg_seconds", "first_half_s", "second_half_s", "change_pct", "slope_s_per_day",
         "trend"),
    ),
    Section(
        "fault_hotspots", "Fault hotspots", "Which racks and nodes concentrate faults?",
        "report_fault_hotspots",
        ("rack", "node", "incidents", "hardware_incidents", "jobs", "categories", "lost_gpu_hours",
         "last_at"),
    ),
    Section(
        "lost_phases", "Where the lost hours went",
        "Which phases of the way back did the lost GPU-hours go to, per cause?",
        "report_lost_phases",
        ("category", "incidents", "lost_gpu_hours", "lost_work_gpu_hours", "detection_gpu_hours",
         "fencing_gate_gpu_hours", "approval_wait_gpu_hours", "requeue_gpu_hours", "human_repair_gpu_hours",
         "still_down"),
        note=("measured: the work since the checkpoint, detection (failure to published incident), fencing and "
              "the restart gate (to the restart command), approval wait (to the approved restart's execution), "
              "requeue (to the job's next start), a person's repair (no restart: to the next start); still_down: "
              "jobs not running again by the history's end (their last phase runs to it). The archive cannot "
              "measure the checkpoint reload and warm-up (a job counts as running from its start), nor a fault "
              "before its first evidence (a hang's collective timeout is in the lost work)"),
    ),
)


PERCENT_COLUMNS = frozenset({"hardware_share", "share", "success_rate"})
"""Columns holding a fraction of 1, which people read as a percentage."""

_TREND_FIGURES = ("first_half_s", "second_half_s", "change_pct", "slope_s_per_day")
_TOO_FEW = "too few saves"


@dataclass
class Report:
    """The answers for one window (None: unbounded): per section key, the view's rows (dicts, in order)."""

    since: datetime | None
    until: datetime | None
    sections: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: times as RFC 3339, NaN/inf as null, every section with its question."""
        return {
            "since": None if self.since is None else rfc3339(self.since),
            "until": None if self.until is None else rfc3339(self.until),
            "sections": {
                s.key: {"title": s.title, "question": s.question, **({"note": s.note} if s.note else {}),
                        "rows": [{k: _plain(v) for k, v in row.items()} for row in self.sections.get(s.key, [])]}
                for s in SECTIONS
            },
        }


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """A window start: a duration back from ``now`` (``90m``, ``12h``, ``7d``, ``2w``) or an ISO date/time.

    A time without an offset is taken as UTC. Raises :class:`ValueError` for anything else.
    """
    match = _DURATION.match(text)
    if match:
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since wants a duration (30m, 12h, 7d, 2w) or an ISO date/time, got {text!r}"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _epoch_ms(ts: datetime) -> int:
    """Epoch milliseconds of a datetime (naive = UTC), kept within what DateTime64(3) holds."""
    utc = ts.astimezone(UTC) if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
    return (min(max(utc, _BEGINNING), _END_OF_TIME) - _BEGINNING) // timedelta(milliseconds=1)


def section_sql(section: Section, since: datetime, until: datetime) -> str:
    """The query answering ``section`` for the window ``[since, until]`` (integer literals only)."""
    return f"SELECT * FROM {section.view}(since_ms = {_epoch_ms(since)}, until_ms = {_epoch_ms(until)})"


def build_report(archive: Archive, since: datetime | None = None, until: datetime | None = None,
                 sections: Sequence[Section] = SECTIONS) -> Report:
    """Run every section's query over the window (default: all of the archive)."""
    report = Report(since=since, until=until)
    for section in sections:
        rows = archive.query(section_sql(section, since or _BEGINNING, until or _END_OF_TIME))
        if section.key == "checkpoint_trend":
            rows = [{**r, **dict.fromkeys(_TREND_FIGURES)} if r.get("trend") == _TOO_FEW else r for r in rows]
        report.sections[section.key] = rows
    return report


def _plain(value: Any) -> Any:
    """One value as JSON has it."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
