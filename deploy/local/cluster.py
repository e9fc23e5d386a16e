"""A replicated Kafka cluster on loopback: three (or more) KRaft nodes, each a broker and a controller voter.

What a production cluster promises, on one machine, so tests can take its brokers away:

* every node is a combined broker+controller of one static quorum, so losing any one node
  keeps a controller majority (2 of 3) and the cluster goes on;
* internal topics (consumer offsets, transactions) and new topics default to
  :func:`~common.replication.replication_for` the cluster's size (3) with
  ``min.insync.replicas`` 2, and producers that use ``acks=all`` get an acknowledgement only
  once two brokers hold the record;
* a dead broker is noticed within seconds (``broker.session.timeout.ms`` 4 s instead of 9 s),
  so a test that kills a partition leader sees a new leader elected quickly.

:meth:`LocalKafkaCluster.kill` SIGKILLs one node (a crash: no controlled shutdown hands its
leaderships over first); :meth:`LocalKafkaCluster.revive` starts it again on its data dir and
waits until it is back in every in-sync replica set, so the next fault again finds three copies::

    with LocalKafkaCluster(tmp_path / "cluster") as cluster:
        leader = cluster.leader_of("ns.events", 0)
        cluster.kill(leader)
        ...
        cluster.revive(leader)
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka.admin import AdminClient

from common.replication import replication_for
from deploy.local.jars import KafkaLaunchError
from deploy.local.node import LocalKafka, new_cluster_id
from deploy.local.probe import LOOPBACK, free_ports

__all__ = ["LocalKafkaCluster"]

# Faster failure detection than Kafka's defaults (9 s session, 30 s replica lag): a killed
# broker is fenced, and its leaderships and ISR places are moved, within a few seconds.
_FAILOVER = {
    "broker.heartbeat.interval.ms": "1000",
    "broker.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "6000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "controller.quorum.election.timeout.ms": "1000",
    "unclean.leader.election.enable": "false",
}
_POLL_S = 0.25


class LocalKafkaCluster:
    """``size`` KRaft nodes on loopback sharing one quorum and one cluster id (see the module docstring)."""

    def __init__(self, data_dir: Path, size: int = 3, heap: str = "384m") -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one node")
        self.data_dir = Path(data_dir).resolve()
        ports = free_ports(2 * size)
        voters = ",".join(f"{i + 1}@{LOOPBACK}:{ports[size + i]}" for i in range(size))
        cluster_id = new_cluster_id()
        self.replication = replication_for(size)
        self.nodes = [
            LocalKafka(self.data_dir / f"node-{i + 1}", port=ports[i], controller_port=ports[size + i], heap=heap,
                       node_id=i + 1, voters=voters, cluster_id=cluster_id, replication=self.replication,
                       overrides=_FAILOVER)
            for i in range(size)
        ]

    def __repr__(self) -> str:
        return f"LocalKafkaCluster(data_dir={str(self.data_dir)!r}, nodes={[n.node_id for n in self.nodes]})"

    @property
    def bootstrap(self) -> str:
        """Every node's ``host:port``, as ``bootstrap.servers`` (clients survive any one node's loss)."""
        return ",".join(n.bootstrap for n in self.nodes)

    def node(self, node_id: int) -> LocalKafka:
        """The node whose broker id is ``node_id``."""
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} in {self!r}")

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 120) -> None:
        """Launch every node, then wait until each lists the whole cluster."""
        for n in self.nodes:
            n.launch()
        try:
            deadline = time.monotonic() + timeout
            for n in self.nodes:
                n.wait_ready(max(1.0, deadline - time.monotonic()), brokers=len(self.nodes))
        except KafkaLaunchError:
            self.stop()
            raise

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM every node at once, then wait (SIGKILL after ``timeout``): one at a time, the last
        ones would wait for a controller quorum that is already gone."""
        for n in self.nodes:
            n.terminate()
        deadline = time.monotonic() + timeout
        for n in self.nodes:
            n.stop(timeout=max(0.5, deadline - time.monotonic()))

    def __enter__(self) -> LocalKafkaCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (a crash, not a shutdown)."""
        self.node(node_id).kill()

    def revive(self, node_id: int, timeout: float = 120) -> None:
        """Start a killed node again and wait until it is back in the ISR of every partition it replicates."""
        node = self.node(node_id)
        deadline = time.monotonic() + timeout
        node.start(timeout)
        self.wait_in_sync(max(1.0, deadline - time.monotonic()))

    # --- what the cluster looks like ----------------------------------------------------------

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 30) -> int:
        """The broker id leading ``topic[partition]`` now (waiting out an election in progress)."""
        deadline = time.monotonic() + timeout
        while True:
            meta = self.admin().list_topics(timeout=10).topics.get(topic)
            if meta is not None and meta.error is None and partition in meta.partitions:
                leader = meta.partitions[partition].leader
                if leader >= 0:
                    return int(leader)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}[{partition}] has no leader after {timeout:.0f}s")
            time.sleep(_POLL_S)

    def replicas(self, topic: str) -> dict[int, tuple[list[int], list[int]]]:
        """``{partition: (replicas, in-sync replicas)}`` of ``topic``."""
        meta = self.admin().list_topics(timeout=10).topics[topic]
        return {p: (list(m.replicas), list(m.isrs)) for p, m in meta.partitions.items()}

    def under_replicated(self) -> list[tuple[str, int]]:
        """Every partition (internal topics included) with fewer in-sync replicas than replicas."""
        meta = self.admin().list_topics(timeout=10)
        return [(t, p) for t, tm in meta.topics.items() for p, pm in tm.partitions.items()
                if len(pm.isrs) < len(pm.replicas)]

    def wait_in_sync(self, timeout: float = 120) -> None:
        """Until no partition is under-replicated (a revived node has caught up everywhere)."""
        deadline = time.monotonic() + timeout
        while lagging := self.under_replicated():
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions still under-replicated after {timeout:.0f}s: {lagging[:10]}")
            time.sleep(_POLL_S)

    def client_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap}
