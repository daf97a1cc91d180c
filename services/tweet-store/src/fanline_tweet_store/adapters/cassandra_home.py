"""Cassandra adapters of tweet-store's home timelines and large-account registry.

``home_timeline`` is one partition per owner, newest first; every row is
written with ``TTL = retention - age of the tweet``, so it expires at tweet
time + retention whenever it was written. Fan-out writes are small unlogged
batches of rows whose partitions share their first replica
(``keyed_batches``: one tweet's rows, its values serialized once), run under tweet-store's adaptive limit
(``fanline_tweet_store.limiter``). Each owner's *horizon* (a static column)
bounds the rows reads trust; ``trim`` keeps the newest rows with one range
tombstone (``fanline_tweet_store.home_cap``). ``large_accounts`` is one small
partition of TTL'd rows (``fanline_tweet_store.hybrid``). Split out of
``cassandra.py``; the schema of both is in ``cassandra_schema.py``.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cassandra.cluster import Session
from cassandra.query import PreparedStatement

from fanline_shared.cassandra import (
    MAX_TTL,
    Keyspace,
    Repository,
    batch,
    execute,
    execute_lwt,
    keyed_batches,
    prepare,
    to_utc,
    truncate_ms,
)
from fanline_shared.domain import canonical, timeuuid_time, utcnow

from ..home_writes import HomeWrites
from ..limiter import AdaptiveLimit
from ..ports import HomeWindow, TrimOutcome

_BATCH_ROWS = 100  # rows per single-partition batch (stays under batch_size_warn)
# Below every timeuuid in Cassandra's order: the floor of an ascending read from the start.
_MIN_TIMEUUID = uuid.UUID("00000000-0000-1000-8080-808080808080")


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class CassandraHomeTimeline(Repository):
    def __init__(self, keyspace: Keyspace, writes: HomeWrites, limit: AdaptiveLimit) -> None:
        super().__init__(keyspace)
        self._retention_s = writes.retention_s
        # Requests (batches of up to ``batch_rows`` rows) in flight per page,
        # every fan-out request of this process under ``limit``; no page
        # waits for another.
        self._window = writes.page_window
        self._batch_rows = writes.batch_rows
        self._limit = limit

    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        self._insert = prepare(
            session, f"INSERT INTO {ks}.home_timeline (owner_lc, tweet_id, author_lc) VALUES (?, ?, ?) USING TTL ?", write=True
        )
        self._delete = prepare(session, f"DELETE FROM {ks}.home_timeline WHERE owner_lc = ? AND tweet_id = ?", write=True)
        self._slice = prepare(session, f"SELECT tweet_id, horizon FROM {ks}.home_timeline WHERE owner_lc = ? LIMIT ?")
        self._present = prepare(session, f"SELECT tweet_id FROM {ks}.home_timeline WHERE owner_lc = ? AND tweet_id IN ?")
        self._authors = prepare(session, f"SELECT tweet_id, author_lc FROM {ks}.home_timeline WHERE owner_lc = ?")
        self._slice_before = prepare(
            session, f"SELECT tweet_id, horizon FROM {ks}.home_timeline WHERE owner_lc = ? AND tweet_id < ? LIMIT ?"
        )
        self._horizon = prepare(session, f"SELECT horizon FROM {ks}.home_timeline WHERE owner_lc = ? LIMIT 1")
        self._slice_after = prepare(
            session,
            f"SELECT tweet_id, horizon FROM {ks}.home_timeline WHERE owner_lc = ? AND tweet_id > ? ORDER BY tweet_id ASC LIMIT ?",
        )
        # Trimming: the scan returns ids as blobs, because the driver makes a
        # ``uuid.UUID`` of every timeuuid it reads (~2 us each, and the static
        # horizon on every row): a trim reads ``keep + 1`` rows to use one.
        # Measured (800 rows, real Cassandra): 2.0-3.7 ms of CPU per scan as
        # timeuuids, 0.4-1.0 as blobs; the worker's profile had 18 % of its
        # samples in ``UUID.__init__``.
        self._trim_scan = prepare(session, f"SELECT timeuuidAsBlob(tweet_id) FROM {ks}.home_timeline WHERE owner_lc = ? LIMIT ?")
        self._newer_scan = prepare(
            session, f"SELECT timeuuidAsBlob(tweet_id) FROM {ks}.home_timeline WHERE owner_lc = ? AND tweet_id > ? LIMIT ?"
        )
        # Then one range tombstone below the oldest kept row, and the
        # horizon written with the *boundary tweet's* time as its write
        # timestamp, so the highest horizon wins whatever order trims land in.
        self._trim = prepare(session, f"DELETE FROM {ks}.home_timeline WHERE owner_lc = ? AND tweet_id < ?", write=True)
        self._set_horizon = prepare(
            session, f"UPDATE {ks}.home_timeline USING TIMESTAMP ? SET horizon = ? WHERE owner_lc = ?", write=True
        )
        # Regeneration: the finish time as its own write timestamp (only
        # rises), and a claim per owner as an LWT with a TTL.
        self._regenerated = prepare(session, f"SELECT regenerated_at FROM {ks}.home_timeline WHERE owner_lc = ? LIMIT 1")
        self._mark_regenerated = prepare(
            session, f"UPDATE {ks}.home_timeline USING TIMESTAMP ? SET regenerated_at = ? WHERE owner_lc = ?", write=True
        )
        self._claim = prepare(
            session,
            f"INSERT INTO {ks}.home_regeneration (owner_lc, claimed_at) VALUES (?, ?) IF NOT EXISTS USING TTL ?",
            write=True,
            idempotent=False,
        )
        self._release = prepare(session, f"DELETE FROM {ks}.home_regeneration WHERE owner_lc = ?", write=True)

    def _ttl(self, tweet_id: uuid.UUID, now: datetime) -> int:
        """Seconds this tweet's rows still have to live (0: do not write).

        Rounded down (and Cassandra counts from the whole second of the
        write), so a row may leave up to ~2 s before tweet time + retention,
        never after it."""
        remaining = self._retention_s - (now - timeuuid_time(tweet_id)).total_seconds()
        return min(MAX_TTL, math.floor(remaining)) if remaining >= 1 else 0

    async def add(self, owners: Sequence[str], tweet_id: uuid.UUID, author: str) -> None:
        ttl = self._ttl(tweet_id, utcnow())
        names = list(dict.fromkeys(canonical(o) for o in owners))
        if ttl <= 0 or not names:
            return
        await self._write_each(self._insert, names, (tweet_id, canonical(author), ttl), "home_add")

    async def _write_each(self, statement: PreparedStatement, owners: list[str], shared: tuple[Any, ...], name: str) -> None:
        """One row ``(owner, *shared)`` per owner's partition: batched by
        replica (single-row requests with ``batch_rows`` 1) and run under the
        adaptive limit."""
        # Refused (if it is) before the rows are bound and grouped: at least
        # this many requests, whatever the grouping.
        self._limit.admit(-(-len(owners) // self._batch_rows))
        requests: list[Any] = (
            keyed_batches(self._session, statement, owners, shared, rows=self._batch_rows)
            if self._batch_rows > 1
            else [statement.bind((o, *shared)) for o in owners]
        )
        session = self._session
        await self._limit.write_all(requests, lambda r: execute(session, r, name=name), self._window)

    async def add_many(self, owner: str, entries: Sequence[tuple[uuid.UUID, str]]) -> None:
        now, owner_lc = utcnow(), canonical(owner)
        rows = []
        for tweet_id, author in dict.fromkeys(entries):
            ttl = self._ttl(tweet_id, now)
            if ttl > 0:
                rows.append((self._insert, (owner_lc, tweet_id, canonical(author), ttl)))
        # One partition: unlogged single-partition batches are one mutation each.
        await asyncio.gather(
            *(execute(self._session, batch(chunk), name="home_add_many") for chunk in _chunks(rows, _BATCH_ROWS))
        )

    async def remove(self, owners: Sequence[str], tweet_id: uuid.UUID) -> None:
        names = list(dict.fromkeys(canonical(o) for o in owners))
        if not names:
            return
        await self._write_each(self._delete, names, (tweet_id,), "home_remove")

    async def remove_many(self, owner: str, tweet_ids: Sequence[uuid.UUID]) -> None:
        owner_lc = canonical(owner)
        rows: list[tuple[PreparedStatement, Sequence[Any]]] = [(self._delete, (owner_lc, i)) for i in dict.fromkeys(tweet_ids)]
        await asyncio.gather(
            *(execute(self._session, batch(chunk), name="home_remove_many") for chunk in _chunks(rows, _BATCH_ROWS))
        )

    async def present(self, owner: str, tweet_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        ids = list(dict.fromkeys(tweet_ids))
        results = await asyncio.gather(
            *(
                execute(self._session, self._present, (canonical(owner), list(chunk)), name="home_present")
                for chunk in _chunks(ids, _BATCH_ROWS)
            )
        )
        found = {r.tweet_id for rows in results for r in rows}
        return [i for i in ids if i in found]

    async def by_author(self, owner: str, author: str) -> list[uuid.UUID]:
        # The partition's rows, every page (the author is not part of the key: filtered here).
        author_lc = canonical(author)
        rows = await execute(self._session, self._authors, (canonical(owner),), name="home_by_author")
        return [r.tweet_id for r in rows if r.author_lc == author_lc]

    async def slice(self, owner: str, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        return (await self.window(owner, limit, before)).ids

    async def window(self, owner: str, limit: int, before: uuid.UUID | None) -> HomeWindow:
        if limit <= 0:
            return HomeWindow([], None)
        owner_lc = canonical(owner)
        if before is None:
            rows = await execute(self._session, self._slice, (owner_lc, limit), name="home_slice")
        else:
            rows = await execute(self._session, self._slice_before, (owner_lc, before, limit), name="home_slice")
        if not rows and before is not None:
            # No row below ``before``: the static horizon did not come back
            # with any row, so ask for it (only on this, the last, page).
            rows = await execute(self._session, self._horizon, (owner_lc,), name="home_horizon")
            return HomeWindow([], rows[0].horizon if rows else None)
        # A partition holding only its static horizon answers one row whose
        # tweet_id is null.
        return HomeWindow([r.tweet_id for r in rows if r.tweet_id is not None], rows[0].horizon if rows else None)

    async def window_after(self, owner: str, limit: int, after: uuid.UUID | None) -> HomeWindow:
        if limit <= 0:
            return HomeWindow([], None)
        owner_lc = canonical(owner)
        floor = after if after is not None else _MIN_TIMEUUID
        rows = await execute(self._session, self._slice_after, (owner_lc, floor, limit), name="home_slice_after")
        if not rows:
            rows = await execute(self._session, self._horizon, (owner_lc,), name="home_horizon")
            return HomeWindow([], rows[0].horizon if rows else None)
        return HomeWindow([r.tweet_id for r in rows if r.tweet_id is not None], rows[0].horizon)

    async def trim(self, owner: str, keep: int) -> uuid.UUID | None:
        return (await self.trim_counted(owner, keep)).horizon

    async def trim_counted(self, owner: str, keep: int) -> TrimOutcome:
        owner_lc = canonical(owner)
        rows = await execute(self._session, self._trim_scan, (owner_lc, keep + 1), name="home_trim_scan")
        # A partition with only its static columns returns one row of null.
        ids = [r[0] for r in rows if r[0] is not None]
        newest = uuid.UUID(bytes=ids[0]) if ids else None
        if len(ids) <= keep:
            return TrimOutcome(None, len(ids), newest)
        boundary = uuid.UUID(bytes=ids[keep - 1])
        write_ts = _micros(timeuuid_time(boundary))
        await execute(
            self._session,
            batch([(self._trim, (owner_lc, boundary)), (self._set_horizon, (write_ts, boundary, owner_lc))]),
            name="home_trim",
        )
        return TrimOutcome(boundary, len(ids), newest)

    async def count_newer(self, owner: str, after: uuid.UUID, limit: int) -> tuple[int, uuid.UUID | None]:
        if limit <= 0:
            return 0, None
        rows = await execute(self._session, self._newer_scan, (canonical(owner), after, limit), name="home_count_newer")
        ids = [r[0] for r in rows if r[0] is not None]
        return len(ids), (uuid.UUID(bytes=ids[0]) if ids else None)

    async def raise_horizon(self, owner: str, tweet_id: uuid.UUID) -> None:
        await execute(
            self._session,
            self._set_horizon,
            (_micros(timeuuid_time(tweet_id)), tweet_id, canonical(owner)),
            name="home_horizon_raise",
        )

    async def regenerated_at(self, owner: str) -> datetime | None:
        rows = await execute(self._session, self._regenerated, (canonical(owner),), name="home_regenerated_at")
        return to_utc(rows[0].regenerated_at) if rows and rows[0].regenerated_at else None

    async def mark_regenerated(self, owner: str, at: datetime) -> None:
        at = truncate_ms(at)
        await execute(self._session, self._mark_regenerated, (_micros(at), at, canonical(owner)), name="home_mark_regenerated")

    async def claim_regeneration(self, owner: str, ttl_s: int) -> bool:
        applied, _row = await execute_lwt(
            self._session, self._claim, (canonical(owner), utcnow(), max(1, ttl_s)), name="home_regeneration_claim"
        )
        return applied

    async def release_regeneration(self, owner: str) -> None:
        await execute(self._session, self._release, (canonical(owner),), name="home_regeneration_release")


def _micros(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000)


class CassandraLargeAccounts(Repository):
    """The registry of large accounts: one partition, rows with a TTL."""

    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        self._register = prepare(
            session, f"INSERT INTO {ks}.large_accounts (shard, author_lc) VALUES (0, ?) USING TTL ?", write=True
        )
        self._members = prepare(session, f"SELECT author_lc FROM {ks}.large_accounts WHERE shard = 0")

    async def register(self, author: str, ttl_s: int) -> None:
        await execute(self._session, self._register, (canonical(author), max(1, min(ttl_s, MAX_TTL))), name="large_register")

    async def members(self) -> set[str]:
        rows = await execute(self._session, self._members, name="large_members")
        return {r.author_lc for r in rows}
