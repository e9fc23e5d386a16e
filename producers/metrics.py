"""Prometheus metrics of the producers, created once per process.

The collectors live at module level: importing this module registers them in
the default registry exactly once, however many publishers or agents a
process creates (a second registration of the same name would raise
"Duplicated timeseries"). ``source`` is the capture source of the records
(``nvml``, ``kernel``, ``bmc``, ``node_agent``...) for the delivery counters,
and the agent's source name (the config section) for the others.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

__all__ = [
    "ALREADY_DELIVERED", "BAD_LINES", "DROPPED", "OBSERVATIONS", "PARSE_ERRORS", "SENT", "SOURCE_ERRORS",
    "SPOOL_BACKLOG", "SPOOL_DISK_FULL", "SPOOL_LOST", "SPOOLED",
]

SENT = Counter(
    "faultline_producer_sent", "Records the broker acknowledged.", ["source"]
)
SPOOLED = Counter(
    "faultline_producer_spooled",
    "Records that waited in the disk spool because the broker was unreachable or a delivery failed.",
    ["source"],
)
DROPPED = Counter(
    "faultline_producer_dropped",
    "Records lost: evicted from a full spool, or rejected by the broker for good.",
    ["source"],
)
ALREADY_DELIVERED = Counter(
    "faultline_producer_already_delivered",
    "Spooled records a restarted publisher found in Kafka already (delivered just before a crash) and did not "
    "send again.",
    ["source"],
)
PARSE_ERRORS = Counter(
    "faultline_producer_parse_errors", "Observations that were not a usable capture line.", ["source"]
)
OBSERVATIONS = Counter("faultline_agent_observations", "Observations a source produced.", ["source"])
SOURCE_ERRORS = Counter("faultline_agent_source_errors", "Polls or starts of a source that failed.", ["source"])
SPOOL_LOST = Counter(
    "faultline_producer_spool_lost",
    "Events the spooling publisher lost, by source, event kind and reason (producers.spool.losses: disk_full, "
    "over_bound, refused, rejected, unreadable).",
    ["source", "kind", "reason"],
)
SPOOL_DISK_FULL = Counter(
    "faultline_producer_spool_disk_full",
    "Writes to the spool that found its disk full (each one then evicted the oldest segment or refused the records).",
)
SPOOL_BACKLOG = Gauge("faultline_producer_spool_backlog_bytes", "Bytes in the spool not yet acknowledged.")
BAD_LINES = Counter(
    "faultline_capture_bad_lines",
    "Capture lines set aside as dead letters by the producer, by the rule they broke "
    "(producers.capture.BAD_KINDS: too_long, duplicate, not_json, bad_timestamp, clock_outlier...).",
    ["kind"],
)
