"""The topic and partition plan: every declared topic, sized for a fleet, applied to any Kafka.

``faultline topics plan`` prints the plan with its arithmetic; ``faultline topics
apply [--dry-run]`` creates missing topics, raises partition counts and sets the
planned configs on the configured broker. Both start from
:data:`streams.topics.TOPICS` (suffix, key, model, declared partitions, cleanup,
retention) and add a sizing model with every assumption named in
:class:`Assumptions` (defaults: 10,000 GPUs sampled at 1 Hz).

The arithmetic, per topic
-------------------------

* **records/s** -- ``events``: what the node agents publish. NVML is sampled
  ``gpus x sample_hz`` times a second (*before* publish-on-change); the agent
  publishes a sample only when a reading moved past its tolerance
  (``change_share`` of the samples) or when the GPU's snapshot is due
  (``1 / snapshot_interval_s``), so *after* publish-on-change a GPU sends
  ``min(sample_hz, change_share x sample_hz + 1 / snapshot_interval_s)`` a
  second. Heartbeats (one per node per ``heartbeat_interval_s``), trainer
  lines and the rarer kernel/BMC/scheduler lines are added per node. The other
  topics follow from the incident rate.
* **bytes/record** -- the length of a real serialized record: an
  :class:`~streams.events.Event` made by the agent's own parser
  (:func:`producers.capture.parse_capture_line`) from a typical observation of
  each kind, or a decision model with typical contents, ``model_dump_json()``
  exactly as the producers send it. Kafka's record overhead is left out (small
  next to these sizes).
* **MB/s** -- records/s x bytes/record, steady and *peak*. The peak of
  ``events`` is the pre-publish-on-change rate: every GPU's every sample
  changes at once (a fleet-wide job start or stop), and the plan must hold it.
* **partitions** -- a partition is budgeted ``partition_mb_s`` of peak writes
  (uncompressed; a broker partition takes several times that) and, for the
  correlator's input, ``correlator_events_s`` of steady records (one Python
  process judges a partition; its engine alone was measured near 10,000
  events/s on one core, half of that is left for Faust, decoding and
  headroom). ``needed = ceil(peak MB/s / partition_mb_s)``.
* **retention bytes** -- steady MB/s x retention seconds / ``compression`` (lz4
  on the wire and on disk; measured ~11x on homogeneous samples, 4x assumed),
  per replica, and x ``replication`` across the cluster. A compacted topic
  keeps one record per key; it is given per year of incidents.

Two topics get fewer partitions than :mod:`streams.topics` declares, on
purpose (each says why in the plan):

* ``events`` -- **one partition per cell.** The correlator judges across nodes
  (a job's ranks, a rack, a power domain), so one engine must see every event
  of a *cell* (a set of nodes no job or rack crosses) in order; events are
  keyed by cell (:mod:`streams.cells`), so a cell never straddles partitions,
  and a worker taking over rebuilds its state one partition at a time
  (``correlators.rebuild.rebuild``), from the partition's newest state snapshot
  (``correlators.snapshots``), so a takeover replays at most the snapshot
  interval, not the retention. This plan sizes one cell per namespace, with
  one ``events`` partition, and says how many cells the fleet needs; a
  namespace may also hold several cells (``FAULTLINE_CELL``) over as many
  partitions, which the workers of its correlator group share (OPERATIONS.md).
* ``commands`` -- one partition: commands are keyed by command id but must be
  carried out in the order issued (fence *before* restart); one partition is
  the only order Kafka keeps across keys, and the rate is a few a minute.

``apply`` is idempotent: it only creates what is missing, raises partition
counts (Kafka cannot lower them: a topic with more partitions than planned is
reported, not touched), and sets the configs the plan names
(``cleanup.policy``, ``retention.ms``, ``min.insync.replicas``) where they
differ. The replication factor is the planned one, or the number of brokers
where the cluster has fewer.
"""

from deploy.topics.apply import Action, apply_plan, render_actions
from deploy.topics.plan import (
    PINNED,
    Assumptions,
    Plan,
    RecordLoad,
    TopicPlan,
    make_plan,
    min_insync,
    render_plan,
)
from deploy.topics.sizes import record_sizes

__all__ = [
    "PINNED",
    "Action",
    "Assumptions",
    "Plan",
    "RecordLoad",
    "TopicPlan",
    "apply_plan",
    "make_plan",
    "min_insync",
    "record_sizes",
    "render_actions",
    "render_plan",
]
