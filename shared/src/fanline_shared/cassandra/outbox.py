"""The transactional outbox of every owning service, over Cassandra.

``OUTBOX_MIGRATIONS`` create ``outbox`` (events by shard and minute),
``outbox_minutes`` (which minutes may hold events) and the relay's lease; ``CassandraOutbox`` is the
``Outbox`` port over them: owning adapters write an event's index and row,
the relay reads pending events oldest first and acknowledges them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cassandra.cluster import Session
from cassandra.query import PreparedStatement

from ..domain import OutboxEvent, min_timeuuid, timeuuid_sort_key, timeuuid_time
from ..errors import Unavailable
from ..storage_service.schema import Migration
from .batching import replica_batches
from .bridge import execute, execute_each, execute_lwt
from .connection import prepare
from .timeutil import unix_minute

OUTBOX_SHARDS = 8
_ALL_SHARDS = list(range(OUTBOX_SHARDS))
# An event row is written within this long of its id's timestamp (ids are made
# right before the write; requests time out after seconds). Only buckets older
# than that may be dropped from the bucket index once empty.
OUTBOX_CLOSE_AFTER = timedelta(minutes=10)
# Ids per acknowledging statement (an IN list on one partition).
_ACK_IDS = 100
# Partitions per acknowledging batch: at or under the node's
# unlogged_batch_across_partitions_warn_threshold (10).
_ACK_BATCH_PARTITIONS = 10
# Writers skip re-indexing a minute they indexed themselves only this recently.
_INDEX_TRUST_MINUTES = 5
# The current minute and this many before it are read on every sweep; an older
# minute only gets an event from a write that took longer than that.
OUTBOX_HOT_MINUTES = 2


OUTBOX_TABLES_MIGRATIONS = (
    # Events partitioned by (shard, minute of the event id) so that no partition
    # grows without bound and the tombstones left by acks stay in closed
    # minutes that the relay stops reading. A resurrected outbox row (a
    # tombstone purged before it reached every replica) only re-publishes an
    # idempotent event, so a short gc_grace_seconds is safe. (The 7-day
    # default TTL this table was created with is removed by
    # OUTBOX_KEEP_MIGRATION: an unpublished event must never expire.)
    """
    CREATE TABLE IF NOT EXISTS {keyspace}.outbox (
        shard int,
        minute bigint,
        event_id timeuuid,
        key text,
        payload blob,
        PRIMARY KEY ((shard, minute), event_id)
    ) WITH CLUSTERING ORDER BY (event_id ASC)
      AND gc_grace_seconds = 3600
      AND default_time_to_live = 604800;
    """,
    # Which minutes of a shard may still hold events: written before the event,
    # removed by the relay once a closed minute is empty (no TTL: an index row
    # must not expire before the events it points to). Ascending, so the relay
    # reads the oldest first.
    """
    CREATE TABLE IF NOT EXISTS {keyspace}.outbox_minutes (
        shard int,
        minute bigint,
        PRIMARY KEY (shard, minute)
    ) WITH CLUSTERING ORDER BY (minute ASC)
      AND gc_grace_seconds = 3600;
    """,
)

# The request that caused an event (``logs.py``), so the relay publishes it
# as a Kafka header too.
OUTBOX_REQUEST_ID_MIGRATION = """
ALTER TABLE {keyspace}.outbox ADD IF NOT EXISTS request_id text;
"""


# An unpublished event is an acknowledged write: it must outlive any broker
# outage, so rows no longer expire (they expired after 7 days, silently
# dropping the events of a longer outage). Published rows are deleted by the
# ack; rows written before this migration keep the TTL they were written with.
OUTBOX_KEEP_MIGRATION = """
ALTER TABLE {keyspace}.outbox WITH default_time_to_live = 0;
"""


# The relay's lease (``ports.RelayLease``): one row whose TTL is the lease;
# taken with an LWT when absent (or expired), renewed with an LWT by its holder.
OUTBOX_LEASE_MIGRATION = """
CREATE TABLE IF NOT EXISTS {keyspace}.outbox_lease (
    name text PRIMARY KEY,
    holder text
) WITH gc_grace_seconds = 3600;
"""
RELAY_LEASE = "relay"

# Composed into every owner's schema by ``Keyspace`` (``storage_service.schema``).
OUTBOX_MIGRATIONS = (
    *(Migration(1, script) for script in OUTBOX_TABLES_MIGRATIONS),
    Migration(4, OUTBOX_REQUEST_ID_MIGRATION),
    Migration(5, OUTBOX_KEEP_MIGRATION),
    Migration(6, OUTBOX_LEASE_MIGRATION),
)


def outbox_partition(event_id: uuid.UUID) -> tuple[int, int]:
    """``(shard, minute)`` of an event: shard from the id's random node bits."""
    return event_id.int % OUTBOX_SHARDS, unix_minute(timeuuid_time(event_id))


