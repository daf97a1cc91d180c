"""Embedded SQLite adapters of tweet-store (the default backend).

One file (``<data_dir>/<keyspace("tweet_store")>.sqlite3``); every operation is
one transaction on the database's single thread. The ``tweets`` table doubles
as the userline (index ``(username_lc, sort_key)``) and the public timeline
(unique index on ``sort_key``): a tweet, its timeline entries, its count and
its outbox event commit atomically. Timeuuids are stored as text with a sort
key (``domain.timeuuid_sort_key``) that orders rows like Cassandra's timeuuid
clustering. Home timelines and the large-account registry are in
``sqlite_home.py``; every table's migration is here.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Sequence

from fanline_shared.config import StorageSettings
from fanline_shared.domain import OutboxEvent, Tweet, canonical, timeuuid_sort_key
from fanline_shared.sqlite import (
    SqliteDatabase,
    SqliteOutbox,
    append_event,
    now_ms,
)
from fanline_shared.storage_service.schema import Migration
from fanline_shared.storage_service.sqlite_engine import SqliteEngine

from ..home_writes import HomeWrites
from . import OWNER, TweetStoreStorage
from .sqlite_home import SqliteHomeTimeline, SqliteLargeAccounts, after_key, before_key
from .sqlite_slots import SqliteIdSlots

_PURGE_EVERY = 512  # idempotency reservations between purges of expired keys
_PURGE_BATCH = 5000

SCHEMA = """
CREATE TABLE IF NOT EXISTS tweets (
    tweet_id TEXT PRIMARY KEY,
    sort_key TEXT NOT NULL UNIQUE,
    username TEXT NOT NULL,
    username_lc TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tweets_by_user ON tweets (username_lc, sort_key);
CREATE TABLE IF NOT EXISTS tweet_counts (
    username_lc TEXT PRIMARY KEY,
    tweets INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS home_timeline (
    owner_lc TEXT NOT NULL,
    sort_key TEXT NOT NULL,
    tweet_id TEXT NOT NULL,
    author_lc TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    UNIQUE (owner_lc, sort_key)
);
CREATE INDEX IF NOT EXISTS home_by_expiry ON home_timeline (expires_at);
CREATE TABLE IF NOT EXISTS idempotency (
    username_lc TEXT NOT NULL,
    key TEXT NOT NULL,
    tweet_id TEXT NOT NULL,
    body TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (username_lc, key)
) WITHOUT ROWID;
"""

# Deleted tweets remembered for the idempotency window, so a keyed repeat
# after a delete answers 404 instead of restoring the tweet.
DELETED_MIGRATION = """
CREATE TABLE IF NOT EXISTS deleted_tweets (
    tweet_id TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
"""

# Bounded home timelines and large accounts: each owner's horizon (the
# oldest id its stored rows are trusted down to) and the registry of authors
# whose tweets are merged at read time.
HYBRID_MIGRATION = """
CREATE TABLE IF NOT EXISTS home_meta (
    owner_lc TEXT PRIMARY KEY,
    horizon_key TEXT,
    horizon TEXT,
    regenerated_at INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS home_regeneration (
    owner_lc TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS large_accounts (
    author_lc TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
"""

# The leases of the 64 status-id slots (``ports.IdSlots``, ``sqlite_slots.py``):
# one row per slot held, taken when absent or expired (by this machine's
# clock, shared by every process on the file).
ID_SLOTS_MIGRATION = """
CREATE TABLE IF NOT EXISTS id_slots (
    slot INTEGER PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""

# Composed with the outbox's by the engine (``storage_service.schema``).
MIGRATIONS = (
    Migration(1, SCHEMA),
    Migration(3, DELETED_MIGRATION),
    Migration(3, HYBRID_MIGRATION),
    Migration(7, ID_SLOTS_MIGRATION),
)

_COUNT = (
    "INSERT INTO tweet_counts (username_lc, tweets) VALUES (?, ?) "
    "ON CONFLICT (username_lc) DO UPDATE SET tweets = tweets + excluded.tweets"
)


class SqliteTweets:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        self._reservations = 0

    async def create(self, tweet: Tweet, event: OutboxEvent, *, fresh: bool = False) -> bool:
        # One local transaction either way: ``fresh`` saves nothing here.
        params = (str(tweet.id), timeuuid_sort_key(tweet.id), tweet.username, canonical(tweet.username), tweet.body)

        def write(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "INSERT INTO tweets (tweet_id, sort_key, username, username_lc, body) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                params,
            )
            created = cur.rowcount == 1
            if created:
                conn.execute(_COUNT, (params[3], 1))
            # Like the Cassandra adapter: the event is appended whether or not
            # the tweet was new (same event id: stored once).
            append_event(conn, event)
            return created

        return await self.db.run(write, name="tweet_create")

    async def delete(self, tweet: Tweet, event: OutboxEvent, *, remember_s: int = 0) -> bool:
        tweet_id, author = str(tweet.id), canonical(tweet.username)

        def write(conn: sqlite3.Connection) -> bool:
            cur = conn.execute("DELETE FROM tweets WHERE tweet_id = ?", (tweet_id,))
            deleted = cur.rowcount == 1
            if deleted:
                conn.execute(_COUNT, (author, -1))
            if remember_s > 0:
                conn.execute(
                    "INSERT INTO deleted_tweets (tweet_id, expires_at) VALUES (?, ?) "
                    "ON CONFLICT (tweet_id) DO UPDATE SET expires_at = MAX(expires_at, excluded.expires_at)",
                    (tweet_id, now_ms() + remember_s * 1000),
                )
            append_event(conn, event)
            return deleted

        return await self.db.run(write, name="tweet_delete")

    async def was_deleted(self, tweet_id: uuid.UUID) -> bool:
        def read(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT 1 FROM deleted_tweets WHERE tweet_id = ? AND expires_at > ?", (str(tweet_id), now_ms())
            ).fetchone()
            return row is not None

        return await self.db.run(read, name="tweet_was_deleted", write=False)

    async def reserve_idempotency_key(self, username: str, key: str, candidate: Tweet, ttl_s: int) -> Tweet:
        user_lc = canonical(username)
        self._reservations += 1
        purge = self._reservations % _PURGE_EVERY == 0

        def reserve(conn: sqlite3.Connection) -> Tweet:
            now = now_ms()
            row = conn.execute(
                "SELECT tweet_id, body FROM idempotency WHERE username_lc = ? AND key = ? AND expires_at > ?",
                (user_lc, key, now),
            ).fetchone()
            if row is not None:
                return Tweet(id=uuid.UUID(row[0]), username=candidate.username, body=row[1])
            conn.execute(
                "INSERT INTO idempotency (username_lc, key, tweet_id, body, expires_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (username_lc, key) DO UPDATE SET tweet_id = excluded.tweet_id, "
                "body = excluded.body, expires_at = excluded.expires_at",
                (user_lc, key, str(candidate.id), candidate.body, now + max(1, ttl_s) * 1000),
            )
            if purge:  # now and then, forget expired keys and deletions (bounded)
                conn.execute(
                    "DELETE FROM idempotency WHERE (username_lc, key) IN "
                    "(SELECT username_lc, key FROM idempotency WHERE expires_at <= ? LIMIT ?)",
                    (now, _PURGE_BATCH),
                )
                conn.execute(
                    "DELETE FROM deleted_tweets WHERE tweet_id IN "
                    "(SELECT tweet_id FROM deleted_tweets WHERE expires_at <= ? LIMIT ?)",
                    (now, _PURGE_BATCH),
                )
            return candidate

        return await self.db.run(reserve, name="idempotency_reserve")

    async def get(self, tweet_id: uuid.UUID) -> Tweet | None:
        return (await self.get_many([tweet_id])).get(tweet_id)

    async def get_many(self, tweet_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Tweet]:
        ids = list(dict.fromkeys(tweet_ids))
        if not ids:
            return {}
        by_text = {str(i): i for i in ids}

        def read(conn: sqlite3.Connection) -> dict[uuid.UUID, Tweet]:
            marks = ",".join("?" * len(by_text))
            rows = conn.execute(
                f"SELECT tweet_id, username, body FROM tweets WHERE tweet_id IN ({marks})", list(by_text)
            ).fetchall()
            return {by_text[r[0]]: Tweet(id=by_text[r[0]], username=r[1], body=r[2]) for r in rows}

        return await self.db.run(read, name="tweet_get_many", write=False)

    async def userline(self, username: str, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        if limit <= 0:
            return []
        params = (canonical(username), before_key(before), limit)

        def read(conn: sqlite3.Connection) -> list[uuid.UUID]:
            rows = conn.execute(
                "SELECT tweet_id FROM tweets WHERE username_lc = ? AND sort_key < ? ORDER BY sort_key DESC LIMIT ?",
                params,
            )
            return [uuid.UUID(r[0]) for r in rows]

        return await self.db.run(read, name="userline", write=False)

    async def public(self, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        if limit <= 0:
            return []
        params = (before_key(before), limit)

        def read(conn: sqlite3.Connection) -> list[uuid.UUID]:
            rows = conn.execute("SELECT tweet_id FROM tweets WHERE sort_key < ? ORDER BY sort_key DESC LIMIT ?", params)
            return [uuid.UUID(r[0]) for r in rows]

        return await self.db.run(read, name="public", write=False)

    async def userline_after(self, username: str, limit: int, after: uuid.UUID | None) -> list[uuid.UUID]:
        if limit <= 0:
            return []
        params = (canonical(username), after_key(after), limit)

        def read(conn: sqlite3.Connection) -> list[uuid.UUID]:
            rows = conn.execute(
                "SELECT tweet_id FROM tweets WHERE username_lc = ? AND sort_key > ? ORDER BY sort_key ASC LIMIT ?",
                params,
            )
            return [uuid.UUID(r[0]) for r in rows]

        return await self.db.run(read, name="userline_after", write=False)

    async def public_after(self, limit: int, after: uuid.UUID | None) -> list[uuid.UUID]:
        if limit <= 0:
            return []
        params = (after_key(after), limit)

        def read(conn: sqlite3.Connection) -> list[uuid.UUID]:
            rows = conn.execute("SELECT tweet_id FROM tweets WHERE sort_key > ? ORDER BY sort_key ASC LIMIT ?", params)
            return [uuid.UUID(r[0]) for r in rows]

        return await self.db.run(read, name="public_after", write=False)

    async def counts(self, usernames: Sequence[str]) -> dict[str, int]:
        names = list(dict.fromkeys(canonical(u) for u in usernames))
        if not names:
            return {}

        def read(conn: sqlite3.Connection) -> dict[str, int]:
            marks = ",".join("?" * len(names))
            found = dict(conn.execute(f"SELECT username_lc, tweets FROM tweet_counts WHERE username_lc IN ({marks})", names))
            return {n: max(0, found.get(n, 0)) for n in names}

        return await self.db.run(read, name="tweet_counts", write=False)


def build(settings: StorageSettings, writes: HomeWrites, busy: Callable[[], bool]) -> TweetStoreStorage:
    """One local transaction per write: only ``writes.retention_s`` applies."""
    db = SqliteDatabase.for_owner(settings, OWNER)
    home = SqliteHomeTimeline(db, writes.retention_s)
    return TweetStoreStorage(
        tweets=SqliteTweets(db),
        home=home,
        outbox=SqliteOutbox(db),
        engine=SqliteEngine(db, MIGRATIONS, after_migrate=home.purge),
        large=SqliteLargeAccounts(db),
        slots=SqliteIdSlots(db),
    )
