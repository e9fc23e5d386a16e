"""Prometheus metrics of the pipeline, created once per process, and the names the agent exports.

Importing this module registers every collector below in prometheus_client's default registry
exactly once, however many workers, sinks or executors a process runs (registering a name twice
raises "Duplicated timeseries"). Nothing here is wired into the stages: each stage's owner
increments them at the places listed, and serves them with
``prometheus_client.start_http_server(METRICS_PORTS[stage])``; ``deploy/prometheus/prometheus.yml``
scrapes those ports and ``deploy/prometheus/alerts.yml`` alerts on the names.

Pipeline metrics (``stage`` is one of :data:`STAGES`)
----------------------------------------------------

``faultline_stage_records_in_total{stage, topic}`` — :data:`RECORDS_IN`
    +1 per record a stage consumed, valid or not. Correlator: in ``correlators.worker.judge`` for
    every message of the events topic, before decoding. Sink: in ``ArchiveSink._poll`` per message
    without an error (``topic`` = the message's topic). Executor: per command consumed.
``faultline_stage_records_out_total{stage, output}`` — :data:`RECORDS_OUT`
    +1 per record a stage produced; ``output`` is the topic suffix (``incidents``, ``commands``,
    ``deadletters``, ``control``) or, for the sink, the archive table written (``+= rows``).
    Correlator: in ``Publisher.send`` (``correlators.worker.publisher``); sink: in ``ArchiveSink._write`` next to ``ROWS_WRITTEN``.
``faultline_consumer_lag_records{stage, topic, partition}`` — :data:`CONSUMER_LAG`
    Records between the consumer's position and the partition's end (last stable offset).
    Set with :func:`set_consumer_lag` every few seconds: the sink from ``ArchiveSink.end_offsets``
    and its consumer's ``position``; the correlator from its Faust consumer's highwater minus
    the offset it is processing.
``faultline_dead_letters_total{stage}`` — :data:`DEAD_LETTERS`
    +1 per record a stage sets aside as a dead letter: the producer per bad capture line
    (``faultline.pipeline.publish_capture`` and the agent), the correlator per undecodable event
    (or one over :data:`streams.bounds.MAX_EVENT_BYTES`, reason ``over the cap: ...``),
    the sink in ``ArchiveSink._decode`` (``stage="sink"``; it also keeps its own
    ``faultline_archive_dead_letters_total``).
``faultline_records_refused_total{stage, output, reason}`` — :data:`RECORDS_REFUSED`
    +1 per decision the correlator could not publish whole (``correlators.worker.refusals``): over
    :data:`streams.bounds.MAX_RECORD_BYTES` before sending (``reason="over_cap"``), or refused for
    good by the broker (``too_large``, ``invalid``). Each is replaced by a minimal record of the same
    id and dead-lettered; any rise is a bug in a record's bounds (alert ``FaultlineRecordRefused``).
``faultline_snapshots_refused_total{reason}`` — :data:`SNAPSHOTS_REFUSED`
    +1 per snapshot a correlator takeover read and did not restore
    (``correlators.worker.takeover.SnapshotLoader``): ``refused`` (forged, corrupt, another version,
    policy or partition), ``stale`` (retention deleted the records right after it),
    ``beyond_log_end`` (it claims a position the events log never reached) or ``unreadable``. The
    partition is rebuilt from the log start instead: slower, never wrong.
``faultline_incidents_open{category, severity}`` — :data:`INCIDENTS_OPEN`
    Incidents whose state is neither ``resolved`` nor ``closed``. Set with
    :func:`set_incidents_open` by the correlator after each event it processed, from its
    incidents (``Correlator.incidents``).
``faultline_detection_to_command_seconds{type}`` — :data:`DETECTION_TO_COMMAND`
    Per command, once: the wall-clock time at which the correlator hands the command to its
    Kafka producer, minus the event time of the first evidence of the incident it serves (the
    incident's ``opened_at``: the event time of its earliest finding). It covers the source's
    delay, transport, judgement (debounce and settle timers included) and publication. Observe
    with :func:`observe_detection_to_command` in ``correlators.worker.publisher`` where commands are
    sent, in live workers only: a replay's event time is not wall time (the helper also drops samples
    that are negative or older than :data:`MAX_DETECTION_AGE_S`).
``faultline_commands_issued_total{type, requires_approval}`` — :data:`COMMANDS_ISSUED`
    +1 per command the correlator publishes (next to the histogram above).
``faultline_command_outcomes_total{status, executor}`` — :data:`COMMAND_OUTCOMES`
    +1 per command result (``streams.decisions.CommandResult``: ``done``, ``failed``,
    ``skipped_duplicate``, ``waiting_approval``, ``denied``, ``dry_run``): by the executor when it
    publishes a result, or by the sink in ``ArchiveSink._write`` for the ``command-results`` records.
``faultline_stage_event_timestamp_seconds{stage}`` — :data:`EVENT_TIME`
    Event time (Unix seconds) of the newest record a stage processed: its watermark. The
    correlator sets it per event; ``time() - faultline_stage_event_timestamp_seconds`` is how far it
    lags the world.
``faultline_stage_heartbeat_timestamp_seconds{stage, stage_instance}`` — :data:`HEARTBEAT_TIME`
    When (Unix seconds) each stage instance last said it was alive (:mod:`streams.health`); set by
    the sink, from every heartbeat it archives, with :func:`observe_heartbeat`. Beside it
    ``faultline_stage_heartbeat_interval_seconds{stage, stage_instance}`` (:data:`HEARTBEAT_INTERVAL`),
    the interval that instance promised; ``StageSilent`` fires past three of them. ``stage_instance``,
    not ``instance``: Prometheus gives every scraped series the target's ``instance`` (the sink's).
``faultline_clock_screened_lines`` — :data:`CLOCK_SCREENED`
    Lines the correlator's cells screened because their stamps lay past the sources' vote by more than
    the reach, or behind the cell's clock (``correlators/clock.py``): judged at the cell clock, moving
    nothing. Set with the gauges above, summed over the cells held; any rise is a source whose clock is
    wrong (each source's last skew is in the cell's state, ``sources``).
``faultline_clock_worst_skew_seconds`` — :data:`CLOCK_WORST_SKEW`
    The largest skew screened in any cell held (signed: ahead positive).
``faultline_clock_source_skew_seconds{node, source}`` — :data:`CLOCK_SOURCE_SKEW`
    Each source whose clock disagrees with its cell's *now* (a line of it screened lately); the 20 worst per worker (a forged fleet cannot grow the series without bound).
    A source in step again loses its series. Alert ``SourceClockSkewed``.

Metrics the node agent exports (names only: :data:`AGENT_METRICS`)
------------------------------------------------------------------

The agent (``producers.agent``) registers these itself, from the same NVML samples, kernel lines
and trainer reports it publishes. ``GPU`` stands for the labels of every GPU series
(:data:`GPU_SERIES_LABELS`): ``node`` (the node name) and ``gpu`` (the GPU index on the node), and
dcgm-exporter's ``UUID``, ``pci_bus_id``, ``device``, ``modelName`` and ``Hostname``, so that GPU series
join with ``DCGM_FI_*`` ones (``producers.exported_metrics``).
A training job is labelled ``training_job``, not ``job``: Prometheus gives every scraped series
the scrape job's ``job`` label, which would overwrite (rename to ``exported_job``) a metric's own.

=========================================================  =======  ====================================
name                                                       type     meaning
=========================================================  =======  ====================================
``faultline_gpu_temperature_celsius{GPU}``                 gauge    NVML ``temperature_c``
``faultline_gpu_xid_total{GPU,code}``                      counter  XID lines seen, by code
``faultline_gpu_ecc_volatile_sbe_total{GPU}``              counter  NVML ``ecc_sbe_volatile`` (resets
                                                                    with the driver; ``increase`` copes)
``faultline_gpu_ecc_volatile_dbe_total{GPU}``              counter  NVML ``ecc_dbe_volatile``
``faultline_gpu_clock_event_reasons{GPU,reason}``          gauge    1 while NVML reports the reason
                                                                    (``HW_THERMAL_SLOWDOWN``...), else 0
``faultline_job_checkpoint_age_seconds{training_job}``     gauge    now minus the newest good checkpoint
``faultline_job_checkpoint_interval_seconds{training_job}`` gauge   the job's configured interval
``faultline_job_loss{training_job}``                       gauge    the latest reported loss (NaN kept)
``faultline_pod_gpu_info{node,namespace,pod,gpu_uuid,...}`` gauge   1 per GPU the kubelet gave a pod
                                                                    (and ``gpu_index``; Kubernetes only)
=========================================================  =======  ====================================

The counters whose value NVML keeps (ECC) are exported through a custom collector (a
``CounterMetricFamily`` per scrape), since a prometheus_client ``Counter`` cannot be set.

The agent also exports its delivery metrics (``producers.metrics``), among them
``faultline_producer_dropped_total{source}`` (records lost: a full spool, or refused for good) and
``faultline_producer_spool_backlog_bytes`` (bytes waiting in the disk spool), which
``AgentDroppingEvents`` and ``AgentSpoolBacklog`` alert on.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import NamedTuple

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "AGENT_METRICS",
    "COMMANDS_ISSUED",
    "COMMAND_OUTCOMES",
    "CONSUMER_LAG",
    "BLAST_RADIUS_HELD", "CLOCK_SCREENED", "CLOCK_SOURCE_SKEW", "CLOCK_WORST_SKEW", "DEAD_LETTERS",
    "DETECTION_TO_COMMAND",
    "EVENT_TIME",
    "HEARTBEAT_INTERVAL",
    "HEARTBEAT_TIME",
    "GPU_SERIES_LABELS",
    "INCIDENTS_OPEN",
    "MAX_DETECTION_AGE_S",
    "METRICS_PORTS",
    "RECORDS_IN",
    "RECORDS_OUT",
    "RECORDS_REFUSED",
    "SNAPSHOTS_REFUSED",
    "STAGES",
    "MetricSpec",
    "observe_detection_to_command",
    "observe_heartbeat",
    "set_consumer_lag",
    "set_incidents_open",
    "stage_lag",
]

STAGES = ("producer", "agent", "correlator", "sink", "executor")
"""Values of the ``stage`` label."""

METRICS_PORTS: dict[str, int] = {"agent": 9464, "correlator": 9465, "sink": 9466, "executor": 9467}
"""Where each process serves ``/metrics`` (``deploy/prometheus/prometheus.yml`` scrapes these)."""

MAX_DETECTION_AGE_S = 7 * 86400
"""Detection-to-command samples older than this are a replay or a backfill, not a latency."""

_LATENCY_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 1800, 3600)

RECORDS_IN = Counter("faultline_stage_records_in", "Records a stage consumed.", ["stage", "topic"])
RECORDS_OUT = Counter(
    "faultline_stage_records_out", "Records a stage produced, by output topic or archive table.", ["stage", "output"]
)
CONSUMER_LAG = Gauge(
    "faultline_consumer_lag_records",
    "Records between a stage's consumer position and the partition's end.",
    ["stage", "topic", "partition"],
)
BLAST_RADIUS_HELD = Counter(
    "faultline_blast_radius_held",
    "Fencing commands held for approval because they passed the blast-radius limit (correlators/blast_radius.py).",
    ["type"],
)
DEAD_LETTERS = Counter(
    "faultline_dead_letters", "Records set aside as dead letters, by the stage that refused them.", ["stage"]
)
RECORDS_REFUSED = Counter(
    "faultline_records_refused",
    "Decisions not published whole (over the record cap, or refused for good by the broker), by why.",
    ["stage", "output", "reason"],
)
SNAPSHOTS_REFUSED = Counter(
    "faultline_snapshots_refused",
    "Correlator snapshots a takeover would not restore (it rebuilt from the log instead), by why.",
    ["reason"],
)
INCIDENTS_OPEN = Gauge(
    "faultline_incidents_open", "Incidents neither resolved nor closed, by category and severity.",
    ["category", "severity"],
)
DETECTION_TO_COMMAND = Histogram(
    "faultline_detection_to_command_seconds",
    "Wall time a command is produced minus the event time of its incident's first evidence.",
    ["type"],
    buckets=_LATENCY_BUCKETS,
)
COMMANDS_ISSUED = Counter(
    "faultline_commands_issued", "Commands the correlator published.", ["type", "requires_approval"]
)
COMMAND_OUTCOMES = Counter(
    "faultline_command_outcomes", "Command results reported by executors, by status.", ["status", "executor"]
)
EVENT_TIME = Gauge(
    "faultline_stage_event_timestamp_seconds", "Event time (Unix seconds) of the newest record a stage processed.",
    ["stage"],
)
CLOCK_SCREENED = Gauge(
    "faultline_clock_screened_lines", "Lines screened for a clock that disagreed with the cell's, over the cells held.")
CLOCK_WORST_SKEW = Gauge(
    "faultline_clock_worst_skew_seconds", "The largest skew (s, ahead positive) screened in any cell held.")
CLOCK_SOURCE_SKEW = Gauge(
    "faultline_clock_source_skew_seconds",
    "Skew (s, ahead positive) of each source whose clock disagrees with its cell's now (at most 20 per worker).",
    ["node", "source"])

HEARTBEAT_TIME = Gauge(
    "faultline_stage_heartbeat_timestamp_seconds", "When (Unix seconds) a stage instance last said it was alive.",
    ["stage", "stage_instance"],
)
HEARTBEAT_INTERVAL = Gauge(
    "faultline_stage_heartbeat_interval_seconds", "How often a stage instance promised to say it is alive.",
    ["stage", "stage_instance"],
)

_open_labels: set[tuple[str, str]] = set()
_skew_labels: set[tuple[str, str]] = set()
_lag_labels: dict[str, set[tuple[str, str]]] = {}
_lag_totals: dict[str, int] = {}


class MetricSpec(NamedTuple):
    """A metric another process exports: its exposition name, type, labels and meaning."""

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


GPU_SERIES_LABELS = ("node", "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
"""The labels of every GPU series the agent exports: faultline's, then dcgm-exporter's."""

AGENT_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("faultline_gpu_temperature_celsius", "gauge", GPU_SERIES_LABELS, "GPU temperature (NVML)."),
    MetricSpec("faultline_gpu_xid_total", "counter", (*GPU_SERIES_LABELS, "code"), "XID lines seen, by code."),
    MetricSpec("faultline_gpu_ecc_volatile_sbe_total", "counter", GPU_SERIES_LABELS,
               "Volatile single-bit ECC errors (NVML; resets with the driver)."),
    MetricSpec("faultline_gpu_ecc_volatile_dbe_total", "counter", GPU_SERIES_LABELS,
               "Volatile double-bit ECC errors (NVML; resets with the driver)."),
    MetricSpec("faultline_gpu_clock_event_reasons", "gauge", (*GPU_SERIES_LABELS, "reason"),
               "1 while NVML reports this clock event reason, else 0."),
    MetricSpec("faultline_job_checkpoint_age_seconds", "gauge", ("training_job",),
               "Seconds since the job's newest good checkpoint."),
    MetricSpec("faultline_job_checkpoint_interval_seconds", "gauge", ("training_job",),
               "The job's configured checkpoint interval."),
    MetricSpec("faultline_job_loss", "gauge", ("training_job",), "The job's latest reported loss."),
    MetricSpec("faultline_producer_dropped_total", "counter", ("source",),
               "Records lost: evicted from a full spool, or rejected by the broker for good."),
    MetricSpec("faultline_producer_spool_backlog_bytes", "gauge", (), "Bytes in the spool not yet acknowledged."),
    MetricSpec("faultline_producer_spool_lost_total", "counter", ("source", "kind", "reason"),
               "Events the spool lost, by source, event kind and reason (producers/spool/losses.py)."),
    MetricSpec("faultline_producer_spool_disk_full_total", "counter", (),
               "Writes to the spool that found its disk full."),
    MetricSpec("faultline_pod_gpu_info", "gauge", ("node", "namespace", "pod", "gpu_uuid", "gpu_index"),
               "1 for each GPU the kubelet assigned to a pod (PodResources API)."),
)


def observe_detection_to_command(command_type: str, first_evidence_at: datetime,
                                 produced_at: datetime | None = None) -> float | None:
    """Record one command's detection-to-command latency; return it, or None when dropped.

    ``first_evidence_at`` is the served incident's ``opened_at`` (event time); ``produced_at``
    defaults to now. Negative samples (a source clock ahead of ours) and samples older than
    :data:`MAX_DETECTION_AGE_S` (a replay) are dropped.
    """
    produced = produced_at or datetime.now(UTC)
    seconds = (produced - first_evidence_at).total_seconds()
    if seconds < 0 or seconds > MAX_DETECTION_AGE_S:
        return None
    DETECTION_TO_COMMAND.labels(type=command_type).observe(seconds)
    return seconds


def set_incidents_open(counts: Mapping[tuple[str, str], int]) -> None:
    """Set the open incidents per ``(category, severity)``; pairs no longer open drop to 0."""
    for labels in _open_labels - set(counts):
        INCIDENTS_OPEN.labels(*labels).set(0)
    for labels, n in counts.items():
        INCIDENTS_OPEN.labels(*labels).set(n)
    _open_labels.update(counts)


def set_source_skews(skews: Mapping[tuple[str, str], float]) -> None:
    """Set the skew per ``(node, source)`` disagreeing now; a source no longer skewed loses its series."""
    for labels in _skew_labels - set(skews):
        CLOCK_SOURCE_SKEW.remove(*labels)
    for labels, skew in skews.items():
        CLOCK_SOURCE_SKEW.labels(*labels).set(skew)
    _skew_labels.clear()
    _skew_labels.update(skews)


def set_consumer_lag(stage: str, lags: Mapping[tuple[str, int], int]) -> None:
    """Set one stage's lag per ``(topic, partition)``; partitions it no longer reads drop to 0."""
    current = {(topic, str(partition)): max(0, lag) for (topic, partition), lag in lags.items()}
    known = _lag_labels.setdefault(stage, set())
    for topic, partition in known - set(current):
        CONSUMER_LAG.labels(stage, topic, partition).set(0)
    for (topic, partition), lag in current.items():
        CONSUMER_LAG.labels(stage, topic, partition).set(lag)
    known.update(current)
    _lag_totals[stage] = sum(current.values())


def stage_lag(stage: str) -> int | None:
    """The records a stage of this process is behind, over every partition it reads, as it last
    measured them (:func:`set_consumer_lag`); ``None`` until it has. Its heartbeat carries this."""
    return _lag_totals.get(stage)


def observe_heartbeat(stage: str, instance: str, at: datetime, interval_s: float) -> None:
    """A stage instance's heartbeat, as the sink archived it: its time and promised interval."""
    HEARTBEAT_TIME.labels(stage, instance).set(at.timestamp())
    HEARTBEAT_INTERVAL.labels(stage, instance).set(interval_s)
