"""Cassandra adapters of social-graph: users, sessions, the follow graph, outbox.

One keyspace (``settings.keyspace("social_graph")``), one table per query:

* ``users`` — by canonical name; created with ``INSERT … IF NOT EXISTS`` (LWT),
  so exactly one of any number of concurrent sign-ups of a name wins;
* ``users_by_prefix`` — partition = first two characters of the canonical
  name (the whole name if it has one), clustered by name: a prefix search is a
  clustering slice of one partition (or, for a one-character prefix, a
  concatenation of the 38 partitions starting with it, which are already in
  name order);
* ``sessions`` — by token hash, written with a TTL ending at the expiry;
* ``following`` / ``followers`` — one partition per account, clustered by
  canonical name (name-ordered paging with ``after``), and ``follow_counts``
  (counters).

Writes that span partitions cannot be atomic with the LWT. They are ordered so
that a retry heals a crashed attempt: the LWT decides whether the change is
new (and only then are counters moved); the dependent rows (``followers``,
``users_by_prefix``) are (re)written whether or not it applied, and they are
idempotent. A follow's or unfollow's outbox event is written *before* its LWT:
a crash after the LWT then still leaves the event, and the worker, applying
it, calls ``reconcile``, which rewrites the ``followers`` row from the edge
read at SERIAL consistency. (An event whose LWT never ran is a no-op: the
worker checks current state.) Counters of a change that died after its LWT
stay one off; they are display values.
"""

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
    execute,
    execute_concurrent,
    execute_lwt,
    prepare,
    to_utc,
    truncate_ms,
    ttl_until,
)
from fanline_shared.config import StorageSettings
from fanline_shared.domain import Edge, OutboxEvent, User, canonical, utcnow
from fanline_shared.domain import Session as UserSession
from fanline_shared.errors import Conflict
from fanline_shared.storage_service.schema import Migration

from ..ports import Activity
from . import OWNER, SocialGraphStorage

# Canonical usernames use these characters (domain.USERNAME_RE, lower-cased),
# in the byte order Cassandra sorts text in.
ALPHABET = "".join(sorted("abcdefghijklmnopqrstuvwxyz0123456789_"))
_ALPHABET_SET = frozenset(ALPHABET)
_TOP = "\U0010ffff"  # sorts after every character a username can contain
_LOOKUP_CONCURRENCY = 64

SCHEMA = """
CREATE TABLE IF NOT EXISTS {keyspace}.users (
    username_lc text PRIMARY KEY,
    username text,
    password_hash text,
    created_at timestamp
);
CREATE TABLE IF NOT EXISTS {keyspace}.users_by_prefix (
    prefix text,
    username_lc text,
    username text,
    created_at timestamp,
    PRIMARY KEY (prefix, username_lc)
) WITH CLUSTERING ORDER BY (username_lc ASC);
CREATE TABLE IF NOT EXISTS {keyspace}.sessions (
    token_hash text PRIMARY KEY,
    username text,
    expires_at timestamp
);
CREATE TABLE IF NOT EXISTS {keyspace}.following (
    follower_lc text,
    followee_lc text,
    followee text,
    since timestamp,
    PRIMARY KEY (follower_lc, followee_lc)
) WITH CLUSTERING ORDER BY (followee_lc ASC);
CREATE TABLE IF NOT EXISTS {keyspace}.followers (
    followee_lc text,
    follower_lc text,
    follower text,
    since timestamp,
    PRIMARY KEY (followee_lc, follower_lc)
) WITH CLUSTERING ORDER BY (follower_lc ASC);
CREATE TABLE IF NOT EXISTS {keyspace}.follow_counts (
    username_lc text PRIMARY KEY,
    followers counter,
    following counter
);
"""

