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

This module holds the keyspace's schema (every table's migrations, read in
one place), sessions, the engine and ``build``; users and their prefix index
are ``cassandra_users.py``, the account-id and email indexes
``cassandra_ids.py``, the follow graph and activity ``cassandra_graph.py``,
OAuth ``cassandra_oauth.py``.
"""

from __future__ import annotations

from datetime import datetime

from cassandra.cluster import Session

from fanline_shared.cassandra import (
    CassandraOutbox,
    Keyspace,
    Repository,
    execute,
    prepare,
    to_utc,
    truncate_ms,
    ttl_until,
)
from fanline_shared.config import StorageSettings
from fanline_shared.domain import OutboxEvent, utcnow
from fanline_shared.domain import Session as UserSession
from fanline_shared.scopes import FULL as FULL_SCOPES
from fanline_shared.storage_service.schema import Migration

from . import OWNER, SocialGraphStorage
from .cassandra_graph import CassandraActivity, CassandraFollows
from .cassandra_oauth import CassandraOAuth
from .cassandra_users import CassandraUsers

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


class CassandraSessions(Repository):
    def __init__(self, keyspace: Keyspace, outbox: CassandraOutbox) -> None:
        super().__init__(keyspace)
        self._outbox = outbox

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

    async def revoke(self, token_hash: str, event: OutboxEvent | None = None) -> None:
        if event is not None:  # the event first: a revocation never goes unannounced
            await self._outbox.append(event)
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
        sessions=CassandraSessions(keyspace, outbox),
        follows=CassandraFollows(keyspace, outbox),
        outbox=outbox,
        engine=CassandraEngine(keyspace, users),
        activity=CassandraActivity(keyspace),
        oauth=CassandraOAuth(keyspace),
    )
