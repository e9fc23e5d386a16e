"""How many copies of each topic the cluster keeps: one rule for every place that creates a topic.

The topic plan (``deploy/topics``, ``faultline topics apply``), the namespace set-up of replays
and tests (:func:`common.kafka_admin.create_namespace_topics`) and the topics the correlator
makes for itself (the ``emitted`` changelog, the state snapshots) all create topics; if any of
them fell back to one replica, killing the one broker that holds it would stall the stage
that writes there however well the others are replicated. So all of them ask this module:

* :data:`PLANNED_REPLICATION` copies of every topic (3: one broker may be lost, and one more
  be down for maintenance, without losing a record), or as many as the cluster has brokers
  when it has fewer (a development broker has one);
* ``min.insync.replicas`` :func:`min_insync`: 2 with 3 or more replicas, so a write the
  producers' ``acks=all`` calls acknowledged is on two brokers before anyone acts on it;
  1 with fewer (a lone broker could not take any write otherwise).
"""

from __future__ import annotations

__all__ = ["PLANNED_REPLICATION", "min_insync", "replication_for", "replication_configs"]

PLANNED_REPLICATION = 3


def replication_for(brokers: int, planned: int = PLANNED_REPLICATION) -> int:
    """The replication factor a topic gets on a cluster of ``brokers`` live brokers."""
    return max(1, min(planned, brokers))


def min_insync(replication: int) -> int:
    """``min.insync.replicas``: 2 with 3 replicas (one broker may be down), 1 with fewer."""
    return 2 if replication >= 3 else 1


def replication_configs(replication: int) -> dict[str, str]:
    """The topic configs that go with ``replication``."""
    return {"min.insync.replicas": str(min_insync(replication))}
