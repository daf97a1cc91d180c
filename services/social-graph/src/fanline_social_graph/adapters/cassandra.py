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

Past 400 lines on purpose: the keyspace's schema and the repositories whose
statements depend on it stay together; the account-id and email indexes are
``cassandra_ids.py``, OAuth ``cassandra_oauth.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
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
from fanline_shared.scopes import FULL as FULL_SCOPES
from fanline_shared.storage_service.schema import Migration

from ..accounts import candidate_id, email_key
from . import OWNER, SocialGraphStorage
from .cassandra_graph import CassandraActivity, CassandraFollows
from .cassandra_ids import UserIndexes
from .cassandra_oauth import CassandraOAuth

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

# The Mastodon-compatible API: account ids (``users_by_id``, LWT on the id)
# and emails (``users_by_email``, LWT on the lower-cased address) beside the
# users they name, the grant of each token, OAuth apps and authorization
# codes (cassandra_oauth.py), and ``backfills``: which one-off data
# migrations ran (account ids for users created before them).
MASTODON_MIGRATION = """
ALTER TABLE {keyspace}.users ADD IF NOT EXISTS account_id bigint;
ALTER TABLE {keyspace}.users ADD IF NOT EXISTS email text;
CREATE TABLE IF NOT EXISTS {keyspace}.users_by_id (
    account_id bigint PRIMARY KEY,
    username_lc text
);
CREATE TABLE IF NOT EXISTS {keyspace}.users_by_email (
    email_lc text PRIMARY KEY,
    username_lc text,
    claimed_at timestamp
);
ALTER TABLE {keyspace}.sessions ADD IF NOT EXISTS scopes text;
ALTER TABLE {keyspace}.sessions ADD IF NOT EXISTS client_id text;
ALTER TABLE {keyspace}.sessions ADD IF NOT EXISTS kind text;
CREATE TABLE IF NOT EXISTS {keyspace}.oauth_apps (
    client_id text PRIMARY KEY,
    secret_hash text,
    name text,
    website text,
    redirect_uris text,
    scopes text,
    created_at timestamp
);
CREATE TABLE IF NOT EXISTS {keyspace}.oauth_codes (
    code_hash text PRIMARY KEY,
    client_id text,
    username text,
    redirect_uri text,
    scopes text,
    challenge text,
    challenge_method text
) WITH gc_grace_seconds = 3600;
CREATE TABLE IF NOT EXISTS {keyspace}.backfills (
    name text PRIMARY KEY,
    done_at timestamp
);
"""

# Composed with the outbox's by ``Keyspace`` (``storage_service.schema``).
MIGRATIONS = (Migration(1, SCHEMA), Migration(3, ACTIVITY_MIGRATION), Migration(7, MASTODON_MIGRATION))


def prefix_partition(username_lc: str) -> str:
    """The ``users_by_prefix`` partition of a canonical name."""
    return username_lc[:2]


class CassandraUsers(Repository):
    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        self._insert = prepare(
            session,
            f"INSERT INTO {ks}.users (username_lc, username, password_hash, created_at, account_id, email) "
            "VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS",
            write=True,
            idempotent=False,
        )
        self._insert_prefix = prepare(
            session,
            f"INSERT INTO {ks}.users_by_prefix (prefix, username_lc, username, created_at) VALUES (?, ?, ?, ?)",
            write=True,
        )
        columns = "username, created_at, account_id, email"
        self._get = prepare(session, f"SELECT {columns} FROM {ks}.users WHERE username_lc = ?")
        self._credentials = prepare(session, f"SELECT {columns}, password_hash FROM {ks}.users WHERE username_lc = ?")
        self._search_range = prepare(
            session,
            f"SELECT username, created_at FROM {ks}.users_by_prefix WHERE prefix = ? "
            "AND username_lc >= ? AND username_lc < ? LIMIT ?",
        )
        self._search_partition = prepare(
            session, f"SELECT username, created_at FROM {ks}.users_by_prefix WHERE prefix = ? LIMIT ?"
        )
        self._ids = UserIndexes(ks, session)

    async def create(self, username: str, password_hash: str, created_at: datetime, email: str | None = None) -> User:
        lc = canonical(username)
        created_at = truncate_ms(created_at)
        ids = self._ids
        if email is not None:
            await ids.reserve_email(self._session, email, lc, self._get)
        account_id = await ids.reserve_id(self._session, lc, candidate_id(created_at, lc))
        applied, row = await execute_lwt(
            self._session, self._insert, (lc, username, password_hash, created_at, account_id, email), name="users_create"
        )
        if not applied:
            if email is not None and (
                row is None or getattr(row, "email", None) is None or email_key(row.email) != email_key(email)
            ):
                await ids.release_email(self._session, email, lc)
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
        return User(username=username, created_at=created_at, account_id=account_id, email=email)

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

    async def by_account_id(self, account_id: int) -> User | None:
        lc = await self._ids.name_of_id(self._session, account_id)
        user = await self.get(lc) if lc is not None else None
        # An id reserved by a sign-up that then lost its name names nobody.
        return user if user is not None and user.account_id == account_id else None

    async def by_email(self, email: str) -> User | None:
        lc = await self._ids.name_of_email(self._session, email)
        user = await self.get(lc) if lc is not None else None
        return user if user is not None and user.email is not None and email_key(user.email) == email_key(email) else None

    async def assign_account_id(self, user: User) -> User:
        if user.account_id:
            return user
        lc = canonical(user.username)
        account_id = await self._ids.reserve_id(self._session, lc, candidate_id(user.created_at, lc))
        applied, row = await self._ids.set_id(self._session, lc, account_id)
        if applied:
            return replace(user, account_id=account_id)
        current = getattr(row, "account_id", None) if row is not None else None
        # Another replica assigned one first: theirs stands (ours names nobody).
        return replace(user, account_id=current) if current else user

    async def backfill_account_ids(self) -> int:
        return await self._ids.backfill(self._session, self.assign_account_id)


