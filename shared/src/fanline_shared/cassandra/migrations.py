"""Keyspace creation and numbered, idempotent, append-only migrations,
applied by one process at a time.

``migrate`` creates a keyspace (NetworkTopologyStrategy) and applies each
migration once, recording it in ``schema_migrations``; it waits for schema
agreement and raises ``fanline_shared.errors.Unavailable`` without it.

Never two migrators at once: concurrent DDL on Cassandra can leave nodes
with different ids for one table (CASSANDRA-9424), which shows only later as
lost writes. A schema already at the wanted version runs no DDL at all; else
the migrator takes the keyspace's migration lease, a row of
``schema_lock`` written with a lightweight transaction and a TTL that its
holder renews, and applies what is missing under it. The only statements
that may run concurrently are the two that create those tables, and they
name a fixed table id (``WITH ID``, derived from the keyspace), so two
processes creating them at once create the same table.

``wait_for_version`` is what a service does instead of migrating when
``FANLINE_SCHEMA_AT_START=wait`` (production): no DDL, only polling until
the migrate Job has brought the schema to the version its code needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from cassandra import DriverException, InvalidRequest
from cassandra.cluster import NoHostAvailable, Session
from cassandra.connection import ConnectionException

from .. import policies
from ..errors import Unavailable
from .bridge import execute, execute_lwt

log = logging.getLogger(__name__)

LEASE_TTL_S = 60  # a crashed migrator's lease lapses after this
LEASE_RENEW_S = 15
POLL_S = 1.0
_LOCAL_VERSION = "SELECT schema_version FROM system.local"
LOCAL_VERSION_TIMEOUT_S = 10.0


def _datacenters(session: Session, fallback: str) -> list[str]:
    dcs = sorted({host.datacenter for host in session.cluster.metadata.all_hosts() if host.datacenter})
    return dcs or [fallback]


def _split(cql: str) -> list[str]:
    """Statements of one migration, separated by ``;`` at the end of a line."""
    parts, current = [], []
    for line in cql.splitlines():
        current.append(line)
        if line.rstrip().endswith(";"):
            parts.append("\n".join(current).strip().rstrip(";").strip())
            current = []
    tail = "\n".join(current).strip()
    if tail:
        parts.append(tail)
    return [p for p in parts if p]


async def migrate(
    session: Session,
    keyspace: str,
    replication_factor: int,
    migrations: Sequence[str],
    *,
    local_dc: str = "datacenter1",
    lock_timeout_s: float = 600.0,
) -> None:
    """Create ``keyspace`` and apply ``migrations`` (1-based versions) once
    each, under the keyspace's migration lease (see the module docstring).

    Replication: ``NetworkTopologyStrategy`` with ``replication_factor`` in
    every datacenter the driver sees (``local_dc`` if it sees none).
    SimpleStrategy ignores racks and DCs, which ``LOCAL_QUORUM`` and
    ``LOCAL_SERIAL`` are defined over, and is not recommended in production;
    NTS is correct for one node as well as several DCs.

    Each migration is one or more CQL statements (separated by ``;`` at a line
    end), idempotent (``IF NOT EXISTS``) so that one interrupted halfway is
    simply applied again. Migrations are append-only: never edit one that has
    shipped. Waits for schema agreement at the end.
    """
    _check_identifier(keyspace)
    if await schema_version(session, keyspace) >= len(migrations):
        return await _agree(session, keyspace)
    replication = ", ".join(f"'{dc}': {replication_factor}" for dc in _datacenters(session, local_dc))
    await _with_retry(
        session,
        f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {{'class': 'NetworkTopologyStrategy', {replication}}}",
    )
    # Every node knows the keyspace before a table goes into it: on a freshly
    # started cluster one node lagged, and the next CREATE TABLE, coordinated
    # there, failed with "Keyspace ... doesn't exist" (not retried: invalid).
    await policies.retry(policies.MIGRATE_STATEMENT, lambda: _agree(session, keyspace))
    await _with_retry(
        session,
        f"CREATE TABLE IF NOT EXISTS {keyspace}.schema_migrations (version int PRIMARY KEY, applied_at timestamp) "
        f"WITH ID = {_table_id(keyspace, 'schema_migrations')}",
    )
    await _with_retry(
        session,
        f"CREATE TABLE IF NOT EXISTS {keyspace}.schema_lock (name text PRIMARY KEY, holder text, since timestamp) "
        f"WITH ID = {_table_id(keyspace, 'schema_lock')}",
    )
    # The same for the tables: the lease's LWT, coordinated by a node that
    # had not yet learned of schema_lock, failed with "table schema_lock does
    # not exist" on a freshly started three-node cluster (an invalid request,
    # so not retried, and the service exited at start).
    await policies.retry(policies.MIGRATE_STATEMENT, lambda: _agree(session, keyspace))
    async with _lease(session, keyspace, len(migrations), lock_timeout_s) as still_held:
        if still_held is None:  # another migrator brought it to this version meanwhile
            return await _agree(session, keyspace)
        applied = await _applied(session, keyspace)
        for version, cql in enumerate(migrations, start=1):
            if version in applied:
                continue
            for statement in _split(cql.replace("{keyspace}", keyspace)):
                still_held()
                await _with_retry(session, statement)
            await _with_retry(
                session,
                f"INSERT INTO {keyspace}.schema_migrations (version, applied_at) VALUES (%s, %s)",
                (version, datetime.now(UTC)),
            )
            log.info("cassandra: applied migration %d to %s", version, keyspace)
        await _agree(session, keyspace)


async def schema_version(session: Session, keyspace: str) -> int:
    """The highest version ``v`` such that migrations 1..v are all recorded
    (0 for a keyspace or table that does not exist yet)."""
    applied = await _applied(session, keyspace)
    version = 0
    while version + 1 in applied:
        version += 1
    return version


async def wait_for_version(session: Session, keyspace: str, wanted: int, timeout_s: float) -> None:
    """Return once ``keyspace`` is at schema version ``wanted`` or later (no
    DDL); ``Unavailable`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    logged = -1
    while (version := await schema_version(session, keyspace)) < wanted:
        if version != logged:
            log.warning("cassandra: %s is at schema version %d, waiting for %d (the migrate job)", keyspace, version, wanted)
            logged = version
        if time.monotonic() > deadline:
            raise Unavailable(f"cassandra: {keyspace} still at schema version {version} after {timeout_s:.0f} s; {wanted} needed")
        await asyncio.sleep(POLL_S)
    await _agree(session, keyspace)


async def _applied(session: Session, keyspace: str) -> set[int]:
    # Asked of the server, never of the driver's schema metadata: a migrator
    # whose own CREATE ... IF NOT EXISTS was a no-op gets no schema event, and
    # its metadata may still lack the table another migrator created -- it
    # then saw nothing applied and ran every migration again.
    # A table another migrator created a moment ago can be in the schema but
    # not yet open on the node: the read then fails with a server error
    # ("Unknown CF <its id>", seen when a store and its fan-out replica
    # started together), which settles within a moment: retried, as DDL is.
    def warn(attempt: int, exc: BaseException) -> None:
        log.warning("cassandra: reading %s's schema version failed (attempt %d), retrying: %s", keyspace, attempt, exc)

    query = f"SELECT version FROM {keyspace}.schema_migrations"
    try:
        rows = await policies.retry(policies.MIGRATE_STATEMENT, lambda: execute(session, query, name="migrate"), on_retry=warn)
    except InvalidRequest:  # no such keyspace or table (yet, or dropped since)
        return set()
    return {int(row.version) for row in rows}


async def _agree(session: Session, keyspace: str) -> None:
    """Every live node has the same schema, or ``Unavailable``.

    The driver's check reads the control node's ``system.peers``: its gossip
    view of the others' versions, which can lag. On a freshly started CI
    cluster one peer row stayed stale for minutes while every node's own log
    showed it had applied the same schema, so the service exited. When that
    view disagrees, each live node is asked for its own version
    (``system.local``), as the Rust driver checks agreement; those agreeing
    is the agreement that matters: any coordinator knows every table.
    """
    agreed = await asyncio.to_thread(session.cluster.control_connection.wait_for_schema_agreement)
    if agreed is False:
        try:
            versions = await asyncio.to_thread(_own_versions, session)
        except (DriverException, NoHostAvailable, OSError) as exc:
            raise Unavailable(f"cassandra: no schema agreement on {keyspace}: {exc!r}") from exc
        if len(set(versions.values())) != 1:
            raise Unavailable(f"cassandra: no schema agreement on {keyspace}: {versions}")
        log.warning("cassandra: the control node's view of peers' schema lags; each of %d nodes reports the same", len(versions))


def _own_versions(session: Session) -> dict[str, str]:
    """Each live node's schema version, asked of that node (blocking)."""
    versions: dict[str, str] = {}
    for host in session.cluster.metadata.all_hosts():
        if host.is_up:
            row = session.execute(_LOCAL_VERSION, host=host, timeout=LOCAL_VERSION_TIMEOUT_S).one()
            versions[str(host.endpoint)] = str(row.schema_version)
    return versions


def _table_id(keyspace: str, table: str) -> uuid.UUID:
    """The same id for one table name everywhere, so concurrent creations agree."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"fanline:{keyspace}.{table}")


@contextlib.asynccontextmanager
async def _lease(session: Session, keyspace: str, wanted: int, timeout_s: float) -> AsyncIterator[Callable[[], None] | None]:
    """Hold the keyspace's migration lease, renewed in the background; yields
    a check that raises ``Unavailable`` once a renewal found the lease taken
    by another holder (call it before each statement), or None instead if
    the schema reaches ``wanted`` while waiting for the lease."""
    holder = f"{uuid.uuid4()}"
    take = (
        f"INSERT INTO {keyspace}.schema_lock (name, holder, since) VALUES ('migrate', %s, %s) "
        f"IF NOT EXISTS USING TTL {LEASE_TTL_S}"
    )
    deadline = time.monotonic() + timeout_s
    while True:
        taken, current = await execute_lwt(session, take, (holder, datetime.now(UTC)), name="migrate_lock")
        if taken:
            break
        if await schema_version(session, keyspace) >= wanted:
            yield None
            return
        if time.monotonic() > deadline:
            raise Unavailable(f"cassandra: {keyspace}'s migration lease is held by {getattr(current, 'holder', '?')}")
        log.info("cassandra: %s is being migrated by %s; waiting", keyspace, getattr(current, "holder", "?"))
        await asyncio.sleep(POLL_S)
    renew = f"UPDATE {keyspace}.schema_lock USING TTL {LEASE_TTL_S} SET holder = %s WHERE name = 'migrate' IF holder = %s"
    lost: list[str] = []

    async def renewing() -> None:
        # A failed renewal is retried, never the end of renewing: on a loaded
        # machine one LWT timed out, the lease lapsed under a slow DDL and a
        # second migrator ran every migration again.
        while True:
            await asyncio.sleep(LEASE_RENEW_S)
            try:
                renewed, current = await execute_lwt(session, renew, (holder, holder), name="migrate_lock")
            except Exception as exc:  # noqa: BLE001 - retried at the next period, well within the TTL
                log.warning("cassandra: renewing %s's migration lease failed, retrying: %s", keyspace, exc)
                continue
            if not renewed:
                lost.append(str(getattr(current, "holder", None) or "nobody"))
                return

    def still_held() -> None:
        if lost:
            raise Unavailable(f"cassandra: {keyspace}'s migration lease was lost to {lost[0]}; migrate again")

    renewer = asyncio.create_task(renewing())
    try:
        yield still_held
    finally:
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await renewer
        with contextlib.suppress(Exception):
            await execute_lwt(
                session,
                f"DELETE FROM {keyspace}.schema_lock WHERE name = 'migrate' IF holder = %s",
                (holder,),
                name="migrate_lock",
            )


async def _with_retry(session: Session, statement: str, params: Any = None) -> Any:
    """One migration statement under ``policies.MIGRATE_STATEMENT`` (safe to
    repeat: every migration is idempotent)."""

    tried = 0

    def warn(attempt: int, exc: BaseException) -> None:
        log.warning("cassandra: migration statement failed (attempt %d), retrying: %s", attempt, exc)

    async def once() -> Any:
        nonlocal tried
        tried += 1
        if tried > 1:
            # A statement that timed out may still be applying: let the nodes
            # agree first, so that the retry, maybe coordinated by another
            # node, finds the table rather than creating it a second time
            # under another id (CASSANDRA-9424). Best effort: the statement
            # itself is what must succeed (the control connection may be the
            # one that broke: the driver then raises its own errors here).
            try:
                await _agree(session, "the retried statement's keyspace")
            except (Unavailable, DriverException, ConnectionException, OSError) as exc:
                log.info("cassandra: no schema agreement before a retry (%r); retrying anyway", exc)
        return await execute(session, statement, params, name="migrate", request_timeout_s=policies.MIGRATE_DDL_TIMEOUT_S)

    return await policies.retry(policies.MIGRATE_STATEMENT, once, on_retry=warn)


def _check_identifier(name: str) -> None:
    if not name.replace("_", "a").isalnum() or not name[0].isalpha() or len(name) > 48:
        raise ValueError(f"invalid keyspace name {name!r}")
