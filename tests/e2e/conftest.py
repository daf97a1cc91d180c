"""End-to-end fixtures: the whole system as processes, on both backends.

``system`` is parametrized: ``embedded`` (SQLite + the tansu broker, exactly
what ``make run`` starts) and ``real`` (real Cassandra + Kafka from
deploy/local/infra). Each backend's system is started once per session;
tests use fresh usernames so they never see each other's data. Fault tests
(killing the worker, stopping the broker) start their own ``System``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.local.system import System

from .client import Api

REPO = Path(__file__).resolve().parents[2]

ARTIFACTS = REPO / "test-artifacts"
# Shifts every port the e2e systems use, so two test runs can share a machine.
PORT_OFFSET = int(os.environ.get("FANLINE_TEST_PORT_OFFSET", "0"))
# Cheap argon2 parameters for tests (still argon2id); production uses defaults.
FAST_ENV = {
    "FANLINE_ARGON2_TIME_COST": "1",
    "FANLINE_ARGON2_MEMORY_KIB": "8192",
    "FANLINE_ARGON2_PARALLELISM": "1",
    "FANLINE_RELAY_STALE_AFTER_MS": "1500",
    "FANLINE_RELAY_INTERVAL_S": "0.5",
    "FANLINE_LOG_LEVEL": "INFO",
    # Small pages and slices, so fan-outs of a few dozen followers already
    # go through the chunks topic (tests/e2e/test_fanout_slices.py).
    "FANLINE_FANOUT_PAGE_SIZE": "5",
    "FANLINE_FANOUT_CHUNK": "10",
    # Live streams: a heartbeat every second, so tests see one quickly.
    "FANLINE_STREAM_HEARTBEAT_S": "1",
    # Abuse limits stay on (every response carries the headers) but far above
    # what the suite sends from one address; test_abuse.py sets small ones.
    "FANLINE_RATE_LIMIT_PER_USER": "1000000 per minute",
    "FANLINE_RATE_LIMIT_PER_ADDRESS": "1000000 per minute",
    "FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_ADDRESS": "1000000 per minute",
    "FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_USERNAME": "1000000 per minute",
}


# The small thresholds of the new api.md section ("Large accounts, inactive
# users, bounded storage"): authors with 3 followers are merged at read time
# and home timelines keep 10 stored rows, so every rule is exercised by small
# tests. The whole ``system`` suite also runs with them (the "-small" params).
SMALL_ENV = {
    "FANLINE_LARGE_ACCOUNT_FOLLOWERS": "3",
    "FANLINE_HOME_MAX_ROWS": "10",
}


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def real_env(infra: Any, tag: str) -> dict[str, str]:
    """Settings that isolate one real-engine system: its own keyspaces,
    topics and consumer group on the shared engines."""
    host, port = infra.cassandra_contact.rsplit(":", 1)
    # (a cluster's extra settings -- every host, RF 3 -- come in as ``extra``)
    return {
        **FAST_ENV,
        "FANLINE_CASSANDRA_HOSTS": host,
        "FANLINE_CASSANDRA_PORT": port,
        "FANLINE_KEYSPACE_PREFIX": f"e2e_{tag}",
        "FANLINE_EVENTS_TOPIC": f"e2e.{tag}.events",
        "FANLINE_DLQ_TOPIC": f"e2e.{tag}.dlq",
        "FANLINE_WORKER_GROUP": f"e2e-{tag}",
        "FANLINE_KAFKA_IDEMPOTENCE": "true",
    }


def make_system(kind: str, base_port: int, tmp: Path, infra: Any = None, **extra: str) -> System:
    tag = uuid.uuid4().hex[:8]
    base_port += PORT_OFFSET
    logs = ARTIFACTS / "logs" / f"{kind}-{base_port}-{tag}"
    if kind == "embedded":
        return System(data_dir=tmp / f"data-{tag}", base_port=base_port, extra_env={**FAST_ENV, **extra}, log_dir=logs)
    return System(
        data_dir=tmp / f"data-{tag}",
        base_port=base_port,
        backend="cassandra",
        kafka_bootstrap=infra.kafka_bootstrap,
        extra_env={**real_env(infra, tag), **extra},
        log_dir=logs,
    )


def running(
    kind: str, base_port: int, tmp_path_factory: pytest.TempPathFactory, infra: Any = None, **extra: str
) -> Iterator[System]:
    """A started system of ``kind`` for a session fixture to yield from."""
    system = make_system(kind, base_port, tmp_path_factory.mktemp(kind), infra, **extra)
    system.start(timeout=180 if kind == "real" else 90)
    yield system
    system.stop()


@pytest.fixture(scope="session")
def embedded_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    yield from running("embedded", 18000, tmp_path_factory)


@pytest.fixture(scope="session")
def real_system(real_infra: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    yield from running("real", 28000, tmp_path_factory, real_infra)


@pytest.fixture(scope="session")
def embedded_small_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    yield from running("embedded", 18100, tmp_path_factory, **SMALL_ENV)


@pytest.fixture(scope="session")
def real_small_system(real_infra: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    yield from running("real", 28100, tmp_path_factory, real_infra, **SMALL_ENV)


@pytest.fixture(
    params=[
        "embedded",
        pytest.param("real", marks=pytest.mark.real_infra),
        "embedded-small",
        pytest.param("real-small", marks=pytest.mark.real_infra),
    ]
)
def system(request: pytest.FixtureRequest) -> System:
    return request.getfixturevalue(f"{request.param.replace('-', '_')}_system")  # type: ignore[no-any-return]


@pytest.fixture(params=["embedded", pytest.param("real", marks=pytest.mark.real_infra)])
def masto_system(request: pytest.FixtureRequest) -> System:
    """The Mastodon-compatible API's tests: the session's embedded and real
    systems above (no system of their own; the -small ones are left out to
    keep the real-engine part short)."""
    return request.getfixturevalue(f"{request.param}_system")  # type: ignore[no-any-return]


# Users idle for 3 s are inactive (skipped by fan-out, regenerated on return).
INACTIVE_ENV = {**SMALL_ENV, "FANLINE_INACTIVE_AFTER_S": "3"}


@pytest.fixture(scope="session")
def embedded_inactive_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    yield from running("embedded", 18200, tmp_path_factory, **INACTIVE_ENV)


@pytest.fixture(scope="session")
def real_inactive_system(real_infra: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    yield from running("real", 28200, tmp_path_factory, real_infra, **INACTIVE_ENV)


@pytest.fixture(params=["embedded", pytest.param("real", marks=pytest.mark.real_infra)])
def inactive_system(request: pytest.FixtureRequest) -> System:
    """A system where users are inactive after 3 s (``INACTIVE_ENV``)."""
    return request.getfixturevalue(f"{request.param}_inactive_system")  # type: ignore[no-any-return]


@pytest.fixture(params=["embedded-small", pytest.param("real-small", marks=pytest.mark.real_infra)])
def small_system(request: pytest.FixtureRequest) -> System:
    """A system with the small thresholds of ``SMALL_ENV``."""
    return request.getfixturevalue(f"{request.param.replace('-', '_')}_system")  # type: ignore[no-any-return]


@pytest.fixture
def small_api(small_system: System) -> Iterator[Api]:
    client = Api(small_system.url())
    yield client
    client.close()


@pytest.fixture
def api(system: System) -> Iterator[Api]:
    client = Api(system.url())
    yield client
    client.close()


@pytest.fixture
def kafka_control(real_infra: Any) -> Any:
    """Stop and start the real Kafka (its data survives) to simulate an outage."""
    if real_infra.control is None:
        pytest.fail("Kafka is external (FANLINE_TEST_KAFKA): this test needs to stop and start it")
    return real_infra.control


# --- the three-node cluster (tests/e2e/test_cluster.py) ------------------------------


@dataclass(frozen=True)
class ClusterInfra:
    """The cluster's launcher and the addresses ``make_system`` reads."""

    control: Any  # deploy/local/infra LocalInfra with nodes=3
    cassandra_contact: str
    kafka_bootstrap: str


