"""Embedded SQLite storage for the default (no-Cassandra) deployment.

One ``SqliteDatabase`` per owning service and process: one file
(``<data_dir>/<keyspace>.sqlite3``), one connection, used only from one
dedicated thread (a single-worker executor), so the event loop never blocks on
disk I/O and statements of one process never interleave. Every ``run`` is one
transaction (``BEGIN IMMEDIATE`` … ``COMMIT``; ``ROLLBACK`` on any error): an
operation's rows — e.g. a tweet, its counts and its outbox event — commit
together or not at all.

Durability: WAL journal with ``synchronous=NORMAL``. A commit appends the
transaction to the WAL through ``write()`` before ``run`` returns, so once a
write is acknowledged it is in the operating system's page cache and survives
the process being killed (SIGKILL, OOM, crash) — the next open replays the WAL.
Only a power loss or kernel crash before the next checkpoint/fsync may lose the
most recent commits (never corrupting the file). ``synchronous=FULL`` would
fsync on every commit to cover that too, at several times the latency; a
single-machine embedded deployment accepts NORMAL, and production runs
Cassandra. ``busy_timeout`` lets several processes (uvicorn workers) share the
file: a writer waits for the lock instead of failing at once.

Timestamps are stored as integer milliseconds since the Unix epoch, the
precision Cassandra's ``timestamp`` has, so both adapters return the same
values.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from . import metrics
from .config import StorageSettings
from .domain import OutboxEvent, min_timeuuid, timeuuid_sort_key
from .errors import Unavailable
from .policies import SQLITE_WAL_SWITCH, retry
from .storage_service.schema import Migration

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_ms(value: datetime) -> int:
    """Milliseconds since the epoch (truncated, like Cassandra's ``timestamp``)."""
    delta = value.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, UTC).replace(microsecond=(value % 1000) * 1000)


def now_ms() -> int:
    return to_ms(datetime.now(UTC))


def database_path(settings: StorageSettings, owner: str) -> Path:
    """``<data_dir>/<keyspace(owner)>.sqlite3``."""
    return settings.data_dir / f"{settings.keyspace(owner)}.sqlite3"