class CassandraOutbox:
    """The ``Outbox`` port over ``outbox`` + ``outbox_minutes`` of one keyspace.

    Owning adapters store an event with ``ensure_index(event)`` followed by
    ``row_write(event)`` (inside their own batch); this class reads and
    acknowledges them.
    """

    def __init__(self, keyspace: str, recheck_empty_s: float = 0.0) -> None:
        self.keyspace = keyspace
        self.session: Session | None = None
        self._indexed: set[tuple[int, int]] = set()
        # Partitions older than the hot minutes that ``pending`` read empty,
        # and when (monotonic): not read again for ``recheck_empty_s``.
        self.recheck_empty_s = recheck_empty_s
        self._empty_at: dict[tuple[int, int], float] = {}

    def prepare(self, session: Session) -> None:
        """Blocking: prepare the statements (call from ``to_thread``)."""
        ks = self.keyspace
        self.session = session
        self._insert = prepare(
            session,
            f"INSERT INTO {ks}.outbox (shard, minute, event_id, key, payload, request_id) VALUES (?, ?, ?, ?, ?, ?)",
            write=True,
        )
        self._insert_minute = prepare(session, f"INSERT INTO {ks}.outbox_minutes (shard, minute) VALUES (?, ?)", write=True)
        # A sweep reads every shard's index in one statement, then each minute
        # of every shard in one (``shard IN ?``, a partition per shard): 4
        # statements at steady state instead of 8 + 24 (issue 31).
        self._minutes = prepare(
            session,
            f"SELECT shard, minute FROM {ks}.outbox_minutes WHERE shard IN ? AND minute <= ? PER PARTITION LIMIT ?",
        )
        self._read = prepare(
            session,
            f"SELECT shard, event_id, key, payload, request_id FROM {ks}.outbox"
            " WHERE shard IN ? AND minute = ? AND event_id < ? PER PARTITION LIMIT ?",
        )
        # Acks delete every acknowledged row of one partition in one statement.
        self._delete = prepare(session, f"DELETE FROM {ks}.outbox WHERE shard = ? AND minute = ? AND event_id IN ?", write=True)
        self._delete_minute = prepare(session, f"DELETE FROM {ks}.outbox_minutes WHERE shard = ? AND minute = ?", write=True)
        self._lease_take = prepare(
            session,
            f"INSERT INTO {ks}.outbox_lease (name, holder) VALUES (?, ?) IF NOT EXISTS USING TTL ?",
            write=True,
            idempotent=False,
        )
        self._lease_renew = prepare(
            session,
            f"UPDATE {ks}.outbox_lease USING TTL ? SET holder = ? WHERE name = ? IF holder = ?",
            write=True,
            idempotent=False,
        )
        self._lease_release = prepare(
            session, f"DELETE FROM {ks}.outbox_lease WHERE name = ? IF holder = ?", write=True, idempotent=False
        )

    def row_write(self, event: OutboxEvent) -> tuple[PreparedStatement, tuple[Any, ...]]:
        """The write of the event's row (callers put it in their own batch)."""
        shard, minute = outbox_partition(event.id)
        return self._insert, (shard, minute, event.id, event.key, event.payload, event.request_id)

    async def ensure_index(self, event: OutboxEvent) -> None:
        """Record the event's minute in ``outbox_minutes``: before (or with) the
        row, so a crash never leaves a row the relay cannot find.

        Each process remembers the minutes it indexed recently and skips
        rewriting them (one index write per shard-minute instead of one per
        event). Only recent minutes are trusted: the relay may drop the index
        row of a minute once it is closed and empty."""
        index = self.index_write(event)
        if index is None:
            return
        await execute(self._session(), index[0], index[1], name="outbox_index")
        self.remember_index(event)

    def index_write(self, event: OutboxEvent) -> tuple[PreparedStatement, tuple[Any, ...]] | None:
        """The index write ``ensure_index`` would do, or None if this process
        indexed the event's minute recently; for callers that put it in the
        same (logged) batch as the row. Call ``remember_index`` once written."""
        shard, minute = outbox_partition(event.id)
        if (shard, minute) in self._indexed and minute >= unix_minute(datetime.now(UTC)) - _INDEX_TRUST_MINUTES:
            return None
        return self._insert_minute, (shard, minute)

    def remember_index(self, event: OutboxEvent) -> None:
        if len(self._indexed) > 4096:
            self._indexed.clear()
        self._indexed.add(outbox_partition(event.id))

    async def append(self, event: OutboxEvent) -> None:
        """Store one event on its own (index first)."""
        await self.ensure_index(event)
        stmt, params = self.row_write(event)
        await execute(self._session(), stmt, params, name="outbox_append")

    def _session(self) -> Session:
        if self.session is None:
            raise Unavailable("cassandra: outbox not started")
        return self.session

    async def pending(self, older_than: datetime, limit: int) -> list[OutboxEvent]:
        if limit <= 0:
            return []
        session = self._session()
        # Strictly older than ``older_than``: below its smallest timeuuid.
        bound = min_timeuuid(older_than)
        last_minute = unix_minute(older_than)
        now = datetime.now(UTC)
        closed_before = unix_minute(now - OUTBOX_CLOSE_AFTER)
        cold_before = min(last_minute, unix_minute(now)) - OUTBOX_HOT_MINUTES
        # Closed minutes leave (another process may have dropped their index rows).
        self._empty_at = {k: t for k, t in self._empty_at.items() if k[1] >= closed_before}
        indexed = await execute(session, self._minutes, (_ALL_SHARDS, last_minute, 10_000), name="outbox_minutes")
        shards_of: dict[int, list[int]] = {}
        for row in indexed:
            shards_of.setdefault(row.minute, []).append(row.shard)
        events: list[OutboxEvent] = []
        clock = time.monotonic()
        # Oldest minute first: every event of a minute is older than any of a
        # later one, so once ``limit`` are found no later minute can hold one
        # of the oldest ``limit``.
        for minute in sorted(shards_of):
            if len(events) >= limit:
                break
            shards = [shard for shard in shards_of[minute] if not self._skip(shard, minute, cold_before, clock)]
            if not shards:
                continue
            rows = await execute(session, self._read, (shards, minute, bound, limit - len(events)), name="outbox_pending")
            found: set[int] = set()
            for r in rows:
                found.add(r.shard)
                events.append(OutboxEvent(id=r.event_id, key=r.key, payload=bytes(r.payload), request_id=r.request_id))
            for shard in shards:
                key = (shard, minute)
                if shard in found:
                    self._empty_at.pop(key, None)
                elif minute < closed_before:
                    # Closed and drained: stop reading it on every sweep.
                    await execute(session, self._delete_minute, key, name="outbox_minute_drop")
                    self._empty_at.pop(key, None)
                elif minute < cold_before:
                    self._empty_at[key] = clock
        events.sort(key=lambda e: (timeuuid_time(e.id), timeuuid_sort_key(e.id)))
        return events[:limit]

    def _skip(self, shard: int, minute: int, cold_before: int, now: float) -> bool:
        """Whether a sweep leaves this partition out: past its hot minutes and
        read empty a moment ago. Only a write slower than those minutes could
        have added an event since (its gateway then also failed to publish
        it); every sweep re-reading the ten open minutes of every shard was
        about one Cassandra read per request at 60/s (issue 31)."""
        read_empty_at = self._empty_at.get((shard, minute))
        return minute < cold_before and read_empty_at is not None and now - read_empty_at < self.recheck_empty_s

    async def ack(self, event_ids: Sequence[uuid.UUID]) -> None:
        if not event_ids:
            return
        # One delete per partition (at most _ACK_IDS ids each), sent as small
        # unlogged batches of partitions that share their first replica: a
        # flush of a second's acknowledgements is one request, not one per
        # event nor one per partition (issue 31). Deletes are idempotent, so
        # a batch that failed half-way is simply sent again (or the events
        # are published again, which the worker absorbs).
        groups: dict[tuple[int, int], list[uuid.UUID]] = {}
        for event_id in dict.fromkeys(event_ids):
            groups.setdefault(outbox_partition(event_id), []).append(event_id)
        params = [
            (shard, minute, ids[i : i + _ACK_IDS])
            for (shard, minute), ids in groups.items()
            for i in range(0, len(ids), _ACK_IDS)
        ]
        session = self._session()
        batches = replica_batches(session, self._delete, params, rows=_ACK_BATCH_PARTITIONS)
        await execute_each(session, batches, name="outbox_ack", concurrency=32)

    async def acquire_lease(self, holder: str, ttl_s: int) -> bool:
        """An LWT insert takes a free (or expired: the row's TTL ran out)
        lease; the holder renews its own with an LWT update. Serial
        consistency makes concurrent takers agree on one holder."""
        session = self._session()
        taken, row = await execute_lwt(session, self._lease_take, (RELAY_LEASE, holder, ttl_s), name="outbox_lease")
        if taken:
            return True
        if row is None or getattr(row, "holder", None) != holder:
            return False
        renewed, _ = await execute_lwt(session, self._lease_renew, (ttl_s, holder, RELAY_LEASE, holder), name="outbox_lease")
        return renewed

    async def release_lease(self, holder: str) -> None:
        await execute_lwt(self._session(), self._lease_release, (RELAY_LEASE, holder), name="outbox_lease")
