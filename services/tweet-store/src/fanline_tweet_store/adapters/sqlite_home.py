"""Embedded SQLite adapters of tweet-store's home timelines and large-account
registry (split out of ``sqlite.py``, whose migrations hold their tables).

Home-timeline rows carry ``expires_at`` (tweet time + retention): rows
already expired are not written, expired rows are filtered on read and
purged in the background of writes. Each owner's horizon and last
regeneration are in ``home_meta``; ``large_accounts`` rows expire too.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from datetime import datetime

from fanline_shared.domain import canonical, timeuuid_sort_key, timeuuid_time
from fanline_shared.sqlite import SqliteDatabase, from_ms, now_ms, to_ms

from ..ports import HomeWindow, TrimOutcome

_PURGE_EVERY = 512  # home-timeline writes between purges of expired rows
_PURGE_BATCH = 5000
_MAX_KEY = "g"  # sorts after every (hex) sort key


def after_key(after: uuid.UUID | None) -> str:
    """The sort key strictly above which an oldest-first read starts."""
    return "" if after is None else timeuuid_sort_key(after)


def before_key(before: uuid.UUID | None) -> str:
    """The sort-key bound of a page strictly older than ``before``."""
    return _MAX_KEY if before is None else timeuuid_sort_key(before)


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

    async def by_author(self, owner: str, author: str) -> list[uuid.UUID]:
        params = (canonical(owner), canonical(author), now_ms())

        def read(conn: sqlite3.Connection) -> list[uuid.UUID]:
            rows = conn.execute(
                "SELECT tweet_id FROM home_timeline WHERE owner_lc = ? AND author_lc = ? AND expires_at > ? "
                "ORDER BY sort_key DESC",
                params,
            )
            return [uuid.UUID(r[0]) for r in rows]

        return await self.db.run(read, name="home_by_author", write=False)

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
        params = (owner_lc, before_key(before), now_ms(), limit)

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

    async def window_after(self, owner: str, limit: int, after: uuid.UUID | None) -> HomeWindow:
        if limit <= 0:
            return HomeWindow([], None)
        owner_lc = canonical(owner)
        params = (owner_lc, after_key(after), now_ms(), limit)

        def read(conn: sqlite3.Connection) -> HomeWindow:
            rows = conn.execute(
                "SELECT tweet_id FROM home_timeline WHERE owner_lc = ? AND sort_key > ? AND expires_at > ? "
                "ORDER BY sort_key ASC LIMIT ?",
                params,
            )
            ids = [uuid.UUID(r[0]) for r in rows]
            meta = conn.execute("SELECT horizon FROM home_meta WHERE owner_lc = ?", (owner_lc,)).fetchone()
            return HomeWindow(ids, uuid.UUID(meta[0]) if meta and meta[0] else None)

        return await self.db.run(read, name="home_slice_after", write=False)

    async def trim(self, owner: str, keep: int) -> uuid.UUID | None:
        return (await self.trim_counted(owner, keep)).horizon

    async def trim_counted(self, owner: str, keep: int) -> TrimOutcome:
        owner_lc = canonical(owner)

        def write(conn: sqlite3.Connection) -> TrimOutcome:
            # One read of the newest ``keep + 1`` rows, as the Cassandra adapter scans.
            rows = conn.execute(
                "SELECT sort_key, tweet_id FROM home_timeline WHERE owner_lc = ? ORDER BY sort_key DESC LIMIT ?",
                (owner_lc, keep + 1),
            ).fetchall()
            newest = uuid.UUID(rows[0][1]) if rows else None
            if len(rows) <= keep:
                return TrimOutcome(None, len(rows), newest)
            key, tweet_id = rows[keep - 1]
            conn.execute("DELETE FROM home_timeline WHERE owner_lc = ? AND sort_key < ?", (owner_lc, key))
            _raise_horizon(conn, owner_lc, key, tweet_id)
            return TrimOutcome(uuid.UUID(tweet_id), len(rows), newest)

        return await self.db.run(write, name="home_trim")

    async def count_newer(self, owner: str, after: uuid.UUID, limit: int) -> tuple[int, uuid.UUID | None]:
        if limit <= 0:
            return 0, None
        params = (canonical(owner), timeuuid_sort_key(after), limit)

        def read(conn: sqlite3.Connection) -> tuple[int, uuid.UUID | None]:
            rows = conn.execute(
                "SELECT tweet_id FROM home_timeline WHERE owner_lc = ? AND sort_key > ? ORDER BY sort_key DESC LIMIT ?", params
            ).fetchall()
            return len(rows), (uuid.UUID(rows[0][0]) if rows else None)

        return await self.db.run(read, name="home_count_newer", write=False)

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