def _user(row: Any) -> User:
    return User(
        username=row.username,
        created_at=to_utc(row.created_at),
        account_id=getattr(row, "account_id", None) or 0,
        email=getattr(row, "email", None),
    )


class CassandraSessions(Repository):
    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        self._insert = prepare(
            session,
            f"INSERT INTO {ks}.sessions (token_hash, username, expires_at, scopes, client_id, kind) "
            "VALUES (?, ?, ?, ?, ?, ?) USING TTL ?",
            write=True,
        )
        self._get = prepare(
            session, f"SELECT username, expires_at, scopes, client_id, kind FROM {ks}.sessions WHERE token_hash = ?"
        )
        self._delete = prepare(session, f"DELETE FROM {ks}.sessions WHERE token_hash = ?", write=True)

    async def create(
        self,
        token_hash: str,
        username: str,
        expires_at: datetime | None,
        *,
        scopes: str = FULL_SCOPES,
        client_id: str | None = None,
        kind: str = "user",
    ) -> None:
        ttl = ttl_until(expires_at, utcnow()) if expires_at is not None else 0  # 0: no TTL, until revoked
        if expires_at is not None and ttl <= 0:
            return  # already expired: nothing a later get could return
        stored = truncate_ms(expires_at) if expires_at is not None else None
        await execute(
            self._session, self._insert, (token_hash, username, stored, scopes, client_id, kind, ttl), name="sessions_create"
        )

    async def get(self, token_hash: str) -> UserSession | None:
        rows = await execute(self._session, self._get, (token_hash,), name="sessions_get")
        if not rows:
            return None
        row = rows[0]
        expires_at = to_utc(row.expires_at) if row.expires_at is not None else None
        if expires_at is not None and expires_at <= utcnow():  # the TTL has second granularity; the timestamp decides
            return None
        return UserSession(row.username, expires_at, row.scopes or FULL_SCOPES, row.client_id, row.kind or "user")

    async def revoke(self, token_hash: str) -> None:
        await execute(self._session, self._delete, (token_hash,), name="sessions_revoke")


class CassandraEngine:
    """The keyspace's ``Lifecycle``, plus the account-id backfill at start."""

    def __init__(self, keyspace: Keyspace, users: CassandraUsers) -> None:
        self.keyspace = keyspace
        self.users = users
        self.name = keyspace.name

    @property
    def session(self) -> Session:
        return self.keyspace.session

    async def start(self) -> None:
        await self.keyspace.start()
        await self.users.backfill_account_ids()

    async def close(self) -> None:
        await self.keyspace.close()

    async def ping(self) -> None:
        await self.keyspace.ping()


def build(settings: StorageSettings) -> SocialGraphStorage:
    keyspace = Keyspace(settings, OWNER, MIGRATIONS)
    outbox = keyspace.outbox()
    users = CassandraUsers(keyspace)
    return SocialGraphStorage(
        users=users,
        sessions=CassandraSessions(keyspace),
        follows=CassandraFollows(keyspace, outbox),
        outbox=outbox,
        engine=CassandraEngine(keyspace, users),
        activity=CassandraActivity(keyspace),
        oauth=CassandraOAuth(keyspace),
    )
