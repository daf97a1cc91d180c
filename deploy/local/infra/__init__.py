"""Run a real single-node Apache Cassandra and Apache Kafka on loopback, without Docker.

Both engines are fetched from Maven Central with Maven (cached in ``~/.m2`` and
copied once into the state directory) and run as plain background JVMs:

* Cassandra 5.0.x from ``org.apache.cassandra:cassandra-all`` and its dependencies
  (``org.apache.cassandra.service.CassandraDaemon``);
* Kafka 4.1.x from ``org.apache.kafka:kafka_2.13`` and its dependencies, in KRaft
  combined mode (``process.roles=broker,controller``), formatted once with
  ``kafka.tools.StorageTool``.

The package is stdlib-only and is both a library and a CLI::

    python3 deploy/local/infra fetch|up [--fresh]|down|status|versions|logs|env|nodetool
    python3 -m deploy.local.infra ...    # the same, from the repository root

Library use (e.g. from a pytest fixture; ``make venv`` installs ``deploy.local``)::

    from deploy.local.infra import LocalInfra, InfraUnavailable
    infra = LocalInfra()
    infra.check_prerequisites()      # raises InfraUnavailable -> skip
    infra.start()                    # idempotent; reuses running engines
    infra.cassandra_contact          # "127.0.0.1:9042"
    infra.kafka_bootstrap            # "127.0.0.1:9092"
    infra.stop_kafka(); infra.start_kafka()   # broker outage; data survives
    infra.stop()

Readiness is checked over the real wire protocols: a CQL v4 OPTIONS/STARTUP/QUERY
exchange (``SELECT release_version FROM system.local``) for Cassandra, and
ApiVersions + Metadata (at least one live broker) for Kafka.

Environment variables (all optional):

``FANLINE_INFRA_DIR``               state directory (default ``<repo>/.infra``)
``FANLINE_CASSANDRA_VERSION``       default ``5.0.9``
``FANLINE_KAFKA_VERSION``           default ``4.1.1``
``FANLINE_CASSANDRA_PORT``          CQL native port, default 9042
``FANLINE_CASSANDRA_STORAGE_PORT``  inter-node port, default 7000
``FANLINE_CASSANDRA_JMX_PORT``      local JMX (nodetool) port, default 7199; 0 disables
``FANLINE_KAFKA_PORT``              PLAINTEXT broker port, default 9092
``FANLINE_KAFKA_CONTROLLER_PORT``   KRaft controller port, default 9093
``FANLINE_CASSANDRA_HEAP``          default ``1G``
``FANLINE_KAFKA_HEAP``              default ``512M``
``FANLINE_CASSANDRA_START_TIMEOUT`` seconds, default 240
``FANLINE_KAFKA_START_TIMEOUT``     seconds, default 120
``FANLINE_JAVA``                    java executable (default ``$JAVA_HOME/bin/java`` or ``java``)
``FANLINE_MVN``                     mvn executable (default ``mvn``)
``FANLINE_CASSANDRA_STRESS_JAR``    path to a ``stress.jar`` (cassandra-stress is not on Maven Central)

One concern per module: ``errors``, ``config`` (``InfraConfig``), ``files``
(templates, JVM options, log tails), ``probes`` (wire protocols), ``process``
(``/proc`` and signals), ``engine`` (Maven fetch and process lifecycle of one
JVM), ``cassandra`` and ``kafka`` (the two engines), ``launcher``
(``LocalInfra``), ``tools`` (its nodetool and cassandra-stress command
lines), ``cli`` and ``__main__`` (the command line).
"""

from __future__ import annotations

from .config import InfraConfig
from .errors import EngineStartError, InfraError, InfraUnavailable
from .launcher import LocalInfra
from .probes import cql_release_version, kafka_live_brokers

__all__ = [
    "EngineStartError",
    "InfraConfig",
    "InfraError",
    "InfraUnavailable",
    "LocalInfra",
    "cql_release_version",
    "kafka_live_brokers",
]
