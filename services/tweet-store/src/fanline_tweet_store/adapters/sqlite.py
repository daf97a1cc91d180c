"""Embedded SQLite adapters of tweet-store (the default backend).

One file (``<data_dir>/<keyspace("tweet_store")>.sqlite3``); every operation is
one transaction on the database's single thread. The ``tweets`` table doubles
as the userline (index ``(username_lc, sort_key)``) and the public timeline
(unique index on ``sort_key``): a tweet, its timeline entries, its count and
its outbox event commit atomically. Timeuuids are stored as text with a sort
key (``domain.timeuuid_sort_key``) that orders rows like Cassandra's timeuuid
clustering. Home-timeline rows carry ``expires_at`` (tweet time + retention):
rows already expired are not written, expired rows are filtered on read and
purged in the background of writes.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime

from fanline_shared.config import StorageSettings
from fanline_shared.domain import OutboxEvent, Tweet, canonical, timeuuid_sort_key, timeuuid_time
from fanline_shared.sqlite import (
    SqliteDatabase,
    SqliteOutbox,
    append_event,
    from_ms,
    now_ms,
    to_ms,
)
from fanline_shared.storage_service.schema import Migration
from fanline_shared.storage_service.sqlite_engine import SqliteEngine

from ..home_writes import HomeWrites
from ..ports import HomeWindow
from . import OWNER, TweetStoreStorage

_PURGE_EVERY = 512  # home-timeline writes between purges of expired rows
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

# Composed with the outbox's by the engine (``storage_service.schema``).
MIGRATIONS = (Migration(1, SCHEMA), Migration(3, DELETED_MIGRATION), Migration(3, HYBRID_MIGRATION))

_COUNT = (
    "INSERT INTO tweet_counts (username_lc, tweets) VALUES (?, ?) "
    "ON CONFLICT (username_lc) DO UPDATE SET tweets = tweets + excluded.tweets"
)
_MAX_KEY = "g"  # sorts after every (hex) sort key


def _bound(before: uuid.UUID | None) -> str:
    return _MAX_KEY if before is None else timeuuid_sort_key(before)


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
        params = (canonical(username), _bound(before), limit)

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
        params = (_bound(before), limit)

        def read(conn: sqlite3.Connection) -> list[uuid.UUID]:
            rows = conn.execute("SELECT tweet_id FROM tweets WHERE sort_key < ? ORDER BY sort_key DESC LIMIT ?", params)
            return [uuid.UUID(r[0]) for r in rows]

        return await self.db.run(read, name="public", write=False)

    async def counts(self, usernames: Sequence[str]) -> dict[str, int]:
        names = list(dict.fromkeys(canonical(u) for u in usernames))
        if not names:
            return {}

        def read(conn: sqlite3.Connection) -> dict[str, int]:
            marks = ",".join("?" * len(names))
            found = dict(conn.execute(f"SELECT username_lc, tweets FROM tweet_counts WHERE username_lc IN ({marks})", names))
            return {n: max(0, found.get(n, 0)) for n in names}

        return await self.db.run(read, name="tweet_counts", write=False)


class SqliteHomeTimeline:
    def __init__(self, db: SqliteDatabase, retention_s: int) -> None:
        self.db = db
        self._retention_ms = retention_s * 1000
        self._writes = 0

    def _expiry(self, tweet_id: uuid.UUID) -> int:
        return to_ms(timeuuid_time(tweet_id)) + self._retention_ms

    async def add(self, owners: Sequence[str], tweet_id: uuid.UUID, author: str) -> None:
        names = list(dict.fromkeys(canonical(o) for o in owners))
        expires = self._expiry(tweet_id)
        if not names or expires <= now_ms():
            return
        key, text, author_lc = timeuuid_sort_key(tweet_id), str(tweet_id), canonical(author)
        await self._insert([(o, key, text, author_lc, expires) for o in names], "home_add")

    async def add_many(self, owner: str, entries: Sequence[tuple[uuid.UUID, str]]) -> None:
        owner_lc, now = canonical(owner), now_ms()
        rows = []
        for tweet_id, author in dict.fromkeys(entries):
            expires = self._expiry(tweet_id)
            if expires > now:
                rows.append((owner_lc, timeuuid_sort_key(tweet_id), str(tweet_id), canonical(author), expires))
        await self._insert(rows, "home_add_many")

    async def _insert(self, rows: list[tuple[str, str, str, str, int]], name: str) -> None:
        if not rows:
            return
        self._writes += 1
        purge = self._writes % _PURGE_EVERY == 0

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO home_timeline (owner_lc, sort_key, tweet_id, author_lc, expires_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                rows,
            )
            if purge:
                _purge(conn)

        await self.db.run(write, name=name)

    async def remove(self, owners: Sequence[str], tweet_id: uuid.UUID) -> None:
        key = timeuuid_sort_key(tweet_id)
        params = [(canonical(o), key) for o in dict.fromkeys(owners)]
        await self._delete(params, "home_remove")

    async def remove_many(self, owner: str, tweet_ids: Sequence[uuid.UUID]) -> None:
        owner_lc = canonical(owner)
        await self._delete([(owner_lc, timeuuid_sort_key(i)) for i in dict.fromkeys(tweet_ids)], "home_remove_many")

    async def present(self, owner: str, tweet_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        ids = list(dict.fromkeys(tweet_ids))
        owner_lc = canonical(owner)

        def read(conn: sqlite3.Connection) -> set[str]:
            found: set[str] = set()
            for start in range(0, len(ids), 500):  # by (owner_lc, sort_key): the unique index
                chunk = [timeuuid_sort_key(i) for i in ids[start : start + 500]]
                marks = ",".join("?" * len(chunk))
                found.update(
                    r[0]
                    for r in conn.execute(
                        f"SELECT tweet_id FROM home_timeline WHERE owner_lc = ? AND sort_key IN ({marks})", (owner_lc, *chunk)
                    )
                )
            return found

        found = await self.db.run(read, name="home_present", write=False) if ids else set()
        return [i for i in ids if str(i) in found]

    async def _delete(self, params: list[tuple[str, str]], name: str) -> None:
        if not params:
            return
        await self.db.run(
            lambda conn: conn.executemany("DELETE FROM home_timeline WHERE owner_lc = ? AND sort_key = ?", params),
            name=name,
        )

    async def slice(self, owner: str, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        return (await self.window(owner, limit, before)).ids

    async def window(self, owner: str, limit: int, before: uuid.UUID | None) -> HomeWindow:
        if limit <= 0:
            return HomeWindow([], None)
        owner_lc = canonical(owner)
        params = (owner_lc, _bound(before), now_ms(), limit)

        def read(conn: sqlite3.Connection) -> HomeWindow:
            rows = conn.execute(
                "SELECT tweet_id FROM home_timeline WHERE owner_lc = ? AND sort_key < ? AND expires_at > ? "
                "ORDER BY sort_key DESC LIMIT ?",
                params,
            )
            ids = [uuid.UUID(r[0]) for r in rows]
            meta = conn.execute("SELECT horizon FROM home_meta WHERE owner_lc = ?", (owner_lc,)).fetchone()
            return HomeWindow(ids, uuid.UUID(meta[0]) if meta and meta[0] else None)

        return await self.db.run(read, name="home_slice", write=False)

    async def trim(self, owner: str, keep: int) -> uuid.UUID | None:
        owner_lc = canonical(owner)

        def write(conn: sqlite3.Connection) -> uuid.UUID | None:
            rows = conn.execute(
                "SELECT sort_key, tweet_id FROM home_timeline WHERE owner_lc = ? ORDER BY sort_key DESC LIMIT 2 OFFSET ?",
                (owner_lc, keep - 1),
            ).fetchall()
            if len(rows) < 2:  # ``keep`` rows or fewer
                return None
            key, tweet_id = rows[0]
            conn.execute("DELETE FROM home_timeline WHERE owner_lc = ? AND sort_key < ?", (owner_lc, key))
            _raise_horizon(conn, owner_lc, key, tweet_id)
            return uuid.UUID(tweet_id)

        return await self.db.run(write, name="home_trim")

    async def raise_horizon(self, owner: str, tweet_id: uuid.UUID) -> None:
        params = (canonical(owner), timeuuid_sort_key(tweet_id), str(tweet_id))
        await self.db.run(lambda conn: _raise_horizon(conn, *params), name="home_horizon_raise")

    async def regenerated_at(self, owner: str) -> datetime | None:
        owner_lc = canonical(owner)

        def read(conn: sqlite3.Connection) -> datetime | None:
            row = conn.execute("SELECT regenerated_at FROM home_meta WHERE owner_lc = ?", (owner_lc,)).fetchone()
            return from_ms(row[0]) if row and row[0] is not None else None

        return await self.db.run(read, name="home_regenerated_at", write=False)

    async def mark_regenerated(self, owner: str, at: datetime) -> None:
        params = (canonical(owner), to_ms(at))
        await self.db.run(
            lambda conn: conn.execute(
                "INSERT INTO home_meta (owner_lc, regenerated_at) VALUES (?, ?) ON CONFLICT (owner_lc) DO UPDATE "
                "SET regenerated_at = max(coalesce(regenerated_at, 0), excluded.regenerated_at)",
                params,
            ),
            name="home_mark_regenerated",
        )

    async def claim_regeneration(self, owner: str, ttl_s: int) -> bool:
        owner_lc, now = canonical(owner), now_ms()

        def claim(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM home_regeneration WHERE owner_lc = ? AND expires_at <= ?", (owner_lc, now))
            cur = conn.execute(
                "INSERT INTO home_regeneration (owner_lc, expires_at) VALUES (?, ?) ON CONFLICT (owner_lc) DO NOTHING",
                (owner_lc, now + ttl_s * 1000),
            )
            return cur.rowcount == 1

        return await self.db.run(claim, name="home_regeneration_claim")

    async def release_regeneration(self, owner: str) -> None:
        owner_lc = canonical(owner)
        await self.db.run(
            lambda conn: conn.execute("DELETE FROM home_regeneration WHERE owner_lc = ?", (owner_lc,)),
            name="home_regeneration_release",
        )

    async def purge(self) -> None:
        """Delete expired rows (bounded; runs at start and every few hundred writes)."""
        await self.db.run(_purge, name="home_purge")


def _purge(conn: sqlite3.Connection) -> None:
    conn.execute(
        "DELETE FROM home_timeline WHERE rowid IN (SELECT rowid FROM home_timeline WHERE expires_at <= ? LIMIT ?)",
        (now_ms(), _PURGE_BATCH),
    )


def _raise_horizon(conn: sqlite3.Connection, owner_lc: str, key: str, tweet_id: str) -> None:
    conn.execute(
        "INSERT INTO home_meta (owner_lc, horizon_key, horizon) VALUES (?, ?, ?) "
        "ON CONFLICT (owner_lc) DO UPDATE SET horizon_key = excluded.horizon_key, horizon = excluded.horizon "
        "WHERE home_meta.horizon_key IS NULL OR excluded.horizon_key > home_meta.horizon_key",
        (owner_lc, key, tweet_id),
    )


class SqliteLargeAccounts:
    """The registry of large accounts, rows with an expiry."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def register(self, author: str, ttl_s: int) -> None:
        params = (canonical(author), now_ms() + ttl_s * 1000)
        await self.db.run(
            lambda conn: conn.execute(
                "INSERT INTO large_accounts (author_lc, expires_at) VALUES (?, ?) "
                "ON CONFLICT (author_lc) DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)",
                params,
            ),
            name="large_register",
        )

    async def members(self) -> set[str]:
        now = now_ms()

        def read(conn: sqlite3.Connection) -> set[str]:
            return {r[0] for r in conn.execute("SELECT author_lc FROM large_accounts WHERE expires_at > ?", (now,))}

        return await self.db.run(read, name="large_members", write=False)


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
    )
