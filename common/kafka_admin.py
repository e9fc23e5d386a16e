"""Kafka administration over confluent-kafka: create, grow, list and delete a namespace's topics; check the broker.

Every topic created here follows :mod:`common.replication`: as many copies as the plan wants
(3), or as the cluster has brokers when it has fewer, with ``min.insync.replicas`` to match --
the namespace's topics and the correlator's own (the ``emitted`` changelog, the snapshots)
alike, so no stage's writes hang on the one broker holding a topic of one replica.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from common.kafka_logging import with_logger
from common.replication import replication_configs, replication_for
from streams.topics import TOPICS, correlator_internal_topics, topic_name

__all__ = ["ensure_topic", "topic_partitions", "topic_replication", "grow_topic", "create_namespace_topics",
           "delete_namespace_topics", "BrokerUnreachable", "check_broker"]


log = logging.getLogger("faultline.topics")


class BrokerUnreachable(RuntimeError):
    """The Kafka broker did not answer; the message names it and the setting that chose it."""


def check_broker(conf: dict[str, Any], timeout: float = 10.0) -> None:
    """Raise :class:`BrokerUnreachable` unless the broker at ``conf`` lists its topics within ``timeout``."""
    admin = AdminClient(with_logger(conf))
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        admin.poll(0)  # hand librdkafka's queued log lines to logging (collapsed) before the verdict
        reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        raise BrokerUnreachable(
            f"the Kafka broker at {conf['bootstrap.servers']} did not answer within {timeout:.0f} s ({reason}). "
            "Start it, or set FAULTLINE_KAFKA to one that runs (unset FAULTLINE_KAFKA to use the local broker: "
            "`faultline broker start`).") from exc


def topic_replication(conf: dict[str, Any], timeout: float = 30.0) -> int:
    """The replication factor a topic created now gets on this cluster (:func:`common.replication.replication_for`)."""
    return replication_for(len(AdminClient(conf).list_topics(timeout=timeout).brokers))


def _create(conf: dict[str, Any], wanted: list[tuple[str, int, dict[str, str]]], timeout: float = 30.0) -> None:
    """Create each ``(name, partitions, config)`` (an existing topic is fine) at the cluster's replication
    factor, then wait until the broker's metadata lists them.

    A topic whose creation was acknowledged is not yet in every metadata answer (a broker just
    started is still loading); a worker started right after would not find it.
    """
    admin = AdminClient(with_logger(conf))
    listing = admin.list_topics(timeout=timeout)
    replication = replication_for(len(listing.brokers))
    new = [NewTopic(name, num_partitions=partitions, replication_factor=replication,
                    config={**replication_configs(replication), **config})
           for name, partitions, config in wanted]
    _warn_under_replicated(listing, [name for name, _, _ in wanted], replication)
    made = []
    for name, fut in admin.create_topics(new, operation_timeout=timeout).items():
        try:
            fut.result(timeout=timeout)
            made.append(name)
        except KafkaException as exc:
            if "TOPIC_AUTHORIZATION_FAILED" in str(exc):
                # A least-privilege user (deploy/acls.py) uses topics the admin created; Kafka says
                # "not authorized" whether or not the topic exists, so a missing one shows up on first use.
                log.info("not allowed to create %s; assuming the admin did (`faultline topics apply`)", name)
            elif "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise RuntimeError(f"could not create topic {name}: {exc}") from exc
    deadline = time.monotonic() + timeout
    while made:
        listed = admin.list_topics(timeout=timeout).topics  # all topics: naming one may auto-create it
        made = [name for name in made if name not in listed or listed[name].error or not listed[name].partitions]
        if made and time.monotonic() > deadline:
            raise RuntimeError(f"created {made} but the broker does not list them after {timeout:.0f}s")
        if made:
            time.sleep(0.2)


def _warn_under_replicated(listing: Any, names: list[str], replication: int) -> None:
    """Say so when a topic already exists with fewer copies than the rule gives it now (created on a smaller
    cluster, or by an older version): Kafka does not add replicas by itself."""
    for name in names:
        meta = listing.topics.get(name)
        if meta is None or meta.error is not None or not meta.partitions:
            continue
        have = min(len(p.replicas) for p in meta.partitions.values())
        if have < replication:
            log.warning("topic %s has %d replica(s), not %d: losing its broker stops whoever writes there. "
                        "Add replicas with kafka-reassign-partitions (or recreate the topic).", name, have,
                        replication)


def ensure_topic(conf: dict[str, Any], name: str, partitions: int, config: dict[str, str]) -> None:
    """Create ``name`` unless it exists, replicated as :mod:`common.replication` says."""
    _create(conf, [(name, partitions, config)])


def topic_partitions(conf: dict[str, Any], name: str, timeout: float = 30.0) -> int | None:
    """How many partitions ``name`` has; None when it does not exist."""
    # All topics, not ``list_topics(name)``: asking for one by name may auto-create it on the broker.
    meta = AdminClient(with_logger(conf)).list_topics(timeout=timeout).topics.get(name)
    if meta is None or meta.error is not None or not meta.partitions:
        return None
    return len(meta.partitions)


def grow_topic(conf: dict[str, Any], name: str, partitions: int) -> None:
    """Give ``name`` at least ``partitions`` partitions (Kafka never removes any)."""
    have = topic_partitions(conf, name)
    if have is not None and have < partitions:
        admin = AdminClient(with_logger(conf))  # held until the result is in: a collected client cancels its requests
        for fut in admin.create_partitions([NewPartitions(name, partitions)], operation_timeout=30).values():
            fut.result(timeout=30)


def create_namespace_topics(conf: dict[str, Any], namespace: str, partitions: int | None = None) -> list[str]:
    """Create every declared topic of a namespace (``partitions`` overrides the declared count)."""
    _create(conf, [(topic_name(namespace, s), partitions or spec.partitions,
                    {"cleanup.policy": spec.cleanup,
                     **({"retention.ms": str(spec.retention_ms)} if spec.retention_ms else {})})
                   for s, spec in TOPICS.items()])
    return [topic_name(namespace, s) for s in TOPICS]


def delete_namespace_topics(conf: dict[str, Any], namespace: str) -> None:
    """Delete a namespace's topics, the correlator's own (changelog, snapshots) included: a replay leaves none."""
    admin = AdminClient(with_logger(conf))
    names = [topic_name(namespace, s) for s in TOPICS] + correlator_internal_topics(namespace)
    for fut in admin.delete_topics(names, operation_timeout=30).values():
        try:
            fut.result(timeout=30)
        except KafkaException:
            pass  # already gone
