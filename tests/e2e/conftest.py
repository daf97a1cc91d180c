"""End-to-end fixtures: the whole system as processes, on both backends.

``system`` is parametrized: ``embedded`` (SQLite + the tansu broker, exactly
what ``make run`` starts) and ``real`` (real Cassandra + Kafka from
deploy/local/infra.py). Each backend's system is started once per session;
tests use fresh usernames so they never see each other's data. Fault tests
(killing the worker, stopping the broker) start their own ``System``.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .client import Api

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "deploy" / "local"))

from system import System  # noqa: E402

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
    # Abuse limits stay on (every response carries the headers) but far above
    # what the suite sends from one address; test_abuse.py sets small ones.
    "FANLINE_RATE_LIMIT_PER_USER": "1000000 per minute",
    "FANLINE_RATE_LIMIT_PER_ADDRESS": "1000000 per minute",
    "FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_ADDRESS": "1000000 per minute",
    "FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_USERNAME": "1000000 per minute",
}


def real_env(infra: Any, tag: str) -> dict[str, str]:
    """Settings that isolate one real-engine system: its own keyspaces,
    topics and consumer group on the shared engines."""
    host, port = infra.cassandra_contact.rsplit(":", 1)
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
        return System(data_dir=tmp / f"data-{tag}", base_port=base_port,
                      extra_env={**FAST_ENV, **extra}, log_dir=logs)
    return System(data_dir=tmp / f"data-{tag}", base_port=base_port, backend="cassandra",
                  kafka_bootstrap=infra.kafka_bootstrap, extra_env={**real_env(infra, tag), **extra},
                  log_dir=logs)


@pytest.fixture(scope="session")
def embedded_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    system = make_system("embedded", 18000, tmp_path_factory.mktemp("embedded"))
    system.start()
    yield system
    system.stop()


@pytest.fixture(scope="session")
def real_system(real_infra: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    system = make_system("real", 28000, tmp_path_factory.mktemp("real"), real_infra)
    system.start(timeout=180)
    yield system
    system.stop()


@pytest.fixture(params=["embedded", pytest.param("real", marks=pytest.mark.real_infra)])
def system(request: pytest.FixtureRequest) -> System:
    return request.getfixturevalue(f"{request.param}_system")  # type: ignore[no-any-return]


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
