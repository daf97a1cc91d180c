"""Keyspace creation and numbered, idempotent, append-only migrations.

``migrate`` creates a keyspace (NetworkTopologyStrategy) and applies each
migration once, recording it in ``schema_migrations``; it waits for schema
agreement and raises ``fanline_shared.errors.Unavailable`` without it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from cassandra.cluster import Session

from .. import policies
from ..errors import Unavailable
from .bridge import execute

log = logging.getLogger(__name__)


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
    session: Session, keyspace: str, replication_factor: int, migrations: Sequence[str], *, local_dc: str = "datacenter1"
) -> None:
    """Create ``keyspace`` and apply ``migrations`` (1-based versions) once each.

    Replication: ``NetworkTopologyStrategy`` with ``replication_factor`` in
    every datacenter the driver sees (``local_dc`` if it sees none).
    SimpleStrategy ignores racks and DCs, which ``LOCAL_QUORUM`` and
    ``LOCAL_SERIAL`` are defined over, and is not recommended in production;
    NTS is correct for one node as well as several DCs.

    Each migration is one or more CQL statements (separated by ``;`` at a line
    end) that must be idempotent (``IF NOT EXISTS``): applied versions are
    recorded in ``schema_migrations``, but two processes starting at once may
    both apply a migration, which is then harmless. Migrations are append-only:
    never edit one that has shipped. Waits for schema agreement at the end.
    """
    _check_identifier(keyspace)
    replication = ", ".join(f"'{dc}': {replication_factor}" for dc in _datacenters(session, local_dc))
    await _with_retry(
        session,
        f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {{'class': 'NetworkTopologyStrategy', {replication}}}",
    )
    await _with_retry(
        session, f"CREATE TABLE IF NOT EXISTS {keyspace}.schema_migrations (version int PRIMARY KEY, applied_at timestamp)"
    )
    rows = await _with_retry(session, f"SELECT version FROM {keyspace}.schema_migrations")
    applied = {row.version for row in rows}
    for version, cql in enumerate(migrations, start=1):
        if version in applied:
            continue
        for statement in _split(cql.replace("{keyspace}", keyspace)):
            await _with_retry(session, statement)
        await _with_retry(
            session,
            f"INSERT INTO {keyspace}.schema_migrations (version, applied_at) VALUES (%s, %s)",
            (version, datetime.now(UTC)),
        )
        log.info("cassandra: applied migration %d to %s", version, keyspace)
    agreed = await asyncio.to_thread(session.cluster.control_connection.wait_for_schema_agreement)
    if agreed is False:
        raise Unavailable(f"cassandra: no schema agreement after migrating {keyspace}")


async def _with_retry(session: Session, statement: str, params: Any = None) -> Any:
    """One migration statement under ``policies.MIGRATE_STATEMENT`` (safe to
    repeat: every migration is idempotent)."""

    def warn(attempt: int, exc: BaseException) -> None:
        log.warning("cassandra: migration statement failed (attempt %d), retrying: %s", attempt, exc)

    return await policies.retry(
        policies.MIGRATE_STATEMENT, lambda: execute(session, statement, params, name="migrate"), on_retry=warn
    )


def _check_identifier(name: str) -> None:
    if not name.replace("_", "a").isalnum() or not name[0].isalpha() or len(name) > 48:
        raise ValueError(f"invalid keyspace name {name!r}")