@pytest.fixture(scope="session")
def cluster_infra() -> Iterator[ClusterInfra]:
    """Three Cassandra nodes and three Kafka brokers on 127.0.0.11-13 (state in
    ``FANLINE_CLUSTER_INFRA_DIR``, default ``<repo>/.infra-cluster``), started
    once per session and stopped at its end unless ``FANLINE_KEEP_INFRA=1`` or
    they were already running. Skipped like ``real_infra`` unless
    ``REQUIRE_REAL_INFRA=1``. Never touches the single-node engines."""
    from deploy.local import infra as module

    state = os.environ.get("FANLINE_CLUSTER_INFRA_DIR", "").strip() or str(REPO / ".infra-cluster")
    # Node restarts under load on two shared cores took up to ~140 s (a broker
    # reloading every test session's partitions): more room than a cold start needs.
    restart_s = {
        k: float(os.environ.get(f"FANLINE_{k.split('_')[0].upper()}_START_TIMEOUT", 300))
        for k in ("cassandra_start_timeout", "kafka_start_timeout")
    }
    local = module.LocalInfra(module.InfraConfig.from_env(nodes=3, state_dir=state, **restart_s))
    try:
        local.check_prerequisites()
    except module.InfraUnavailable as exc:
        if _flag("REQUIRE_REAL_INFRA"):
            raise
        pytest.skip(f"real infrastructure unavailable (set REQUIRE_REAL_INFRA=1 to make this an error): {exc}")
    already = local.is_running()
    local.start()
    try:
        yield ClusterInfra(local, local.cassandra_contact, local.kafka_bootstrap)
    finally:
        if not already and not _flag("FANLINE_KEEP_INFRA"):
            local.stop()


