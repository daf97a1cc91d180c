"""Cassandra adapters of tweet-store: tweets, timelines, idempotency keys, outbox.

One keyspace (``settings.keyspace("tweet_store")``), one table per query, no
unbounded partition:

* ``tweets`` — by id; created with ``INSERT … IF NOT EXISTS`` and deleted with
  ``DELETE … IF EXISTS`` (LWTs), so "was it new / did it exist" is exact and
  ``tweet_counts`` (counters) moves once per tweet however often a write is
  retried;
* ``userline`` — one partition per author, newest first;
* ``public_timeline`` — bucketed by the *minute* of the tweet's timeuuid (a
  partition holds one minute: ~60k rows even at 1,000 tweets/s), with two
  small index tables so paging skips empty minutes and days:
  ``public_minutes`` (non-empty minutes of a day) and ``public_days``
  (non-empty days; one partition gaining one row per day);
* ``home_timeline`` — one partition per owner, newest first; every row is
  written with ``TTL = retention - age of the tweet``, so it expires at tweet
  time + retention whenever it was written (and is not written at all once
  that is past). Fan-out writes are small unlogged batches of rows whose
  partitions share their first replica (``keyed_batches``, at most
  ``HomeWrites.batch_rows`` rows, 10 by default: under the node's warning
  threshold), under tweet-store's adaptive limit (``cassandra_home.py``);
* ``idempotency`` — ``(author, key)`` → tweet, ``INSERT … IF NOT EXISTS USING
  TTL``: the first reservation wins, every later one reads the bound tweet.
* ``deleted_tweets`` — ids of deleted tweets, ``USING TTL`` the idempotency
  window: a keyed repeat after a delete answers 404 instead of restoring it.

Creating a tweet: the LWT on ``tweets`` (concurrently with the outbox's minute
index row), then ONE small LOGGED batch with the userline row, the public
timeline row and its two index rows, and the outbox event. This is the only
multi-partition logged batch in the project: it makes "visible in the
timelines" and "event queued" all-or-nothing (eventually), and it stays a few
hundred bytes. The batch is written whether or not the LWT applied, so a
retry of a crashed create heals it; counters move only when it applied.
Deletion mirrors this, and its batch also deletes the ``tweets`` row with a
client timestamp past the row's write time: an unkeyed tweet is a plain
INSERT stamped by tweet-store's clock, which an LWT (stamped by Cassandra's)
cannot be relied on to shadow.

This module holds the tweets' writes, lookups and userlines; the public
timeline's reads are ``cassandra_public.py``, home timelines
``cassandra_home.py``, the id-slot leases ``cassandra_slots.py`` and the
schema ``cassandra_schema.py``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from cassandra.cluster import Session
from cassandra.query import PreparedStatement

from fanline_shared.cassandra import (
    MAX_TTL,
    CassandraOutbox,
    Keyspace,
    Repository,
    batch,
    execute,
    execute_concurrent,
    execute_lwt,
    prepare,
)
from fanline_shared.config import StorageSettings
from fanline_shared.domain import OutboxEvent, Tweet, canonical

from ..home_writes import HomeWrites
from ..limiter import AdaptiveLimit
from . import OWNER, TweetStoreStorage
from .cassandra_home import CassandraHomeTimeline, CassandraLargeAccounts
from .cassandra_public import CassandraPublicLine, public_bucket
from .cassandra_schema import MIGRATIONS
from .cassandra_slots import CassandraIdSlots

_LOOKUP_CONCURRENCY = 64
# Below every timeuuid in Cassandra's order (time 0; lsb bytes 0x80 are the
# smallest signed bytes): the floor of an ascending read from the start.
_MIN_TIMEUUID = uuid.UUID("00000000-0000-1000-8080-808080808080")


class CassandraTweets(Repository):
    def __init__(self, keyspace: Keyspace, outbox: CassandraOutbox) -> None:
        super().__init__(keyspace)
        self._outbox = outbox
        self._indexed_minutes: set[int] = set()
        self._indexed_days: set[int] = set()
        self._public = CassandraPublicLine(keyspace)

    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        p = prepare
        self._insert = p(
            session,
            f"INSERT INTO {ks}.tweets (tweet_id, username, body) VALUES (?, ?, ?) IF NOT EXISTS",
            write=True,
            idempotent=False,
        )
        self._insert_plain = p(session, f"INSERT INTO {ks}.tweets (tweet_id, username, body) VALUES (?, ?, ?)", write=True)
        self._delete = p(session, f"DELETE FROM {ks}.tweets WHERE tweet_id = ? IF EXISTS", write=True, idempotent=False)
        # The same row's deletion at the client's clock, no earlier than the
        # write it removes (see ``delete``).
        self._delete_plain = p(session, f"DELETE FROM {ks}.tweets USING TIMESTAMP ? WHERE tweet_id = ?", write=True)
        self._writetime = p(session, f"SELECT WRITETIME(body) AS written FROM {ks}.tweets WHERE tweet_id = ?")
        self._remember_deleted = p(session, f"INSERT INTO {ks}.deleted_tweets (tweet_id) VALUES (?) USING TTL ?", write=True)
        self._was_deleted = p(session, f"SELECT tweet_id FROM {ks}.deleted_tweets WHERE tweet_id = ?")
        self._get = p(session, f"SELECT tweet_id, username, body FROM {ks}.tweets WHERE tweet_id = ?")
        self._userline_add = p(session, f"INSERT INTO {ks}.userline (username_lc, tweet_id) VALUES (?, ?)", write=True)
        self._userline_del = p(session, f"DELETE FROM {ks}.userline WHERE username_lc = ? AND tweet_id = ?", write=True)
        self._public_add = p(session, f"INSERT INTO {ks}.public_timeline (minute, tweet_id) VALUES (?, ?)", write=True)
        self._public_del = p(session, f"DELETE FROM {ks}.public_timeline WHERE minute = ? AND tweet_id = ?", write=True)
        self._minute_add = p(session, f"INSERT INTO {ks}.public_minutes (day, minute) VALUES (?, ?)", write=True)
        self._day_add = p(session, f"INSERT INTO {ks}.public_days (shard, day) VALUES (0, ?)", write=True)
        self._count = p(
            session, f"UPDATE {ks}.tweet_counts SET tweets = tweets + ? WHERE username_lc = ?", write=True, idempotent=False
        )
        self._counts = p(session, f"SELECT tweets FROM {ks}.tweet_counts WHERE username_lc = ?")
        self._userline = p(session, f"SELECT tweet_id FROM {ks}.userline WHERE username_lc = ? LIMIT ?")
        self._userline_before = p(session, f"SELECT tweet_id FROM {ks}.userline WHERE username_lc = ? AND tweet_id < ? LIMIT ?")
        # Ascending (min_id pages): the same partitions read oldest first.
        self._userline_after = p(
            session,
            f"SELECT tweet_id FROM {ks}.userline WHERE username_lc = ? AND tweet_id > ? ORDER BY tweet_id ASC LIMIT ?",
        )
        self._reserve = p(
            session,
            f"INSERT INTO {ks}.idempotency (username_lc, key, tweet_id, body) VALUES (?, ?, ?, ?) IF NOT EXISTS USING TTL ?",
            write=True,
            idempotent=False,
        )

    # --- writes -----------------------------------------------------------------

    async def create(self, tweet: Tweet, event: OutboxEvent, *, fresh: bool = False) -> bool:
        if fresh:
            return await self._create_fresh(tweet, event)
        (applied, _row), _ = await asyncio.gather(
            execute_lwt(self._session, self._insert, (tweet.id, tweet.username, tweet.body), name="tweet_create"),
            self._outbox.ensure_index(event),
        )
        statements, (day, minute) = self._line_rows(tweet, event)
        writes = [execute(self._session, batch(statements, logged=True), name="tweet_rows")]
        if applied:
            writes.append(execute(self._session, self._count, (1, canonical(tweet.username)), name="tweet_count"))
        await asyncio.gather(*writes)
        self._remember_index(day, minute)
        return applied

    async def _create_fresh(self, tweet: Tweet, event: OutboxEvent) -> bool:
        """A tweet whose id nobody else writes: one logged batch (tweet row,
        userline, public line, outbox row and its index) beside the counter
        update — one round trip instead of an LWT (four Paxos round trips,
        which queue behind fan-out writes on a busy node) and then a batch.
        The logged batch keeps the rule that no part of a tweet is visible
        unless its event is in the outbox too."""
        statements, (day, minute) = self._line_rows(tweet, event)
        statements.insert(0, (self._insert_plain, (tweet.id, tweet.username, tweet.body)))
        index = self._outbox.index_write(event)
        if index is not None:
            statements.append(index)
        await asyncio.gather(
            execute(self._session, batch(statements, logged=True), name="tweet_create_fresh"),
            execute(self._session, self._count, (1, canonical(tweet.username)), name="tweet_count"),
        )
        if index is not None:
            self._outbox.remember_index(event)
        self._remember_index(day, minute)
        return True

    def _line_rows(
        self, tweet: Tweet, event: OutboxEvent
    ) -> tuple[list[tuple[PreparedStatement, Sequence[Any]]], tuple[int, int]]:
        """The writes that place a tweet on its userline and the public line,
        with its outbox row; and the tweet's ``(day, minute)`` bucket."""
        day, minute = public_bucket(tweet.id)
        statements: list[tuple[PreparedStatement, Sequence[Any]]] = [
            (self._userline_add, (canonical(tweet.username), tweet.id)),
            (self._public_add, (minute, tweet.id)),
            self._outbox.row_write(event),
        ]
        # The minute and day index rows are only ever added, so this process
        # writes each once (they would otherwise be two hot partitions
        # rewritten by every tweet).
        if minute not in self._indexed_minutes:
            statements.append((self._minute_add, (day, minute)))
        if day not in self._indexed_days:
            statements.append((self._day_add, (day,)))
        return statements, (day, minute)

    def _remember_index(self, day: int, minute: int) -> None:
        if len(self._indexed_minutes) > 10_000:
            self._indexed_minutes.clear()
            self._indexed_days.clear()
        self._indexed_minutes.add(minute)
        self._indexed_days.add(day)

    async def delete(self, tweet: Tweet, event: OutboxEvent, *, remember_s: int = 0) -> bool:
        """The LWT decides "did it exist" (so the counter moves once); the
        logged batch after it also deletes the row with a *client* timestamp
        no earlier than the row's own write time. An unkeyed (``fresh``) tweet
        is a plain INSERT stamped by tweet-store's clock while the LWT is
        stamped by Cassandra's Paxos ballot: with tweet-store's clock ahead,
        the LWT's tombstone alone is older than the row and loses (issue 14).
        The deletion marker is written first, so a keyed repeat racing this
        delete sees it after its own rewrite (``TweetStore._repeat``)."""
        author = canonical(tweet.username)
        _day, minute = public_bucket(tweet.id)
        first: list[Awaitable[Any]] = [
            self._outbox.ensure_index(event),
            execute(self._session, self._writetime, (tweet.id,), name="tweet_writetime"),
        ]
        if remember_s > 0:
            first.append(
                execute(
                    self._session,
                    self._remember_deleted,
                    (tweet.id, max(1, min(remember_s + 1, MAX_TTL))),
                    name="tweet_remember_deleted",
                )
            )
        _, written, *_ = await asyncio.gather(*first)
        applied, _row = await execute_lwt(self._session, self._delete, (tweet.id,), name="tweet_delete")
        statements: list[tuple[PreparedStatement, Sequence[Any]]] = [
            (self._userline_del, (author, tweet.id)),
            (self._public_del, (minute, tweet.id)),
            self._outbox.row_write(event),
        ]
        if written and written[0].written is not None:
            stamp = max(int(written[0].written) + 1, int(time.time() * 1_000_000))
            statements.append((self._delete_plain, (stamp, tweet.id)))
        rows = batch(statements, logged=True)
        writes = [execute(self._session, rows, name="tweet_delete_rows")]
        if applied:
            writes.append(execute(self._session, self._count, (-1, author), name="tweet_count"))
        await asyncio.gather(*writes)
        return applied

    async def reserve_idempotency_key(self, username: str, key: str, candidate: Tweet, ttl_s: int) -> Tweet:
        applied, row = await execute_lwt(
            self._session,
            self._reserve,
            # +1: a TTL counts from the whole second of the write, and the key
            # must stay bound for at least ``ttl_s``.
            (canonical(username), key, candidate.id, candidate.body, max(1, min(ttl_s + 1, MAX_TTL))),
            name="idempotency_reserve",
        )
        if applied or row is None:
            return candidate
        return Tweet(id=row.tweet_id, username=candidate.username, body=row.body)

    # --- reads ------------------------------------------------------------------

    async def was_deleted(self, tweet_id: uuid.UUID) -> bool:
        return bool(await execute(self._session, self._was_deleted, (tweet_id,), name="tweet_was_deleted"))

    async def get(self, tweet_id: uuid.UUID) -> Tweet | None:
        rows = await execute(self._session, self._get, (tweet_id,), name="tweet_get")
        return _tweet(rows[0]) if rows else None

    async def get_many(self, tweet_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Tweet]:
        ids = list(dict.fromkeys(tweet_ids))
        if not ids:
            return {}
        results = await execute_concurrent(
            self._session, self._get, [(i,) for i in ids], name="tweet_get_many", concurrency=_LOOKUP_CONCURRENCY
        )
        return {i: _tweet(rows[0]) for i, rows in zip(ids, results, strict=True) if rows}

    async def userline(self, username: str, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        if limit <= 0:
            return []
        if before is None:
            rows = await execute(self._session, self._userline, (canonical(username), limit), name="userline")
        else:
            rows = await execute(self._session, self._userline_before, (canonical(username), before, limit), name="userline")
        return [r.tweet_id for r in rows]

    async def userline_after(self, username: str, limit: int, after: uuid.UUID | None) -> list[uuid.UUID]:
        if limit <= 0:
            return []
        floor = after if after is not None else _MIN_TIMEUUID
        rows = await execute(self._session, self._userline_after, (canonical(username), floor, limit), name="userline_after")
        return [r.tweet_id for r in rows]

    async def public(self, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        """Newest first (``cassandra_public.py``)."""
        return await self._public.public(limit, before)

    async def public_after(self, limit: int, after: uuid.UUID | None) -> list[uuid.UUID]:
        """Oldest first (``cassandra_public.py``)."""
        return await self._public.public_after(limit, after)

    async def counts(self, usernames: Sequence[str]) -> dict[str, int]:
        names = list(dict.fromkeys(canonical(u) for u in usernames))
        if not names:
            return {}
        results = await execute_concurrent(
            self._session, self._counts, [(n,) for n in names], name="tweet_counts", concurrency=_LOOKUP_CONCURRENCY
        )
        return {n: max(0, (rows[0].tweets or 0) if rows else 0) for n, rows in zip(names, results, strict=True)}


def _tweet(row: Any) -> Tweet:
    return Tweet(id=row.tweet_id, username=row.username, body=row.body)


def build(settings: StorageSettings, writes: HomeWrites, busy: Callable[[], bool]) -> TweetStoreStorage:
    keyspace = Keyspace(settings, OWNER, MIGRATIONS)
    outbox = keyspace.outbox()
    return TweetStoreStorage(
        tweets=CassandraTweets(keyspace, outbox),
        home=CassandraHomeTimeline(keyspace, writes, AdaptiveLimit(writes.limit, busy)),
        outbox=outbox,
        engine=keyspace,
        large=CassandraLargeAccounts(keyspace),
        slots=CassandraIdSlots(keyspace),
    )
