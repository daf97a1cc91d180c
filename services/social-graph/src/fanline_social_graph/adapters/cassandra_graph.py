"""Cassandra adapters of social-graph's follow graph: ``following`` /
``followers`` / ``follow_counts`` and the active-followers index (split out
of ``cassandra.py``, whose docstring says how follows are written so that a
retry heals a crashed attempt, and whose migrations hold these tables)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from cassandra.cluster import Session
from cassandra.query import ConsistencyLevel, PreparedStatement

from fanline_shared.cassandra import (
    CassandraOutbox,
    Keyspace,
    Repository,
    counter_batch,
    execute,
    execute_concurrent,
    execute_lwt,
    prepare,
    to_utc,
    truncate_ms,
)
from fanline_shared.domain import Edge, OutboxEvent, canonical

from ..ports import Activity

_LOOKUP_CONCURRENCY = 64


class CassandraFollows(Repository):
    def __init__(self, keyspace: Keyspace, outbox: CassandraOutbox) -> None:
        super().__init__(keyspace)
        self._outbox = outbox

    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        self._follow = prepare(
            session,
            f"INSERT INTO {ks}.following (follower_lc, followee_lc, followee, since) VALUES (?, ?, ?, ?) IF NOT EXISTS",
            write=True,
            idempotent=False,
        )
        self._unfollow = prepare(
            session,
            f"DELETE FROM {ks}.following WHERE follower_lc = ? AND followee_lc = ? IF EXISTS",
            write=True,
            idempotent=False,
        )
        self._add_follower = prepare(
            session, f"INSERT INTO {ks}.followers (followee_lc, follower_lc, follower, since) VALUES (?, ?, ?, ?)", write=True
        )
        self._remove_follower = prepare(
            session, f"DELETE FROM {ks}.followers WHERE followee_lc = ? AND follower_lc = ?", write=True
        )
        self._bump_followers = prepare(
            session,
            f"UPDATE {ks}.follow_counts SET followers = followers + ? WHERE username_lc = ?",
            write=True,
            idempotent=False,
        )
        self._bump_following = prepare(
            session,
            f"UPDATE {ks}.follow_counts SET following = following + ? WHERE username_lc = ?",
            write=True,
            idempotent=False,
        )
        self._is_following = prepare(session, f"SELECT since FROM {ks}.following WHERE follower_lc = ? AND followee_lc = ?")
        self._following = prepare(
            session, f"SELECT followee, since FROM {ks}.following WHERE follower_lc = ? AND followee_lc > ? LIMIT ?"
        )
        self._followers = prepare(
            session, f"SELECT follower, since FROM {ks}.followers WHERE followee_lc = ? AND follower_lc > ? LIMIT ?"
        )
        self._counts = prepare(session, f"SELECT followers, following FROM {ks}.follow_counts WHERE username_lc = ?")
        # SERIAL: sees (and completes) an LWT still in progress, so a repair
        # never acts on an edge about to change under it.
        self._edge_serial = prepare(
            session, f"SELECT followee, since FROM {ks}.following WHERE follower_lc = ? AND followee_lc = ?"
        )
        self._edge_serial.consistency_level = ConsistencyLevel.LOCAL_SERIAL

    async def _write(
        self,
        statements: Sequence[tuple[PreparedStatement, Sequence[Any]]],
        name: str,
        counters: Sequence[tuple[PreparedStatement, Sequence[Any]]] = (),
    ) -> None:
        """``statements`` each on its own and ``counters`` (both ends' counts)
        as one counter batch, all at once: one request fewer per follow than
        an update per counter (issue 31)."""
        writes = [execute(self._session, s, p, name=name) for s, p in statements]
        if counters:
            writes.append(execute(self._session, counter_batch(counters), name=name))
        await asyncio.gather(*writes)

    async def follow(self, follower: str, followee: str, since: datetime, event: OutboxEvent) -> bool:
        a, b = canonical(follower), canonical(followee)
        since = truncate_ms(since)
        await self._event_first(event)
        applied, row = await execute_lwt(self._session, self._follow, (a, b, followee, since), name="follow_edge")
        if not applied and row is not None and getattr(row, "since", None) is not None:
            since = row.since  # keep the reverse row identical to the edge
        counters = [(self._bump_followers, (1, b)), (self._bump_following, (1, a))] if applied else []
        await self._write([(self._add_follower, (b, a, follower, since))], "follow_rows", counters)
        return applied

    async def unfollow(self, follower: str, followee: str, event: OutboxEvent) -> bool:
        a, b = canonical(follower), canonical(followee)
        await self._event_first(event)
        applied, _row = await execute_lwt(self._session, self._unfollow, (a, b), name="unfollow_edge")
        counters = [(self._bump_followers, (-1, b)), (self._bump_following, (-1, a))] if applied else []
        await self._write([(self._remove_follower, (b, a))], "unfollow_rows", counters)
        return applied

    async def _event_first(self, event: OutboxEvent) -> None:
        """The event (and its minute index) before the edge's LWT: an edge
        change never exists without its event (see the module docstring)."""
        index = self._outbox.index_write(event)
        statement, params = self._outbox.row_write(event)
        writes = [execute(self._session, statement, params, name="follow_event")]
        if index is not None:
            writes.append(execute(self._session, index[0], index[1], name="outbox_index"))
        await asyncio.gather(*writes)
        if index is not None:
            self._outbox.remember_index(event)

    async def reconcile(self, follower: str, followee: str) -> bool:
        a, b = canonical(follower), canonical(followee)
        rows = await execute(self._session, self._edge_serial, (a, b), name="follow_reconcile_read")
        if rows:
            await execute(self._session, self._add_follower, (b, a, follower, rows[0].since), name="follow_reconcile")
            return True
        await execute(self._session, self._remove_follower, (b, a), name="follow_reconcile")
        return False

    async def is_following(self, follower: str, followee: str) -> bool:
        rows = await execute(self._session, self._is_following, (canonical(follower), canonical(followee)), name="is_following")
        return bool(rows)

    async def following(self, username: str, limit: int, after: str | None) -> list[Edge]:
        if limit <= 0:
            return []
        rows = await execute(
            self._session, self._following, (canonical(username), canonical(after or ""), limit), name="following"
        )
        return [Edge(username=r.followee, since=to_utc(r.since)) for r in rows]

    async def followers(self, username: str, limit: int, after: str | None) -> list[Edge]:
        if limit <= 0:
            return []
        rows = await execute(
            self._session, self._followers, (canonical(username), canonical(after or ""), limit), name="followers"
        )
        return [Edge(username=r.follower, since=to_utc(r.since)) for r in rows]

    async def counts(self, usernames: Sequence[str]) -> dict[str, tuple[int, int]]:
        names = list(dict.fromkeys(canonical(u) for u in usernames))
        if not names:
            return {}
        results = await execute_concurrent(
            self._session, self._counts, [(n,) for n in names], name="follow_counts", concurrency=_LOOKUP_CONCURRENCY
        )
        counts: dict[str, tuple[int, int]] = {}
        for name, rows in zip(names, results, strict=True):
            followers = (rows[0].followers or 0) if rows else 0
            following = (rows[0].following or 0) if rows else 0
            counts[name] = (max(0, followers), max(0, following))
        return counts


class CassandraActivity(Repository):
    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        self._get = prepare(session, f"SELECT last_seen, returned_at FROM {ks}.user_activity WHERE username_lc = ?")
        self._record = prepare(
            session, f"INSERT INTO {ks}.user_activity (username_lc, last_seen, returned_at) VALUES (?, ?, ?)", write=True
        )
        self._activate = prepare(
            session,
            f"INSERT INTO {ks}.followers_active (followee_lc, follower_lc, follower) VALUES (?, ?, ?) USING TTL ?",
            write=True,
        )
        self._deactivate = prepare(
            session, f"DELETE FROM {ks}.followers_active WHERE followee_lc = ? AND follower_lc = ?", write=True
        )
        self._active = prepare(
            session, f"SELECT follower FROM {ks}.followers_active WHERE followee_lc = ? AND follower_lc > ? LIMIT ?"
        )

    async def get(self, username: str) -> Activity:
        rows = await execute(self._session, self._get, (canonical(username),), name="activity_get")
        if not rows:
            return Activity(None, None)
        row = rows[0]
        return Activity(to_utc(row.last_seen) if row.last_seen else None, to_utc(row.returned_at) if row.returned_at else None)

    async def record(self, username: str, last_seen: datetime, returned_at: datetime | None) -> None:
        await execute(
            self._session,
            self._record,
            (canonical(username), truncate_ms(last_seen), truncate_ms(returned_at) if returned_at else None),
            name="activity_record",
        )

    async def activate(self, follower: str, followees: Sequence[str], ttl_s: int) -> None:
        a = canonical(follower)
        params = [(canonical(f), a, follower, ttl_s) for f in dict.fromkeys(followees)]
        if params:
            await execute_concurrent(
                self._session, self._activate, params, name="followers_activate", concurrency=_LOOKUP_CONCURRENCY
            )

    async def deactivate(self, follower: str, followee: str) -> None:
        await execute(self._session, self._deactivate, (canonical(followee), canonical(follower)), name="followers_deactivate")

    async def active_followers(self, username: str, limit: int, after: str | None) -> list[Edge]:
        if limit <= 0:
            return []
        rows = await execute(
            self._session, self._active, (canonical(username), canonical(after or ""), limit), name="followers_active"
        )
        return [Edge(username=r.follower, since=_EPOCH) for r in rows]


_EPOCH = datetime.fromtimestamp(0, UTC)
