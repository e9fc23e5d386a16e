"""The replicated local cluster's configuration (deploy/local/cluster.py), without starting a JVM.

Killing its brokers under the whole pipeline is tests/faultline/test_replicated_cluster.py.
"""

from __future__ import annotations

from pathlib import Path

from deploy.local.cluster import LocalKafkaCluster
from deploy.local.node import LocalKafka


def _props(node: LocalKafka) -> dict[str, str]:
    return dict(line.split("=", 1) for line in node._server_properties().splitlines())


def test_three_nodes_share_one_quorum_and_keep_three_copies_with_two_in_sync(tmp_path: Path) -> None:
    cluster = LocalKafkaCluster(tmp_path, size=3)
    props = [_props(n) for n in cluster.nodes]
    assert [p["node.id"] for p in props] == ["1", "2", "3"]
    assert len({p["controller.quorum.voters"] for p in props}) == 1, "one quorum"
    assert props[0]["controller.quorum.voters"].count("@") == 3, "every node votes"
    assert len({n.cluster_id for n in cluster.nodes}) == 1 and cluster.nodes[0].cluster_id
    ports = [n.port for n in cluster.nodes] + [n.controller_port for n in cluster.nodes]
    assert len(set(ports)) == 6, "six distinct loopback ports"
    assert cluster.bootstrap == ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes)
    for p in props:
        assert p["process.roles"] == "broker,controller"
        for key in ("default.replication.factor", "offsets.topic.replication.factor",
                    "transaction.state.log.replication.factor"):
            assert p[key] == "3", key
        assert p["min.insync.replicas"] == "2" and p["transaction.state.log.min.isr"] == "2"
        assert p["unclean.leader.election.enable"] == "false", "a lagging replica never becomes leader"


def test_a_lone_node_keeps_one_copy(tmp_path: Path) -> None:
    props = _props(LocalKafka(tmp_path, port=1234, controller_port=1235))
    assert props["controller.quorum.voters"] == "1@127.0.0.1:1235"
    assert props["offsets.topic.replication.factor"] == "1" and props["min.insync.replicas"] == "1"
