"""Cassandra migrations run once per version, never two at a time
(``fanline_shared.cassandra.migrations``), against real Cassandra.

* Four migrators started together on a fresh keyspace: every migration's
  statements run exactly once, and all four return with the schema at its
  version.
* A service in ``wait`` mode runs no DDL: it returns once a migrator has
  brought the schema to its version, and gives up after its timeout.
* A migrator that died holding the lease holds it no longer than its TTL.

~15 s on one node.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from fanline_shared.cassandra import migrations
from fanline_shared.cassandra.bridge import execute
from fanline_shared.cassandra.connection import close_session, open_session
from fanline_shared.errors import Unavailable

from .support import storage_settings

pytestmark = [pytest.mark.real_infra]

SCRIPTS = (
    "CREATE TABLE IF NOT EXISTS {keyspace}.a (k text PRIMARY KEY, v text);",
    "CREATE TABLE IF NOT EXISTS {keyspace}.b (k text PRIMARY KEY);\nALTER TABLE {keyspace}.b ADD IF NOT EXISTS w int;",
    "CREATE TABLE IF NOT EXISTS {keyspace}.c (k text, c int, PRIMARY KEY (k, c));",
)


@pytest.fixture
async def sessions(real_infra: Any, tmp_path: Any) -> Any:
    settings = storage_settings("cassandra", data_dir=tmp_path, prefix="m", cassandra=real_infra)
    opened = [await open_session(settings) for _ in range(4)]
    keyspace = f"mig_{secrets.token_hex(4)}"
    yield keyspace, opened
    await execute(opened[0], f"DROP KEYSPACE IF EXISTS {keyspace}", name="drop_keyspace")
    for session in opened:
        await close_session(session)


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every schema statement the migrators run, counted."""
    seen: Counter[str] = Counter()
    real = migrations._with_retry

    async def counting(session: Any, statement: str, params: Any = None) -> Any:
        seen[statement.split(" (")[0].strip()] += 1
        return await real(session, statement, params)

    monkeypatch.setattr(migrations, "_with_retry", counting)
    return seen


async def test_concurrent_migrators_apply_each_migration_once(sessions: Any, statements: Counter[str]) -> None:
    keyspace, opened = sessions
    await asyncio.gather(*(migrations.migrate(s, keyspace, 1, SCRIPTS) for s in opened))
    for table in ("a", "b", "c"):
        assert statements[f"CREATE TABLE IF NOT EXISTS {keyspace}.{table}"] == 1, statements
    assert statements[f"ALTER TABLE {keyspace}.b ADD IF NOT EXISTS w int"] == 1
    assert statements[f"INSERT INTO {keyspace}.schema_migrations"] == 3
    for session in opened:
        assert await migrations.schema_version(session, keyspace) == 3
    tables = await execute(
        opened[0], "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,), name="t"
    )
    assert sorted(r.table_name for r in tables) == ["a", "b", "c", "schema_lock", "schema_migrations"]
    # a migrator arriving later runs no DDL at all
    statements.clear()
    await migrations.migrate(opened[0], keyspace, 1, SCRIPTS)
    assert not statements, statements


async def test_a_waiting_service_runs_no_ddl_and_returns_once_migrated(sessions: Any, statements: Counter[str]) -> None:
    keyspace, (migrator, service, *_) = sessions
    waiting = asyncio.create_task(migrations.wait_for_version(service, keyspace, len(SCRIPTS), timeout_s=60))
    await asyncio.sleep(1.5)
    assert not waiting.done() and not statements
    await migrations.migrate(migrator, keyspace, 1, SCRIPTS)
    await asyncio.wait_for(waiting, 30)
    with pytest.raises(Unavailable, match="schema version 3 after"):
        await migrations.wait_for_version(service, keyspace, len(SCRIPTS) + 1, timeout_s=1.5)


async def test_a_dead_migrators_lease_lapses(sessions: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    keyspace, (first, second, *_) = sessions
    await migrations.migrate(first, keyspace, 1, SCRIPTS[:1])
    # someone took the lease and died (no renewals, no release)
    await execute(
        first,
        f"INSERT INTO {keyspace}.schema_lock (name, holder, since) VALUES ('migrate', 'dead', %s) USING TTL 4",
        (datetime.now(UTC),),
        name="t",
    )
    started = asyncio.get_running_loop().time()
    await migrations.migrate(second, keyspace, 1, SCRIPTS)
    waited = asyncio.get_running_loop().time() - started
    assert 2.5 < waited < 30, waited
    assert await migrations.schema_version(second, keyspace) == 3


async def test_a_failed_renewal_is_retried_and_a_lost_lease_stops_the_migrator(
    sessions: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One renewal that fails (a timed-out LWT on a loaded machine) does not
    end the renewals; a renewal that finds another holder makes the next
    statement raise instead of running beside that holder's."""
    keyspace, (first, *_) = sessions
    monkeypatch.setattr(migrations, "LEASE_RENEW_S", 0.2)
    real_lwt, real_retry = migrations.execute_lwt, migrations._with_retry
    renewals = Counter[str]()

    async def flaky_lwt(session: Any, statement: Any, params: Any = None, *, name: str) -> Any:
        if str(statement).startswith("UPDATE"):
            renewals["tried"] += 1
            if renewals["tried"] == 1:
                raise Unavailable("cassandra: CAS timed out (injected)")
        return await real_lwt(session, statement, params, name=name)

    async def slow(session: Any, statement: str, params: Any = None) -> Any:
        if "CREATE TABLE IF NOT EXISTS" in statement and ".b " in statement + " ":
            await asyncio.sleep(1.0)  # several renewal periods under the lease
        return await real_retry(session, statement, params)

    monkeypatch.setattr(migrations, "execute_lwt", flaky_lwt)
    monkeypatch.setattr(migrations, "_with_retry", slow)
    await migrations.migrate(first, keyspace, 1, SCRIPTS)
    assert renewals["tried"] >= 3, renewals  # went on after the failure
    assert await migrations.schema_version(first, keyspace) == 3

    other = f"{keyspace}x"

    async def stolen(session: Any, statement: str, params: Any = None) -> Any:
        if "CREATE TABLE IF NOT EXISTS" in statement and f"{other}.b " in statement + " ":
            # another holder has the row now (as after a lapse): renewals fail their condition
            await execute(session, f"UPDATE {other}.schema_lock SET holder = 'thief' WHERE name = 'migrate'", name="t")
            await asyncio.sleep(1.0)
        return await real_retry(session, statement, params)

    monkeypatch.setattr(migrations, "_with_retry", stolen)
    try:
        with pytest.raises(Unavailable, match="lost to thief"):
            await migrations.migrate(first, other, 1, SCRIPTS)
        assert await migrations.schema_version(first, other) == 1
    finally:
        await execute(first, f"DROP KEYSPACE IF EXISTS {other}", name="drop_keyspace")


async def test_each_nodes_own_schema_version_is_asked_of_that_node(sessions: Any) -> None:
    """The fallback of ``_agree`` when the control node's peers view lags
    runs on the real driver: one version per live node, that node's own."""
    _, opened = sessions
    versions = await asyncio.to_thread(migrations._own_versions, opened[0])
    local = (await execute(opened[0], "SELECT schema_version FROM system.local", name="local"))[0]
    assert list(versions.values()) == [str(local.schema_version)]
