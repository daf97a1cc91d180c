"""Embedded SQLite adapters of social-graph's follow graph: ``following`` /
``followers`` / ``follow_counts`` and the active-followers index (split out
of ``sqlite.py``, whose migrations hold these tables; mirrors
``cassandra_graph.py``). Each follow or unfollow is one transaction, so the
edge, its reverse row, both counts and the outbox event commit together."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from fanline_shared.domain import Edge, OutboxEvent, canonical
from fanline_shared.sqlite import SqliteDatabase, append_event, from_ms, now_ms, to_ms

from ..ports import Activity

_BUMP = (
    "INSERT INTO follow_counts (username_lc, {column}) VALUES (?, ?) "
    "ON CONFLICT (username_lc) DO UPDATE SET {column} = {column} + excluded.{column}"
)


class SqliteFollows:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def follow(self, follower: str, followee: str, since: datetime, event: OutboxEvent) -> bool:
        a, b, ms = canonical(follower), canonical(followee), to_ms(since)

        def write(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "INSERT INTO following (follower_lc, followee_lc, followee, since) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (a, b, followee, ms),
            )
            created = cur.rowcount == 1
            if created:
                conn.execute(
                    "INSERT INTO followers (followee_lc, follower_lc, follower, since) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    (b, a, follower, ms),
                )
                conn.execute(_BUMP.format(column="followers"), (b, 1))
                conn.execute(_BUMP.format(column="following"), (a, 1))
            # Like the Cassandra adapter: the event is appended whether or not
            # the edge was new (events are idempotent; same event id: once).
            append_event(conn, event)
            return created

        return await self.db.run(write, name="follow")

    async def unfollow(self, follower: str, followee: str, event: OutboxEvent) -> bool:
        a, b = canonical(follower), canonical(followee)

        def write(conn: sqlite3.Connection) -> bool:
            cur = conn.execute("DELETE FROM following WHERE follower_lc = ? AND followee_lc = ?", (a, b))
            removed = cur.rowcount == 1
            if removed:
                conn.execute("DELETE FROM followers WHERE followee_lc = ? AND follower_lc = ?", (b, a))
                conn.execute(_BUMP.format(column="followers"), (b, -1))
                conn.execute(_BUMP.format(column="following"), (a, -1))
            append_event(conn, event)
            return removed

        return await self.db.run(write, name="unfollow")

    async def reconcile(self, follower: str, followee: str) -> bool:
        # One transaction per follow/unfollow: the rows always agree already.
        return await self.is_following(follower, followee)

    async def is_following(self, follower: str, followee: str) -> bool:
        a, b = canonical(follower), canonical(followee)

        def read(conn: sqlite3.Connection) -> bool:
            row = conn.execute("SELECT 1 FROM following WHERE follower_lc = ? AND followee_lc = ?", (a, b)).fetchone()
            return row is not None

        return await self.db.run(read, name="is_following", write=False)

    async def following(self, username: str, limit: int, after: str | None) -> list[Edge]:
        return await self._edges(
            "SELECT followee, since FROM following WHERE follower_lc = ? AND followee_lc > ? ORDER BY followee_lc LIMIT ?",
            username,
            limit,
            after,
            "following",
        )

    async def followers(self, username: str, limit: int, after: str | None) -> list[Edge]:
        return await self._edges(
            "SELECT follower, since FROM followers WHERE followee_lc = ? AND follower_lc > ? ORDER BY follower_lc LIMIT ?",
            username,
            limit,
            after,
            "followers",
        )

    async def _edges(self, sql: str, username: str, limit: int, after: str | None, name: str) -> list[Edge]:
        if limit <= 0:
            return []
        params = (canonical(username), canonical(after or ""), limit)

        def read(conn: sqlite3.Connection) -> list[Edge]:
            return [Edge(username=r[0], since=from_ms(r[1])) for r in conn.execute(sql, params)]

        return await self.db.run(read, name=name, write=False)

    async def counts(self, usernames: Sequence[str]) -> dict[str, tuple[int, int]]:
        names = list(dict.fromkeys(canonical(u) for u in usernames))
        if not names:
            return {}

        def read(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
            marks = ",".join("?" * len(names))
            found = {
                r[0]: (max(0, r[1]), max(0, r[2]))
                for r in conn.execute(
                    f"SELECT username_lc, followers, following FROM follow_counts WHERE username_lc IN ({marks})",
                    names,
                )
            }
            return {n: found.get(n, (0, 0)) for n in names}

        return await self.db.run(read, name="follow_counts", write=False)


class SqliteActivity:
    """Activity and active followers; expired index rows are filtered on read
    and deleted when their follower is written again."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def get(self, username: str) -> Activity:
        name = canonical(username)

        def read(conn: sqlite3.Connection) -> Activity:
            row = conn.execute("SELECT last_seen, returned_at FROM user_activity WHERE username_lc = ?", (name,)).fetchone()
            if row is None:
                return Activity(None, None)
            return Activity(from_ms(row[0]), from_ms(row[1]) if row[1] is not None else None)

        return await self.db.run(read, name="activity_get", write=False)

    async def record(self, username: str, last_seen: datetime, returned_at: datetime | None) -> None:
        params = (canonical(username), to_ms(last_seen), to_ms(returned_at) if returned_at else None)
        await self.db.run(
            lambda conn: conn.execute(
                "INSERT INTO user_activity (username_lc, last_seen, returned_at) VALUES (?, ?, ?) "
                "ON CONFLICT (username_lc) DO UPDATE SET last_seen = excluded.last_seen, returned_at = excluded.returned_at",
                params,
            ),
            name="activity_record",
        )

    async def activate(self, follower: str, followees: Sequence[str], ttl_s: int) -> None:
        expires, a = now_ms() + ttl_s * 1000, canonical(follower)
        rows = [(canonical(f), a, follower, expires) for f in dict.fromkeys(followees)]
        if not rows:
            return
        await self.db.run(
            lambda conn: conn.executemany(
                "INSERT INTO followers_active (followee_lc, follower_lc, follower, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (followee_lc, follower_lc) DO UPDATE SET expires_at = excluded.expires_at",
                rows,
            ),
            name="followers_activate",
        )

    async def deactivate(self, follower: str, followee: str) -> None:
        params = (canonical(followee), canonical(follower))
        await self.db.run(
            lambda conn: conn.execute("DELETE FROM followers_active WHERE followee_lc = ? AND follower_lc = ?", params),
            name="followers_deactivate",
        )

    async def active_followers(self, username: str, limit: int, after: str | None) -> list[Edge]:
        if limit <= 0:
            return []
        params = (canonical(username), canonical(after or ""), now_ms(), limit)

        def read(conn: sqlite3.Connection) -> list[Edge]:
            rows = conn.execute(
                "SELECT follower FROM followers_active WHERE followee_lc = ? AND follower_lc > ? AND expires_at > ? "
                "ORDER BY follower_lc LIMIT ?",
                params,
            )
            return [Edge(username=r[0], since=from_ms(0)) for r in rows]

        return await self.db.run(read, name="followers_active", write=False)
