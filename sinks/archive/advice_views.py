"""Migration 9: where the lost hours went, and checkpoint advice from the fleet's own failure rate (#29).

``report_lost_phases(since_ms, until_ms)`` splits the lost GPU-hours of ``incident_facts`` (migration 8)
into the phases of the way back. Each failure incident's downtime, from the failure (``opened_at``) to
``down_until`` (the job's next start, or the end of the history), is cut at these moments, each held
within the downtime and after the one before:

* ``detected``: the incident's first version's ``updated_at`` -- when the engine published it;
* ``restart``: its first ``restart_job`` command's ``issued_at``;
* ``approved``: for a restart that needs approval, the command's first ``done`` result (else the end);

so that detection = failure → detected; fencing and gate = detected → restart (the correlator fences the
hardware and its restart gate waits for late detectors); approval wait = restart → approved; requeue =
approved (or restart) → running again (the scheduler's relaunch); and, with no restart at all, human
repair = detected → running again. Each phase is its seconds × the run's GPUs; with the work lost since
the checkpoint (``lost_work_gpu_hours``) they add up to the incident's ``lost_gpu_hours``.

``checkpoint_advice`` is one row per job (its latest run), the rule of :mod:`sinks.checkpoint_advice`:
the job's observed interval (median gap between its saves) and mean save time, the fleet's hardware
failure rate for its GPU model (else the fleet's, else :data:`PRIOR_RATE_PER_GPU_HOUR`), the MTBF at its
size, Young's interval √(2 · MTBF · save time) clamped to [:data:`MIN_INTERVAL_S`,
:data:`MAX_INTERVAL_S`], and the GPU-hours per day the difference costs.
"""

from __future__ import annotations

import re

__all__ = ["MAX_INTERVAL_S", "MIN_FAILURES", "MIN_INTERVAL_S", "PRIOR", "PRIOR_RATE_PER_GPU_HOUR",
           "advice_statements"]

PRIOR = {"source": "The Llama 3 Herd of Models (2024), table 5", "interruptions": 419, "days": 54, "gpus": 16_384}
"""The published fleet record the advice falls back on: every unexpected interruption of Llama 3's
pre-training (78 % of them hardware), as a rate per GPU-hour."""
PRIOR_RATE_PER_GPU_HOUR = PRIOR["interruptions"] / (PRIOR["gpus"] * PRIOR["days"] * 24)  # type: ignore[operator]
MIN_FAILURES = 5
"""Fewer hardware failures than this (for the GPU model, then the whole fleet) and the rate is the prior's:
a Poisson count of 5 is known to about ±45 %, which moves a square-root interval by about ±20 %."""
MIN_INTERVAL_S = 300.0
MAX_INTERVAL_S = 86_400.0


