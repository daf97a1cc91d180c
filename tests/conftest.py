"""Fixtures shared by every test directory.

Real infrastructure
-------------------
``real_infra`` (session scope) gives tests a real Apache Cassandra and Apache
Kafka, started once per session through ``deploy/local/infra`` (Maven
Central artifacts, no Docker). Tests that use it carry the ``real_infra``
marker, so ``-m "not real_infra"`` deselects them.

* ``REQUIRE_REAL_INFRA=1``: any failure to provide the engines is a test
  ERROR, never a skip (CI sets this).
* otherwise, missing prerequisites (java 17, mvn when nothing is cached yet)
  skip those tests with the reason; a failed start is still an error.
* ``FANLINE_TEST_CASSANDRA=host:port`` / ``FANLINE_TEST_KAFKA=host:port``: use
  that running engine instead of starting one.
* At session end the engines this session started are stopped, unless
  ``FANLINE_KEEP_INFRA=1``; engines that were already running are left alone
  (someone else may be using them).

When used, the terminal summary shows exactly one line
``real infrastructure: cassandra <version>, kafka <version>``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

_MARKERS = (
    "real_infra: needs the real Cassandra and Kafka started by deploy/local/infra",
    "e2e: runs the whole system as processes",
    "slow: takes more than a few seconds",
    "fault: injects a fault (a crash, a stalled engine); `pytest -m fault` runs them alone",
    "soak: long steady load (FANLINE_SOAK_S, default 600 s); part of the default run, `-m 'not soak'` skips it",
    "cluster: needs the three-node Cassandra + Kafka cluster (deploy/local/infra, nodes=3); node-loss tests",
)


@dataclass(frozen=True)
class RealInfra:
    """Addresses and versions of the engines a test session uses."""

    cassandra_contact: str  # "host:port"
    kafka_bootstrap: str  # "host:port"
    cassandra_version: str
    kafka_version: str
    # The launcher (deploy/local/infra LocalInfra), for tests that stop and
    # start an engine (e.g. a Kafka outage). None when the engines are external.
    control: Any = None

    @property
    def cassandra_host(self) -> str:
        return self.cassandra_contact.rsplit(":", 1)[0]

    @property
    def cassandra_port(self) -> int:
        return int(self.cassandra_contact.rsplit(":", 1)[1])


_USED: dict[str, RealInfra] = {}


def pytest_configure(config: pytest.Config) -> None:
    for marker in _MARKERS:
        config.addinivalue_line("markers", marker)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    infra = _USED.get("infra")
    if infra is not None:
        terminalreporter.write_line(f"real infrastructure: cassandra {infra.cassandra_version}, kafka {infra.kafka_version}")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _load_infra_module() -> Any:
    from deploy.local import infra  # stdlib only

    return infra


@pytest.fixture(scope="session")
def real_infra() -> Iterator[RealInfra]:
    """Real Cassandra + Kafka for this session (see the module docstring)."""
    required = _flag("REQUIRE_REAL_INFRA")
    cassandra_env = os.environ.get("FANLINE_TEST_CASSANDRA", "").strip()
    kafka_env = os.environ.get("FANLINE_TEST_KAFKA", "").strip()
    try:
        module = _load_infra_module()
    except ImportError as exc:
        if required:
            raise
        pytest.skip(f"deploy/local/infra cannot be imported: {exc}")

    local = module.LocalInfra()
    started: list[str] = []
    if not (cassandra_env and kafka_env):
        try:
            local.check_prerequisites()
        except module.InfraUnavailable as exc:
            if required:
                raise
            pytest.skip(f"real infrastructure unavailable (set REQUIRE_REAL_INFRA=1 to make this an error): {exc}")
        status = local.status()
        wanted = [name for name, env in (("cassandra", cassandra_env), ("kafka", kafka_env)) if not env]
        for name in wanted:
            if not status.get(name, {}).get("running"):
                started.append(name)
        if wanted == ["cassandra", "kafka"]:
            local.start()
        elif wanted == ["cassandra"]:
            local.start_cassandra()
        else:
            local.start_kafka()

    cassandra = cassandra_env or local.cassandra_contact
    kafka = kafka_env or local.kafka_bootstrap
    versions = local.versions()
    cassandra_version = versions.get("cassandra", "?")
    if cassandra_env:
        host, port = cassandra_env.rsplit(":", 1)
        try:
            cassandra_version = module.cql_release_version(host, int(port))
        except Exception as exc:
            if required:
                raise
            pytest.fail(f"FANLINE_TEST_CASSANDRA={cassandra_env} does not answer: {exc}")
    infra = RealInfra(cassandra, kafka, cassandra_version, versions.get("kafka", "?"), control=None if kafka_env else local)
    _USED["infra"] = infra
    try:
        yield infra
    finally:
        if started and not _flag("FANLINE_KEEP_INFRA"):
            if started == ["cassandra", "kafka"]:
                local.stop()
            elif started == ["cassandra"]:
                local.stop_cassandra()
            else:
                local.stop_kafka()
