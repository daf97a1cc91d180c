"""A schema statement that times out at start-up is tried again
(policies.MIGRATE_STATEMENT), not fatal: seen on the freshly started
three-node cluster in CI, where every service then exited."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from fanline_shared import policies
from fanline_shared.cassandra import migrations
from fanline_shared.errors import Unavailable


def fake_session() -> Any:
    metadata = SimpleNamespace(all_hosts=lambda: [SimpleNamespace(datacenter="dc1")], keyspaces={})
    control = SimpleNamespace(wait_for_schema_agreement=lambda: True)
    return SimpleNamespace(cluster=SimpleNamespace(metadata=metadata, control_connection=control))


async def test_a_timed_out_statement_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policies, "MIGRATE_STATEMENT", replace(policies.MIGRATE_STATEMENT, base_delay_s=0.001, max_delay_s=0.002))
    ran: list[str] = []
    failures = {"CREATE TABLE IF NOT EXISTS ks.t (k int PRIMARY KEY)": 2}

    async def execute(
        session: Any, statement: str, params: Any = None, *, name: str, request_timeout_s: float | None = None
    ) -> list[Any]:
        if failures.get(statement):
            failures[statement] -= 1
            raise Unavailable("cassandra: migrate failed: OperationTimedOut")
        ran.append(statement)
        return []

    async def lease(session: Any, statement: str, params: Any = None, *, name: str) -> tuple[bool, Any]:
        return True, None  # the migration lease: free

    monkeypatch.setattr(migrations, "execute", execute)
    monkeypatch.setattr(migrations, "execute_lwt", lease)
    await migrations.migrate(fake_session(), "ks", 3, ["CREATE TABLE IF NOT EXISTS {keyspace}.t (k int PRIMARY KEY)"])
    assert "CREATE TABLE IF NOT EXISTS ks.t (k int PRIMARY KEY)" in ran
    assert any(s.startswith("INSERT INTO ks.schema_migrations") for s in ran)


async def test_a_retry_waits_for_agreement_and_each_statement_has_the_ddl_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timed-out CREATE may still be applying on its coordinator: the retry
    comes only after the nodes were asked to agree (else another coordinator
    could create the table a second time, under another id)."""
    monkeypatch.setattr(policies, "MIGRATE_STATEMENT", replace(policies.MIGRATE_STATEMENT, base_delay_s=0.001, max_delay_s=0.002))
    log: list[str] = []
    timeouts: set[float | None] = set()
    failures = {"CREATE TABLE IF NOT EXISTS ks.t (k int PRIMARY KEY)": 1}

    async def execute(
        session: Any, statement: str, params: Any = None, *, name: str, request_timeout_s: float | None = None
    ) -> list[Any]:
        if not statement.startswith("SELECT"):
            timeouts.add(request_timeout_s)
        log.append(statement)
        if failures.get(statement):
            failures[statement] -= 1
            raise Unavailable("cassandra: migrate failed: OperationTimedOut")
        return []

    async def lease(session: Any, statement: str, params: Any = None, *, name: str) -> tuple[bool, Any]:
        return True, None

    session = fake_session()
    session.cluster.control_connection.wait_for_schema_agreement = lambda: log.append("agree") or True
    monkeypatch.setattr(migrations, "execute", execute)
    monkeypatch.setattr(migrations, "execute_lwt", lease)
    await migrations.migrate(session, "ks", 3, ["CREATE TABLE IF NOT EXISTS {keyspace}.t (k int PRIMARY KEY)"])
    create = "CREATE TABLE IF NOT EXISTS ks.t (k int PRIMARY KEY)"
    first, second = (i for i, entry in enumerate(log) if entry == create)
    assert "agree" in log[first + 1 : second]
    assert timeouts == {policies.MIGRATE_DDL_TIMEOUT_S}


async def test_it_gives_up_after_the_policys_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        policies, "MIGRATE_STATEMENT", replace(policies.MIGRATE_STATEMENT, attempts=3, base_delay_s=0.001, max_delay_s=0.002)
    )
    calls = 0

    async def execute(
        session: Any, statement: str, params: Any = None, *, name: str, request_timeout_s: float | None = None
    ) -> list[Any]:
        nonlocal calls
        if statement.startswith("SELECT version FROM"):
            return []  # nothing applied yet (asked of the server)
        calls += 1
        raise Unavailable("cassandra: migrate failed: OperationTimedOut")

    monkeypatch.setattr(migrations, "execute", execute)
    with pytest.raises(Unavailable):  # (one migration: with none to apply nothing runs at all)
        await migrations.migrate(fake_session(), "ks", 3, ["CREATE TABLE IF NOT EXISTS {keyspace}.t (k int PRIMARY KEY)"])
    assert calls == 3


def lagging_session(own: dict[str, str], down: tuple[str, ...] = ()) -> Any:
    """The control node's peers view disagrees; each node's own version is ``own``."""
    hosts = [SimpleNamespace(endpoint=name, is_up=name not in down, datacenter="dc1") for name in (*own, *down)]
    asked: list[str] = []

    def execute(statement: str, host: Any, timeout: float) -> Any:
        assert statement == "SELECT schema_version FROM system.local"
        asked.append(host.endpoint)
        return SimpleNamespace(one=lambda: SimpleNamespace(schema_version=own[host.endpoint]))

    metadata = SimpleNamespace(all_hosts=lambda: hosts, keyspaces={})
    control = SimpleNamespace(wait_for_schema_agreement=lambda: False)
    return SimpleNamespace(cluster=SimpleNamespace(metadata=metadata, control_connection=control), execute=execute, asked=asked)


async def test_a_stale_peers_view_is_checked_against_each_nodes_own_version() -> None:
    """CI's fresh cluster: one peer row lagged for minutes while every node
    had applied the same schema; asked directly, they agree."""
    session = lagging_session({"n1": "v2", "n2": "v2", "n3": "v2"}, down=("n4",))
    await migrations._agree(session, "ks")
    assert session.asked == ["n1", "n2", "n3"]  # a node the driver sees down is not asked


async def test_nodes_that_really_disagree_are_no_agreement() -> None:
    with pytest.raises(Unavailable, match="no schema agreement on ks"):
        await migrations._agree(lagging_session({"n1": "v2", "n2": "v1"}), "ks")


async def test_reading_the_applied_versions_outlasts_a_table_not_yet_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store and its fan-out replica migrating together: the replica read
    ``schema_migrations`` just as the store created it, and the node
    answered a server error ("Unknown CF <id>") -- the replica exited at
    start (a benchmark run, 2026-11-29). The read is retried like DDL."""
    monkeypatch.setattr(policies, "MIGRATE_STATEMENT", replace(policies.MIGRATE_STATEMENT, base_delay_s=0.001, max_delay_s=0.002))
    reads = 0

    async def execute(
        session: Any, statement: str, params: Any = None, *, name: str, request_timeout_s: float | None = None
    ) -> list[Any]:
        nonlocal reads
        if statement.startswith("SELECT version FROM ks.schema_migrations"):
            reads += 1
            if reads == 1:
                raise Unavailable("cassandra: migrate failed: NoHostAvailable: Server error: Unknown CF c04dc034")
            return [SimpleNamespace(version=1)]
        return []

    monkeypatch.setattr(migrations, "execute", execute)
    assert await migrations.schema_version(fake_session(), "ks") == 1
    assert reads == 2