def _phases_view(window: str) -> str:
    return f"""
    CREATE OR REPLACE VIEW report_lost_phases AS
    WITH
        published AS (
            SELECT id, argMin(updated_at, version) AS detected_at FROM incident_versions FINAL GROUP BY id
        ),
        restarts AS (
            SELECT incident, argMin(id, issued_at) AS command, min(issued_at) AS restart_at,
                   toBool(argMin(requires_approval, issued_at)) AS approval
            FROM commands FINAL WHERE type = 'restart_job' GROUP BY incident
        ),
        done AS (
            SELECT command, min(at) AS done_at FROM command_results FINAL WHERE status = 'done' GROUP BY command
        ),
        cut AS (
            SELECT toString(f.category) AS c, f.lost_gpu_hours AS lost, f.lost_work_gpu_hours AS work,
                   f.down_until_end AS still_down, f.run_world_size / 3600000 AS per_ms,
                   toUnixTimestamp64Milli(f.opened_at) AS o, toUnixTimestamp64Milli(f.down_until) AS e,
                   least(greatest(toUnixTimestamp64Milli(p.detected_at), o), e) AS d,
                   r.restart_at > toDateTime64(0, 3, 'UTC') AS restarted,
                   least(greatest(toUnixTimestamp64Milli(r.restart_at), d), e) AS rs,
                   if(r.approval, least(greatest(if(x.done_at > toDateTime64(0, 3, 'UTC'),
                                                    toUnixTimestamp64Milli(x.done_at), e), rs), e), rs) AS ap
            FROM incident_facts AS f
            LEFT JOIN published AS p ON p.id = f.id
            LEFT JOIN restarts AS r ON r.incident = f.id
            LEFT JOIN done AS x ON x.command = r.command
            WHERE f.stops_job AND f.job IS NOT NULL AND f.opened_at BETWEEN {window}
        )
    SELECT if(grouping(c) = 1, '(all)', c) AS category,
           count() AS incidents,
           round(sum(ifNull(lost, 0)), 3) AS lost_gpu_hours,
           round(sum(ifNull(work, 0)), 3) AS lost_work_gpu_hours,
           round(sum(ifNull((d - o) * per_ms, 0)), 3) AS detection_gpu_hours,
           round(sum(ifNull(if(restarted, rs - d, 0) * per_ms, 0)), 3) AS fencing_gate_gpu_hours,
           round(sum(ifNull(if(restarted, ap - rs, 0) * per_ms, 0)), 3) AS approval_wait_gpu_hours,
           round(sum(ifNull(if(restarted, e - ap, 0) * per_ms, 0)), 3) AS requeue_gpu_hours,
           round(sum(ifNull(if(restarted, 0, e - d) * per_ms, 0)), 3) AS human_repair_gpu_hours,
           countIf(ifNull(still_down, false)) AS still_down
    FROM cut
    GROUP BY GROUPING SETS ((c), ())
    ORDER BY category = '(all)', lost_gpu_hours DESC, category
    """