# Coarse activity and the active-followers index (fanline_social_graph.activity).
ACTIVITY_MIGRATION = """
CREATE TABLE IF NOT EXISTS {keyspace}.user_activity (
    username_lc text PRIMARY KEY,
    last_seen timestamp,
    returned_at timestamp
);
CREATE TABLE IF NOT EXISTS {keyspace}.followers_active (
    followee_lc text,
    follower_lc text,
    follower text,
    PRIMARY KEY (followee_lc, follower_lc)
);
"""

# Composed with the outbox's by ``Keyspace`` (``storage_service.schema``).
MIGRATIONS = (Migration(1, SCHEMA), Migration(3, ACTIVITY_MIGRATION))


def prefix_partition(username_lc: str) -> str:
    """The ``users_by_prefix`` partition of a canonical name."""
    return username_lc[:2]


class CassandraUsers(Repository):
    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        self._insert = prepare(
            session,
            f"INSERT INTO {ks}.users (username_lc, username, password_hash, created_at) VALUES (?, ?, ?, ?) IF NOT EXISTS",
            write=True,
            idempotent=False,
        )
        self._insert_prefix = prepare(
            session,
            f"INSERT INTO {ks}.users_by_prefix (prefix, username_lc, username, created_at) VALUES (?, ?, ?, ?)",
            write=True,
        )
        self._get = prepare(session, f"SELECT username, created_at FROM {ks}.users WHERE username_lc = ?")
        self._credentials = prepare(session, f"SELECT username, created_at, password_hash FROM {ks}.users WHERE username_lc = ?")
        self._search_range = prepare(
            session,
            f"SELECT username, created_at FROM {ks}.users_by_prefix WHERE prefix = ? "
            "AND username_lc >= ? AND username_lc < ? LIMIT ?",
        )
        self._search_partition = prepare(
            session, f"SELECT username, created_at FROM {ks}.users_by_prefix WHERE prefix = ? LIMIT ?"
        )

    async def create(self, username: str, password_hash: str, created_at: datetime) -> User:
        lc = canonical(username)
        created_at = truncate_ms(created_at)
        applied, row = await execute_lwt(
            self._session, self._insert, (lc, username, password_hash, created_at), name="users_create"
        )
        if not applied:
            # The name exists. Rewrite its prefix row from the stored user, so a
            # sign-up that crashed between its two writes still becomes
            # searchable (idempotent: same values).
            if row is not None and getattr(row, "username", None):
                await execute(
                    self._session,
                    self._insert_prefix,
                    (prefix_partition(lc), lc, row.username, row.created_at),
                    name="users_prefix",
                )
            raise Conflict(f"username '{username}' is taken", code="username_taken")
        await execute(self._session, self._insert_prefix, (prefix_partition(lc), lc, username, created_at), name="users_prefix")
        return User(username=username, created_at=created_at)

    async def get(self, username: str) -> User | None:
        rows = await execute(self._session, self._get, (canonical(username),), name="users_get")
        return _user(rows[0]) if rows else None

    async def get_many(self, usernames: Sequence[str]) -> dict[str, User]:
        names = list(dict.fromkeys(canonical(u) for u in usernames))
        if not names:
            return {}
        results = await execute_concurrent(
            self._session, self._get, [(n,) for n in names], name="users_get_many", concurrency=_LOOKUP_CONCURRENCY
        )
        return {name: _user(rows[0]) for name, rows in zip(names, results, strict=True) if rows}

    async def credentials(self, username: str) -> tuple[User, str] | None:
        rows = await execute(self._session, self._credentials, (canonical(username),), name="users_credentials")
        if not rows:
            return None
        return _user(rows[0]), rows[0].password_hash

    async def search_prefix(self, prefix: str, limit: int) -> list[User]:
        prefix = canonical(prefix)
        if limit <= 0 or len(prefix) > 15 or not set(prefix) <= _ALPHABET_SET:
            return []
        if len(prefix) >= 2:
            rows = await execute(
                self._session, self._search_range, (prefix[:2], prefix, prefix + _TOP, limit), name="users_search"
            )
            return [_user(r) for r in rows]
        # One character (or none): the matching partitions, taken in name order
        # ("a", "a0" … "a_", "aa" … "az"), concatenate to a name-ordered list.
        firsts = [prefix] if prefix else list(ALPHABET)
        found: list[User] = []
        for first in firsts:
            partitions = [first] + [first + c for c in ALPHABET]
            results = await execute_concurrent(
                self._session,
                self._search_partition,
                [(p, limit - len(found)) for p in partitions],
                name="users_search",
                concurrency=len(partitions),
            )
            for rows in results:
                found.extend(_user(r) for r in rows)
                if len(found) >= limit:
                    return found[:limit]
        return found