def split_script(script: str) -> list[str]:
    """Complete SQL statements of a script (semicolons in strings are fine)."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


class SqliteDatabase:
    """One SQLite file, one connection, one thread."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    @classmethod
    def for_owner(cls, settings: StorageSettings, owner: str) -> SqliteDatabase:
        return cls(database_path(settings, owner))

    # --- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        """Create the directory and the file, and configure the connection."""
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sqlite-{self.path.stem}")
        try:
            await self._call(self._connect, "open")
            # Switching to WAL needs an exclusive lock and does not wait on the
            # busy handler: retried while another process opens the same file.
            await retry(SQLITE_WAL_SWITCH, lambda: self._call(self._enable_wal, "open"))
        except BaseException:
            executor, self._executor = self._executor, None
            executor.submit(self._close_connection)  # in its thread, after anything in flight
            executor.shutdown(wait=False)
            raise

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: no implicit transactions; ``run`` issues BEGIN.
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self._conn = conn

    def _enable_wal(self) -> None:
        assert self._conn is not None
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.execute("PRAGMA foreign_keys = ON")

    async def close(self) -> None:
        """Close the connection and stop the thread; safe to call twice."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        # Queued behind the operations already submitted, which finish first.
        await asyncio.get_running_loop().run_in_executor(executor, self._close_connection)
        executor.shutdown(wait=True)

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def ping(self) -> None:
        await self.run(lambda conn: conn.execute("SELECT 1").fetchone(), name="ping", write=False)

    # --- running work -----------------------------------------------------------

    async def _call(self, fn: Callable[[], T], name: str) -> T:
        executor = self._executor
        if executor is None:
            raise Unavailable(f"sqlite {self.path.name}: not open")
        started = time.perf_counter()
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, fn)
        except (sqlite3.OperationalError, OSError) as exc:  # locked, I/O error, disk full, no directory
            raise Unavailable(f"sqlite {self.path.name}: {name} failed: {exc}") from exc
        except RuntimeError as exc:  # executor shut down under us
            if self._executor is None:
                raise Unavailable(f"sqlite {self.path.name}: closed") from exc
            raise
        finally:
            metrics.SQLITE_LATENCY.labels(name).observe(time.perf_counter() - started)

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, name: str, write: bool = True) -> T:
        """Run ``fn(conn)`` in one transaction on the database thread.

        ``write=True`` takes the write lock up front (``BEGIN IMMEDIATE``), so a
        read-then-write never fails half-way on a lock upgrade; read-only work
        may pass ``write=False`` (``BEGIN DEFERRED``). Any exception rolls back
        and propagates; ``sqlite3.OperationalError`` (locked, I/O error, disk
        full) becomes ``Unavailable``.
        """
        return await self._call(lambda: self._transaction(fn, write), name)

    def _transaction(self, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        conn = self._conn
        if conn is None:
            raise sqlite3.OperationalError("database is closed")
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
        try:
            result = fn(conn)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    # --- schema -----------------------------------------------------------------

    async def migrate(self, migrations: Sequence[str]) -> None:
        """Apply migrations (1-based, append-only) not yet recorded in
        ``PRAGMA user_version``. Each migration is a script; it and the version
        bump commit in one transaction, so a crash never half-applies one, and
        a second process migrating at once waits for the lock and then finds
        the work done."""

        def apply(conn: sqlite3.Connection) -> None:
            current = int(conn.execute("PRAGMA user_version").fetchone()[0])
            for version, script in enumerate(migrations, start=1):
                if version <= current:
                    continue
                for statement in split_script(script):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {version}")

        await self.run(apply, name="migrate")


# --- the outbox ---------------------------------------------------------------------

OUTBOX_MIGRATION = """
CREATE TABLE IF NOT EXISTS outbox (
    event_id TEXT PRIMARY KEY,
    sort_key TEXT NOT NULL,
    key TEXT NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_by_time ON outbox (sort_key);
"""

# The embedded default's "acknowledged once applied" mode (docs/architecture.md,
# "The embedded default"): a row handed to the broker is only marked
# ``published``; the fan-out worker deletes it once it has applied the event,
# and ``replay`` marks every row unpublished again at start, because the
# embedded broker (tansu, memory storage) forgets everything when it stops.
# Real-Kafka deployments delete on the broker's ack and never set the flag.
OUTBOX_PUBLISHED_MIGRATION = """
ALTER TABLE outbox ADD COLUMN published INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (published, sort_key);
"""

# The request that caused an event (``logs.py``), published as a Kafka header.
OUTBOX_REQUEST_ID_MIGRATION = """
ALTER TABLE outbox ADD COLUMN request_id TEXT;
"""

# The relay's lease (``ports.RelayLease``): one row, taken when absent or
# expired (by this machine's clock, shared by every process on the file).
OUTBOX_LEASE_MIGRATION = """
CREATE TABLE IF NOT EXISTS outbox_lease (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""
RELAY_LEASE = "relay"

# Composed into every owner's schema (``storage_service.schema``).
OUTBOX_MIGRATIONS = (
    Migration(1, OUTBOX_MIGRATION),
    Migration(2, OUTBOX_PUBLISHED_MIGRATION),
    Migration(4, OUTBOX_REQUEST_ID_MIGRATION),
    Migration(6, OUTBOX_LEASE_MIGRATION),
)


def append_event(conn: sqlite3.Connection, event: OutboxEvent) -> None:
    """Store ``event`` inside the caller's transaction (same id twice: once)."""
    conn.execute(
        "INSERT INTO outbox (event_id, sort_key, key, payload, request_id) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (str(event.id), timeuuid_sort_key(event.id), event.key, event.payload, event.request_id),
    )


class SqliteOutbox:
    """The ``Outbox`` port over the ``outbox`` table of one database."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def pending(self, older_than: datetime, limit: int) -> list[OutboxEvent]:
        if limit <= 0:
            return []
        bound = timeuuid_sort_key(min_timeuuid(older_than))

        def read(conn: sqlite3.Connection) -> list[OutboxEvent]:
            rows = conn.execute(
                "SELECT event_id, key, payload, request_id FROM outbox WHERE published = 0 AND sort_key < ?"
                " ORDER BY sort_key LIMIT ?",
                (bound, limit),
            ).fetchall()
            return [OutboxEvent(id=uuid.UUID(r[0]), key=r[1], payload=bytes(r[2]), request_id=r[3]) for r in rows]

        return await self.db.run(read, name="outbox_pending", write=False)

    async def ack(self, event_ids: Sequence[uuid.UUID]) -> None:
        if not event_ids:
            return
        ids = [(str(i),) for i in dict.fromkeys(event_ids)]
        await self.db.run(lambda conn: conn.executemany("DELETE FROM outbox WHERE event_id = ?", ids), name="outbox_ack")

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None:
        if not event_ids:
            return
        ids = [(str(i),) for i in dict.fromkeys(event_ids)]
        await self.db.run(
            lambda conn: conn.executemany("UPDATE outbox SET published = 1 WHERE event_id = ?", ids),
            name="outbox_mark_published",
        )

    async def replay(self) -> int:
        def reset(conn: sqlite3.Connection) -> int:
            return int(conn.execute("UPDATE outbox SET published = 0 WHERE published = 1").rowcount)

        return await self.db.run(reset, name="outbox_replay")

    async def acquire_lease(self, holder: str, ttl_s: int) -> bool:
        def take(conn: sqlite3.Connection) -> bool:
            now = time.time()
            # One statement: inserted if absent, updated if ours or expired,
            # untouched (0 rows changed) while another holder's lease runs.
            cursor = conn.execute(
                "INSERT INTO outbox_lease (name, holder, expires_at) VALUES (?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at"
                " WHERE outbox_lease.holder = excluded.holder OR outbox_lease.expires_at <= ?",
                (RELAY_LEASE, holder, now + ttl_s, now),
            )
            return cursor.rowcount == 1

        return await self.db.run(take, name="outbox_lease")

    async def release_lease(self, holder: str) -> None:
        await self.db.run(
            lambda conn: conn.execute("DELETE FROM outbox_lease WHERE name = ? AND holder = ?", (RELAY_LEASE, holder)),
            name="outbox_lease",
        )