def cluster_env(infra: ClusterInfra) -> dict[str, str]:
    """Settings pointing a system at every node, with replication factor 3."""
    return dict(infra.control.settings_env())


@pytest.fixture(scope="session")
def cluster_system(cluster_infra: ClusterInfra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    system = make_system("real", 29000, tmp_path_factory.mktemp("cluster"), cluster_infra, **cluster_env(cluster_infra))
    system.start(timeout=240)
    yield system
    system.stop()


# --- the single-node fault-injection suite (tests/e2e/test_fault_*.py) ----------------

#: Each way, between the services of ``slow_system`` and Cassandra.
SLOW_DELAY_MS = 20.0


@pytest.fixture(scope="session")
def fault_system(real_infra: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """A real-engine system the fault tests share: each test restores what
    it broke (restarts what it killed), the next one checks it works."""
    yield from running("real", 23000, tmp_path_factory, real_infra)


@pytest.fixture(scope="session")
def slow_system(real_infra: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """A real-engine system whose services reach Cassandra through a TCP proxy
    adding ``SLOW_DELAY_MS`` each way (``bench/latency_proxy.py``), writing
    fan-outs one row per request, one page at a time: a fan-out to a few dozen
    followers takes a second or two, so a crash lands in its middle (and the
    latency fault is measured on it)."""
    from .faultkit import latency_proxy

    port = 23090 + PORT_OFFSET
    with latency_proxy(port, real_infra.cassandra_contact, SLOW_DELAY_MS):
        yield from running(
            "real",
            23100,
            tmp_path_factory,
            real_infra,
            FANLINE_CASSANDRA_HOSTS="127.0.0.1",
            FANLINE_CASSANDRA_PORT=str(port),
            FANLINE_FANOUT_PAGES_IN_FLIGHT="1",
            FANLINE_HOME_WRITE_BATCH_ROWS="1",
            FANLINE_HOME_WRITE_WINDOW="1",
            # One worker: a restarted one need not wait the usual
            # 5 s for its killed predecessor to miss the rebalance.
            FANLINE_WORKER_REBALANCE_TIMEOUT_S="1",
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from .cluster import SURVIVED, table
    from .faultkit import ROWS, TABLE_FILE
    from .faultkit import table as fault_table

    if SURVIVED:
        terminalreporter.section("three-node cluster: what was survived")
        for line in table(SURVIVED).splitlines():
            terminalreporter.write_line(line)
    if ROWS:
        terminalreporter.section(f"fault injection, single node (also in {TABLE_FILE.relative_to(REPO)})")
        for line in fault_table(ROWS).splitlines():
            terminalreporter.write_line(line)