def _user(row: Any) -> User:
    return User(username=row.username, created_at=to_utc(row.created_at))


class CassandraSessions(Repository):
    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        self._insert = prepare(
            session, f"INSERT INTO {ks}.sessions (token_hash, username, expires_at) VALUES (?, ?, ?) USING TTL ?", write=True
        )
        self._get = prepare(session, f"SELECT username, expires_at FROM {ks}.sessions WHERE token_hash = ?")
        self._delete = prepare(session, f"DELETE FROM {ks}.sessions WHERE token_hash = ?", write=True)

    async def create(self, token_hash: str, username: str, expires_at: datetime) -> None:
        ttl = ttl_until(expires_at, utcnow())
        if ttl <= 0:
            return  # already expired: nothing a later get could return
        await execute(self._session, self._insert, (token_hash, username, truncate_ms(expires_at), ttl), name="sessions_create")

    async def get(self, token_hash: str) -> UserSession | None:
        rows = await execute(self._session, self._get, (token_hash,), name="sessions_get")
        if not rows:
            return None
        expires_at = to_utc(rows[0].expires_at)
        if expires_at <= utcnow():  # the TTL has second granularity; the timestamp decides
            return None
        return UserSession(username=rows[0].username, expires_at=expires_at)

    async def revoke(self, token_hash: str) -> None:
        await execute(self._session, self._delete, (token_hash,), name="sessions_revoke")


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

    async def _write(self, statements: Sequence[tuple[PreparedStatement, Sequence[Any]]], name: str) -> None:
        await asyncio.gather(*(execute(self._session, s, p, name=name) for s, p in statements))

    async def follow(self, follower: str, followee: str, since: datetime, event: OutboxEvent) -> bool:
        a, b = canonical(follower), canonical(followee)
        since = truncate_ms(since)
        await self._event_first(event)
        applied, row = await execute_lwt(self._session, self._follow, (a, b, followee, since), name="follow_edge")
        if not applied and row is not None and getattr(row, "since", None) is not None:
            since = row.since  # keep the reverse row identical to the edge
        writes: list[tuple[PreparedStatement, Sequence[Any]]] = [
            (self._add_follower, (b, a, follower, since)),
        ]
        if applied:
            writes += [(self._bump_followers, (1, b)), (self._bump_following, (1, a))]
        await self._write(writes, "follow_rows")
        return applied

    async def unfollow(self, follower: str, followee: str, event: OutboxEvent) -> bool:
        a, b = canonical(follower), canonical(followee)
        await self._event_first(event)
        applied, _row = await execute_lwt(self._session, self._unfollow, (a, b), name="unfollow_edge")
        writes: list[tuple[PreparedStatement, Sequence[Any]]] = [
            (self._remove_follower, (b, a)),
        ]
        if applied:
            writes += [(self._bump_followers, (-1, b)), (self._bump_following, (-1, a))]
        await self._write(writes, "unfollow_rows")
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


def build(settings: StorageSettings) -> SocialGraphStorage:
    keyspace = Keyspace(settings, OWNER, MIGRATIONS)
    outbox = keyspace.outbox()
    return SocialGraphStorage(
        users=CassandraUsers(keyspace),
        sessions=CassandraSessions(keyspace),
        follows=CassandraFollows(keyspace, outbox),
        outbox=outbox,
        engine=keyspace,
        activity=CassandraActivity(keyspace),
    )
