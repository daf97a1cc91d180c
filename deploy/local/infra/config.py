"""The launcher's settings: fixed addresses, engine versions and main classes,
and ``InfraConfig`` resolved once from the ``FANLINE_*`` environment
(``InfraConfig.from_env``; a malformed integer raises ``InfraError``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from .errors import InfraError

# deploy/local: the engines' templates (cassandra/, kafka/) live beside this package.
HERE = Path(__file__).resolve().parent.parent
REPO_ROOT = HERE.parent.parent
HOST = "127.0.0.1"
# A cluster's node ``i`` (1-based) listens on 127.0.0.<CLUSTER_HOST_BASE + i>: Linux
# routes all of 127/8 to lo, so these aliases need no setup, and a cluster never
# shares an address with the single-node engines (which bind 127.0.0.1 only).
CLUSTER_HOST_BASE = 10
# Single node vs. cluster defaults: the cluster uses other ports *as well as* other
# addresses, so it can run beside the single-node pair (local JMX always binds
# 127.0.0.1, so JMX ports must differ per node anyway: base + node index).
SINGLE_DEFAULTS: dict[str, int | str] = {
    "cql": 9042,
    "storage": 7000,
    "jmx": 7199,
    "kafka": 9092,
    "controller": 9093,
    "cassandra_heap": "1G",
    "kafka_heap": "512M",
    "timer_slack_us": 500,
    "state": ".infra",
}
CLUSTER_DEFAULTS: dict[str, int | str] = {
    "cql": 9142,
    "storage": 7100,
    "jmx": 7310,
    "kafka": 9192,
    "controller": 9193,
    "cassandra_heap": "512M",
    "kafka_heap": "256M",
    # Not on the cluster: with the slack, a node-down LWT race there (test_cluster's
    # test_lwt_rules_hold_with_a_node_down) lost its one 201 twice in a row; without,
    # it held. Not understood yet, so the cluster keeps the kernel's default.
    "timer_slack_us": 0,
    "state": ".infra-cluster",
}
# The secure single-node pair (SECURE=1: TLS with client certificates, SASL
# SCRAM-SHA-512, PasswordAuthenticator): other ports and state again, so it
# runs beside the plain pair (and smaller, since it usually does).
SECURE_DEFAULTS: dict[str, int | str] = {
    "cql": 9242,
    "storage": 7200,
    "jmx": 7299,
    "kafka": 9292,
    "controller": 9293,
    "cassandra_heap": "512M",
    "kafka_heap": "256M",
    "timer_slack_us": 500,
    "state": ".infra-secure",
}

DEFAULT_CASSANDRA_VERSION = "5.0.9"
DEFAULT_KAFKA_VERSION = "4.1.1"
DEFAULT_LOG4J_VERSION = "2.24.3"

CASSANDRA_MAIN = "org.apache.cassandra.service.CassandraDaemon"
KAFKA_MAIN = "kafka.Kafka"
KAFKA_STORAGE_TOOL = "kafka.tools.StorageTool"
NODETOOL_MAIN = "org.apache.cassandra.tools.NodeTool"
STRESS_MAIN = "org.apache.cassandra.stress.Stress"

LOG_TAIL_LINES = 40
_FETCH_MARKER = ".fetch-complete"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise InfraError(f"{name}={raw!r} is not an integer") from exc


def _env_str(name: str, default: str) -> str:
    raw = os.environ.get(name, "").strip()
    return raw or default


@dataclasses.dataclass(frozen=True)
class InfraConfig:
    """Everything that parameterises the local engines; see :meth:`from_env`."""

    state_dir: Path
    #: 1: the single-node pair on 127.0.0.1; 3 (or more): that many Cassandra nodes
    #: and Kafka brokers (KRaft, every broker also a controller voter) on 127.0.0.11...
    nodes: int = 1
    #: TLS (client certificates required), SASL SCRAM-SHA-512 and PasswordAuthenticator
    #: (``FANLINE_INFRA_SECURE=1``, ``make infra-up SECURE=1``; a single node of each)
    secure: bool = False
    cassandra_version: str = DEFAULT_CASSANDRA_VERSION
    kafka_version: str = DEFAULT_KAFKA_VERSION
    log4j_version: str = DEFAULT_LOG4J_VERSION
    cassandra_port: int = 9042
    cassandra_storage_port: int = 7000
    cassandra_jmx_port: int = 7199
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    cassandra_heap: str = "1G"
    kafka_heap: str = "512M"
    #: The Linux timer slack of the Cassandra JVM's threads, in microseconds (0: the
    #: kernel's default, 50). See ``engine.timer_slack`` for why it matters here.
    cassandra_timer_slack_us: int = 500
    cassandra_start_timeout: float = 240.0
    kafka_start_timeout: float = 120.0
    stop_timeout: float = 60.0
    fetch_timeout: float = 1800.0
    java: str = "java"
    mvn: str = "mvn"

    @classmethod
    def from_env(cls, **overrides: object) -> InfraConfig:
        """Build a config from ``FANLINE_*`` environment variables; keyword args win."""
        state = os.environ.get("FANLINE_INFRA_DIR", "").strip()
        java_home = os.environ.get("JAVA_HOME", "").strip()
        default_java = str(Path(java_home) / "bin" / "java") if java_home else "java"
        nodes = int(str(overrides.get("nodes", _env_int("FANLINE_INFRA_NODES", 1))))
        if nodes < 1:
            raise InfraError(f"FANLINE_INFRA_NODES={nodes} must be at least 1")
        secure = bool(overrides.get("secure", _env_int("FANLINE_INFRA_SECURE", 0)))
        if secure and nodes > 1:
            raise InfraError("FANLINE_INFRA_SECURE=1 (SECURE=1) runs a single node of each engine, not a cluster")
        d = SECURE_DEFAULTS if secure else SINGLE_DEFAULTS if nodes == 1 else CLUSTER_DEFAULTS
        values: dict[str, object] = dict(
            state_dir=Path(state).expanduser().resolve() if state else REPO_ROOT / str(d["state"]),
            nodes=nodes,
            secure=secure,
            cassandra_version=_env_str("FANLINE_CASSANDRA_VERSION", DEFAULT_CASSANDRA_VERSION),
            kafka_version=_env_str("FANLINE_KAFKA_VERSION", DEFAULT_KAFKA_VERSION),
            log4j_version=_env_str("FANLINE_LOG4J_VERSION", DEFAULT_LOG4J_VERSION),
            cassandra_port=_env_int("FANLINE_CASSANDRA_PORT", int(d["cql"])),
            cassandra_storage_port=_env_int("FANLINE_CASSANDRA_STORAGE_PORT", int(d["storage"])),
            cassandra_jmx_port=_env_int("FANLINE_CASSANDRA_JMX_PORT", int(d["jmx"])),
            kafka_port=_env_int("FANLINE_KAFKA_PORT", int(d["kafka"])),
            kafka_controller_port=_env_int("FANLINE_KAFKA_CONTROLLER_PORT", int(d["controller"])),
            cassandra_heap=_env_str("FANLINE_CASSANDRA_HEAP", str(d["cassandra_heap"])),
            kafka_heap=_env_str("FANLINE_KAFKA_HEAP", str(d["kafka_heap"])),
            cassandra_timer_slack_us=_env_int("FANLINE_CASSANDRA_TIMER_SLACK_US", int(d["timer_slack_us"])),
            cassandra_start_timeout=float(_env_int("FANLINE_CASSANDRA_START_TIMEOUT", 240)),
            kafka_start_timeout=float(_env_int("FANLINE_KAFKA_START_TIMEOUT", 120)),
            java=_env_str("FANLINE_JAVA", default_java),
            mvn=_env_str("FANLINE_MVN", "mvn"),
        )
        values.update(overrides)
        if isinstance(values["state_dir"], str):
            values["state_dir"] = Path(str(values["state_dir"])).expanduser().resolve()
        return cls(**values)  # type: ignore[arg-type]

    @property
    def clustered(self) -> bool:
        return self.nodes > 1

    def host(self, node: int) -> str:
        """Address of node ``node`` (1-based); 0 is the single-node engine on 127.0.0.1."""
        return HOST if node == 0 else f"127.0.0.{CLUSTER_HOST_BASE + node}"

    def jmx_port(self, node: int) -> int:
        """Local JMX port of Cassandra node ``node`` (distinct: local JMX binds 127.0.0.1)."""
        if not self.cassandra_jmx_port:
            return 0
        return self.cassandra_jmx_port + node