def _advice_view(hardware_failures: str) -> str:
    prior = repr(PRIOR_RATE_PER_GPU_HOUR)
    return f"""
    CREATE OR REPLACE VIEW checkpoint_advice AS
    WITH
        (SELECT greatest(max(ts), (SELECT max(updated_at) FROM incident_versions)) FROM events) AS history_end,
        nodes AS (
            SELECT assumeNotNull(node) AS node, min(ts) AS first_seen,
                   argMax(length(JSONExtractArrayRaw(body, 'gpus')), ts) AS gpus,
                   argMax(JSONExtractString(JSONExtractArrayRaw(body, 'gpus')[1], 'name'), ts) AS name
            FROM events FINAL WHERE kind = 'inventory' AND node IS NOT NULL GROUP BY node
        ),
        exposure AS (
            SELECT if(name = '', 'unknown', name) AS gpu_name,
                   sum(gpus * greatest(0, dateDiff('millisecond', first_seen, history_end)) / 3600000) AS gpu_hours
            FROM nodes GROUP BY gpu_name
        ),
        failures AS (
            SELECT if(n.name IS NULL OR n.name = '', 'unknown', n.name) AS gpu_name, count() AS failures
            FROM incident_facts AS f LEFT JOIN nodes AS n ON n.node = ifNull(f.culprit_node, '')
            WHERE f.category IN {hardware_failures}
            GROUP BY gpu_name
        ),
        rates AS (
            SELECT x.gpu_name AS gpu_name, x.gpu_hours AS gpu_hours, ifNull(y.failures, 0) AS failures
            FROM exposure AS x LEFT JOIN failures AS y ON y.gpu_name = x.gpu_name
        ),
        runs AS (
            SELECT job, argMax(world_size, started_at) AS gpus, argMax(nodes, started_at) AS nodes,
                   argMax(checkpoint_interval_s, started_at) AS declared_s
            FROM job_runs GROUP BY job
        ),
        models AS (
            SELECT r.job AS job, topK(1)(if(n.name IS NULL OR n.name = '', 'unknown', n.name))[1] AS gpu_name
            FROM (SELECT job, arrayJoin(nodes) AS node FROM runs) AS r LEFT JOIN nodes AS n ON n.node = r.node
            GROUP BY r.job
        ),
        saves AS (
            SELECT job, count() AS saves, max(ts) AS last_save_at,
                   if(countIf(seconds IS NOT NULL) = 0, NULL, avgIf(seconds, seconds IS NOT NULL)) AS save_s,
                   if(count() < 2, NULL, arrayReduce('quantileExact(0.5)', arrayPopFront(arrayDifference(
                       arraySort(groupArray(toUnixTimestamp64Milli(ts)))))) / 1000) AS gap_s
            FROM (SELECT job, ifNull(toString(step), event_id) AS k, min(ts) AS ts, avg(seconds) AS seconds
                  FROM checkpoints FINAL WHERE status = 'saved' AND job != '' GROUP BY job, k)
            GROUP BY job
        )
    SELECT j.job AS job, j.gpus AS gpus, if(m.gpu_name = '', 'unknown', m.gpu_name) AS gpu_name,
           ifNull(s.saves, 0) AS saves,
           round(if(s.gap_s IS NOT NULL AND s.gap_s > 0, s.gap_s, j.declared_s), 1) AS interval_s,
           multiIf(s.gap_s IS NOT NULL AND s.gap_s > 0, 'observed', j.declared_s IS NOT NULL, 'declared', NULL)
               AS interval_source,
           round(s.save_s, 2) AS save_s,
           if(s.saves > 0, s.last_save_at, NULL) AS last_save_at,
           (SELECT sum(failures) FROM rates) AS fleet_failures,
           (SELECT sum(gpu_hours) FROM rates) AS fleet_gpu_hours,
           ifNull(g.failures, 0) AS model_failures,
           multiIf(model_failures >= {MIN_FAILURES} AND g.gpu_hours > 0, 'gpu_model',
                   fleet_failures >= {MIN_FAILURES} AND fleet_gpu_hours > 0, 'fleet', 'prior') AS mtbf_basis,
           multiIf(mtbf_basis = 'gpu_model', model_failures, toUInt64(fleet_failures)) AS failures,
           round(if(mtbf_basis = 'gpu_model', g.gpu_hours, fleet_gpu_hours), 1) AS exposure_gpu_hours,
           multiIf(mtbf_basis = 'gpu_model', model_failures / g.gpu_hours,
                   mtbf_basis = 'fleet', fleet_failures / fleet_gpu_hours, {prior}) AS rate_per_gpu_hour,
           if(j.gpus = 0, NULL, 3600 / (rate_per_gpu_hour * j.gpus)) AS mtbf_s,
           round(mtbf_s / 3600, 2) AS mtbf_h,
           if(mtbf_s IS NULL OR s.save_s IS NULL OR s.save_s <= 0, NULL,
              least(greatest(sqrt(2 * mtbf_s * s.save_s), {MIN_INTERVAL_S}), {MAX_INTERVAL_S})) AS advised_s,
           round(advised_s) AS advised_interval_s,
           if(advised_s IS NULL OR interval_s IS NULL OR interval_s <= 0, NULL,
              least(1, s.save_s / interval_s + (interval_s + s.save_s) / (2 * mtbf_s)) * j.gpus * 24) AS now_gh,
           if(advised_s IS NULL, NULL,
              least(1, s.save_s / advised_s + (advised_s + s.save_s) / (2 * mtbf_s)) * j.gpus * 24) AS advised_gh,
           round(now_gh, 3) AS lost_gpu_hours_per_day_now,
           round(advised_gh, 3) AS lost_gpu_hours_per_day_advised,
           if(now_gh IS NULL OR advised_gh IS NULL, NULL, round(greatest(0, now_gh - advised_gh), 3))
               AS cost_gpu_hours_per_day
    FROM runs AS j
    LEFT JOIN models AS m ON m.job = j.job
    LEFT JOIN saves AS s ON s.job = j.job
    LEFT JOIN rates AS g ON g.gpu_name = if(m.gpu_name = '', 'unknown', m.gpu_name)
    ORDER BY cost_gpu_hours_per_day DESC NULLS LAST, job
    """


def advice_statements(hardware: str, stops_job: str, window: str) -> list[str]:
    """Migration 9's views, from :mod:`sinks.archive.migrations`'s SQL lists of the categories that blame
    hardware and that stop a job (a hardware failure is both) and the answer views' event-time window."""
    stopping = set(re.findall(r"'(\w+)'", stops_job))
    failures = [c for c in re.findall(r"'(\w+)'", hardware) if c in stopping]
    return [_phases_view(window), _advice_view("(" + ", ".join(f"'{c}'" for c in failures) + ")")]
