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

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cassandra.cluster import Session

from fanline_shared.cassandra import (
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
from fanline_shared.domain import Session as UserSession
from fanline_shared.domain import User, canonical, utcnow
from fanline_shared.errors import Conflict
from fanline_shared.storage_service.schema import Migration

from . import OWNER, SocialGraphStorage
from .cassandra_graph import CassandraActivity, CassandraFollows

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
