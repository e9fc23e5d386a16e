"""Migration 8: the archive counts lost GPU-hours honestly -- the work thrown away *and* the time down.

The rule is :mod:`faultline.lost_hours`'s, over archived history: a failure incident of a job costs its
run's GPUs from the newest checkpoint saved before the failure (or the run's start) to the failure
(``lost_work_gpu_hours``: the incident's own figure where the engine made one, else the archive's) plus
from the failure until the job runs again -- its next ``job_started`` -- or, where it has not run
again, until the end of the archived history (the newest event or incident version), with
``down_until_end`` true: it may be down longer still (``lost_down_gpu_hours``). ``lost_gpu_hours`` of
``incident_facts`` is their sum, so every answer view and dashboard panel that reads it (causes, GPU
models, hotspots) counts a job left down. A condition of a running job (ECC degradation, a stale
checkpoint...) stops nothing and keeps the incident's own figure.
"""

from __future__ import annotations

__all__ = ["lost_statements"]


def lost_statements(hardware: str, stops_job: str, far_past: str) -> list[str]:
    """``incident_facts`` and ``incident_gpus`` replaced, with the downtime (the constants of
    :mod:`sinks.archive.migrations`: the category lists and the empty time)."""
    return [
        f"""
    CREATE OR REPLACE VIEW incident_facts AS
    WITH
        history AS (
            SELECT id, arraySort(x -> x.1, groupArray((version, state, updated_at))) AS h
            FROM incident_versions FINAL
            GROUP BY id
        ),
        lifecycle AS (
            SELECT id,
                   arrayFirstIndex(x -> x.2 IN ('restarting', 'awaiting_approval'), h) AS ri,
                   if(ri = 0, NULL, h[ri].3) AS first_restart_at,
                   arrayFirst(x -> x.2 IN ('resolved', 'escalated', 'open', 'closed'), arraySlice(h, ri + 1)).2
                       AS after_restart,
                   arrayFilter(x -> x.2 = 'resolved', h) AS resolutions
            FROM history
        ),
        restarts AS (
            SELECT incident, count() AS restarts
            FROM commands FINAL
            WHERE type = 'restart_job'
            GROUP BY incident
        ),
        saved AS (
            SELECT job, ts AS saved_at FROM checkpoints FINAL WHERE status = 'saved' AND job != ''
        ),
        reruns AS (
            SELECT job, started_at AS rerun_at FROM job_runs
        ),
        base AS (
            SELECT i.id AS id, i.job AS job, ifNull(i.job, '') AS job_key, i.category AS category,
                   i.severity AS severity, i.state AS state, i.opened_at AS opened_at,
                   i.updated_at AS updated_at, i.culprit_node AS culprit_node,
                   i.culprit_gpus AS culprit_gpus, i.lost_gpu_hours AS engine_lost_gpu_hours,
                   l.first_restart_at AS first_restart_at, l.after_restart AS after_restart,
                   l.ri AS ri, l.resolutions AS resolutions
            FROM incidents_latest AS i
            LEFT JOIN lifecycle AS l ON l.id = i.id
        )
    SELECT b.id AS id, b.job AS job, b.category AS category,
           toBool(b.category IN {hardware}) AS is_hardware,
           toBool(b.category IN {stops_job}) AS stops_job,
           b.severity AS severity, b.state AS state, b.opened_at AS opened_at, b.updated_at AS updated_at,
           b.culprit_node AS culprit_node,
           if(b.culprit_node IS NULL, NULL, if(n.rack IS NULL OR n.rack = '', 'unknown', n.rack)) AS culprit_rack,
           b.culprit_gpus AS culprit_gpus,
           ifNull(r.restarts, 0) AS restarts,
           b.first_restart_at AS first_restart_at,
           multiIf(b.ri = 0, 'not_restarted', b.after_restart = 'resolved', 'resolved',
                   b.after_restart = 'open', 'failed_again', b.after_restart = 'escalated', 'escalated',
                   b.after_restart = 'closed', 'closed', 'pending') AS first_restart_outcome,
           if(b.state IN ('resolved', 'closed') AND notEmpty(b.resolutions),
              arrayMax(x -> x.3, b.resolutions), NULL) AS resolved_at,
           if(resolved_at IS NULL, NULL, dateDiff('millisecond', b.opened_at, resolved_at) / 1000) AS ttr_s,
           if(c.saved_at > {far_past}, c.saved_at, NULL) AS checkpoint_at,
           if(j.started_at > {far_past}, j.started_at, NULL) AS run_started_at,
           if(j.started_at > {far_past}, j.world_size, NULL) AS run_world_size,
           if(b.job IS NULL OR NOT stops_job OR (checkpoint_at IS NULL AND run_started_at IS NULL), NULL,
              dateDiff('millisecond', greatest(ifNull(checkpoint_at, {far_past}), ifNull(run_started_at, {far_past})),
                       b.opened_at) / 1000) AS checkpoint_age_s,
           if(checkpoint_age_s IS NULL OR run_world_size IS NULL, NULL,
              round(checkpoint_age_s * run_world_size / 3600, 3)) AS lost_gpu_hours_at_failure,
           toBool(x.rerun_at <= {far_past}) AS down_until_end,
           if(b.job IS NULL OR NOT stops_job OR run_world_size IS NULL, NULL,
              if(down_until_end,
                 greatest(b.opened_at, (SELECT greatest(max(ts), (SELECT max(updated_at) FROM incident_versions))
                                        FROM events)),
                 x.rerun_at)) AS down_until,
           if(down_until IS NULL, NULL, dateDiff('millisecond', b.opened_at, down_until) / 1000) AS down_s,
           ifNull(b.engine_lost_gpu_hours, lost_gpu_hours_at_failure) AS lost_work_gpu_hours,
           if(down_s IS NULL, NULL, round(down_s * run_world_size / 3600, 3)) AS lost_down_gpu_hours,
           if(lost_down_gpu_hours IS NULL, b.engine_lost_gpu_hours,
              round(ifNull(lost_work_gpu_hours, 0) + lost_down_gpu_hours, 3)) AS lost_gpu_hours
    FROM base AS b
    LEFT JOIN restarts AS r ON r.incident = b.id
    LEFT JOIN node_inventory AS n ON n.node = ifNull(b.culprit_node, '')
    ASOF LEFT JOIN saved AS c ON c.job = b.job_key AND c.saved_at <= b.opened_at
    ASOF LEFT JOIN job_runs AS j ON j.job = b.job_key AND j.started_at <= b.opened_at
    ASOF LEFT JOIN reruns AS x ON x.job = b.job_key AND x.rerun_at > b.opened_at
    """,
        # Culprit GPUs of every incident, named by the inventory, with the incident's honest lost GPU-hours.
        """
    CREATE OR REPLACE VIEW incident_gpus AS
    SELECT i.id AS incident, i.job AS job, i.category AS category, i.opened_at AS opened_at,
           ifNull(i.culprit_node, '') AS node, g AS gpu,
           if(k.gpu_name = '', 'unknown', k.gpu_name) AS gpu_name,
           if(k.rack = '', 'unknown', k.rack) AS rack,
           f.lost_gpu_hours AS lost_gpu_hours
    FROM incidents_latest AS i
    ARRAY JOIN i.culprit_gpus AS g
    LEFT JOIN incident_facts AS f ON f.id = i.id
    LEFT JOIN gpu_keys AS k
        ON k.node = ifNull(i.culprit_node, '')
        AND k.key = multiIf(startsWith(g, 'GPU-'), g, match(g, '^[0-9]+$'), g,
                            extract(lower(g), '([0-9a-f]{2}:[0-9a-f]{2})([.][0-9a-f])?$'))
    """,
    ]
