"""The launcher's three-node cluster configuration (deploy/local/infra,
``nodes=3``) and the topic settings a cluster needs, without starting any
engine: addresses and ports never collide with the single-node pair, each
node's rendered Cassandra and Kafka configuration forms one cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.local.infra import InfraConfig, LocalInfra
from fanline_shared.kafka import topic_configs

REPO = Path(__file__).resolve().parents[2]

FANLINE_PORT_VARS = (
    "FANLINE_CASSANDRA_PORT",
    "FANLINE_CASSANDRA_STORAGE_PORT",
    "FANLINE_CASSANDRA_JMX_PORT",
    "FANLINE_KAFKA_PORT",
    "FANLINE_KAFKA_CONTROLLER_PORT",
    "FANLINE_INFRA_DIR",
    "FANLINE_INFRA_NODES",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FANLINE_PORT_VARS:
        monkeypatch.delenv(name, raising=False)


def cluster(tmp_path: Path) -> LocalInfra:
    return LocalInfra(InfraConfig.from_env(nodes=3, state_dir=tmp_path), log=lambda _: None)


def test_cluster_uses_other_addresses_ports_and_state_than_the_single_node(tmp_path: Path) -> None:
    single = LocalInfra(InfraConfig.from_env(), log=lambda _: None)
    infra = cluster(tmp_path)
    assert single.cassandra_hosts == "127.0.0.1" and single.kafka_bootstrap == "127.0.0.1:9092"
    assert infra.cassandra_hosts == "127.0.0.11,127.0.0.12,127.0.0.13"
    assert infra.kafka_bootstrap == "127.0.0.11:9192,127.0.0.12:9192,127.0.0.13:9192"
    single_ports = {p for e in single._engines() for p in e.ports().values()}
    cluster_ports = [p for e in infra._engines() for p in e.ports().values()]
    assert not single_ports & set(cluster_ports)
    # local JMX binds 127.0.0.1 on every node: those ports must differ between nodes
    assert [c.ports()["JMX"] for c in infra.cassandra_nodes] == [7311, 7312, 7313]
    assert InfraConfig.from_env(nodes=3).state_dir == REPO / ".infra-cluster"
    assert single.config.state_dir == REPO / ".infra"
    assert {e.name for e in infra._engines()} == {"cassandra1", "cassandra2", "cassandra3", "kafka1", "kafka2", "kafka3"}
    # one copy of the jars per engine kind
    assert len({e.lib_dir for e in infra.cassandra_nodes}) == 1


def test_cluster_settings_env_points_services_at_every_node_with_rf3(tmp_path: Path) -> None:
    env = cluster(tmp_path).settings_env()
    assert env["FANLINE_CASSANDRA_HOSTS"] == "127.0.0.11,127.0.0.12,127.0.0.13"
    assert env["FANLINE_CASSANDRA_PORT"] == "9142"
    assert env["FANLINE_CASSANDRA_RF"] == env["FANLINE_TOPIC_RF"] == "3"
    assert "FANLINE_CASSANDRA_RF" not in LocalInfra(InfraConfig.from_env(), log=lambda _: None).settings_env()


def test_cassandra_nodes_form_one_ring(tmp_path: Path) -> None:
    yamls = [c.config_text() for c in cluster(tmp_path).cassandra_nodes]
    tokens = [int(next(line.split(":")[1] for line in y.splitlines() if line.startswith("initial_token:"))) for y in yamls]
    assert tokens == [-(2**63), -(2**63) + 2**64 // 3, -(2**63) + 2 * (2**64 // 3)]
    for i, y in enumerate(yamls, start=1):
        assert "cluster_name: 'Fanline Local Cluster'" in y
        assert 'seeds: "127.0.0.11:7100,127.0.0.12:7100,127.0.0.13:7100"' in y
        assert f"listen_address: 127.0.0.1{i}" in y and f"rpc_address: 127.0.0.1{i}" in y
        assert "hinted_handoff_enabled: true" in y
    single = LocalInfra(InfraConfig.from_env(state_dir=tmp_path / "one"), log=lambda _: None).cassandra.config_text()
    assert "cluster_name: 'Fanline Local'" in single and "initial_token: 0" in single
    assert "listen_address: 127.0.0.1\n" in single and "hinted_handoff_enabled: false" in single


def test_cluster_nodes_pull_a_missed_schema_within_seconds(tmp_path: Path) -> None:
    # A node that missed a schema push otherwise pulls it only a minute after
    # it notices, and retries a minute later: longer than a service's
    # agreement wait at start (a CI run on 2026-12-07 failed so).
    wanted = {"-Dcassandra.migration_delay_ms=1000", "-Dcassandra.schema_pull_interval_ms=5000"}
    for node in cluster(tmp_path).cassandra_nodes:
        assert wanted <= set(node.command())
    single = LocalInfra(InfraConfig.from_env(state_dir=tmp_path / "one"), log=lambda _: None).cassandra.command()
    assert not wanted & set(single)


def test_kafka_brokers_form_one_quorum_with_rf3_and_min_isr2(tmp_path: Path) -> None:
    props = [k.config_text() for k in cluster(tmp_path).kafka_nodes]
    voters = "controller.quorum.voters=1@127.0.0.11:9193,2@127.0.0.12:9193,3@127.0.0.13:9193"
    for i, p in enumerate(props, start=1):
        lines = set(p.splitlines())
        assert f"node.id={i}" in lines and voters in lines
        assert f"listeners=PLAINTEXT://127.0.0.1{i}:9192,CONTROLLER://127.0.0.1{i}:9193" in lines
        assert {
            "default.replication.factor=3",
            "min.insync.replicas=2",
            "offsets.topic.replication.factor=3",
            "unclean.leader.election.enable=false",
        } <= lines


def test_topics_get_min_insync_replicas_one_below_their_rf() -> None:
    assert topic_configs(3) == {"min.insync.replicas": "2"}
    assert topic_configs(1) == {}
