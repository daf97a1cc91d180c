"""Embedded SQLite adapters of social-graph (the default backend).

The same tables as the Cassandra keyspace, in one file
(``<data_dir>/<keyspace("social_graph")>.sqlite3``). Every operation is one
transaction on the database's single thread, so an edge, its reverse row, both
counts and the outbox event commit together; uniqueness of names is the
primary key of ``users``. Timestamps are integer milliseconds (see
``fanline_shared.sqlite``).

This module holds every table's migrations (so a schema change is read in
one place), the ``users`` and ``sessions`` adapters and ``build``; the follow
graph and activity tables are ``sqlite_graph.py``, the OAuth tables
``sqlite_oauth.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from fanline_shared.config import StorageSettings
from fanline_shared.domain import OutboxEvent, Session, User, canonical
from fanline_shared.errors import Conflict, Unavailable
from fanline_shared.scopes import FULL as FULL_SCOPES
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

from ..accounts import MAX_ID_PROBES, candidate_id, email_key
from . import OWNER, SocialGraphStorage
from .sqlite_graph import SqliteActivity, SqliteFollows
from .sqlite_oauth import SqliteOAuth

_TOP = "\U0010ffff"  # sorts after every character a username can contain
NEVER_MS = 1 << 62  # the expiry of a token that lasts until revoked
_PURGE_EVERY = 256  # session creations between purges of expired sessions
_PURGE_BATCH = 1000

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    username_lc TEXT PRIMARY KEY,
    username TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions (
    token_hash TEXT PRIMARY KEY,
    username TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_expiry ON sessions (expires_at);
CREATE TABLE IF NOT EXISTS following (
    follower_lc TEXT NOT NULL,
    followee_lc TEXT NOT NULL,
    followee TEXT NOT NULL,
    since INTEGER NOT NULL,
    PRIMARY KEY (follower_lc, followee_lc)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS followers (
    followee_lc TEXT NOT NULL,
    follower_lc TEXT NOT NULL,
    follower TEXT NOT NULL,
    since INTEGER NOT NULL,
    PRIMARY KEY (followee_lc, follower_lc)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS follow_counts (
    username_lc TEXT PRIMARY KEY,
    followers INTEGER NOT NULL DEFAULT 0,
    following INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
"""

# Coarse activity and the active-followers index (fanline_social_graph.activity).
ACTIVITY_MIGRATION = """
CREATE TABLE IF NOT EXISTS user_activity (
    username_lc TEXT PRIMARY KEY,
    last_seen INTEGER NOT NULL,
    returned_at INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS followers_active (
    followee_lc TEXT NOT NULL,
    follower_lc TEXT NOT NULL,
    follower TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (followee_lc, follower_lc)
) WITHOUT ROWID;
"""

# The Mastodon-compatible API: account ids and emails on users (unique
# indexes), the grant of each token (scopes, app, user or app token), OAuth
# apps and authorization codes (sqlite_oauth.py). Existing users get their
# account ids from ``SqliteUsers.backfill_account_ids`` at start.
MASTODON_MIGRATION = """
ALTER TABLE users ADD COLUMN account_id INTEGER;
ALTER TABLE users ADD COLUMN email TEXT;
ALTER TABLE users ADD COLUMN email_lc TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS users_by_account_id ON users (account_id) WHERE account_id IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS users_by_email ON users (email_lc) WHERE email_lc IS NOT NULL;
ALTER TABLE sessions ADD COLUMN scopes TEXT;
ALTER TABLE sessions ADD COLUMN client_id TEXT;
ALTER TABLE sessions ADD COLUMN kind TEXT;
CREATE TABLE IF NOT EXISTS oauth_apps (
    client_id TEXT PRIMARY KEY,
    secret_hash TEXT NOT NULL,
    name TEXT NOT NULL,
    website TEXT,
    redirect_uris TEXT NOT NULL,
    scopes TEXT NOT NULL,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS oauth_codes (
    code_hash TEXT PRIMARY KEY,
    client_id TEXT NOT NULL,
    username TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    scopes TEXT NOT NULL,
    challenge TEXT,
    challenge_method TEXT,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
"""

# Composed with the outbox's by the engine (``storage_service.schema``).
MIGRATIONS = (Migration(1, SCHEMA), Migration(3, ACTIVITY_MIGRATION), Migration(7, MASTODON_MIGRATION))


_USER_COLUMNS = "username, created_at, account_id, email"


def _user(row: sqlite3.Row | tuple[Any, ...]) -> User:
    return User(username=row[0], created_at=from_ms(row[1]), account_id=row[2] or 0, email=row[3])


def _free_id(conn: sqlite3.Connection, candidate: int) -> int:
    """``candidate``, or the next value no user has."""
    for _ in range(MAX_ID_PROBES):
        if conn.execute("SELECT 1 FROM users WHERE account_id = ?", (candidate,)).fetchone() is None:
            return candidate
        candidate += 1
    raise Unavailable("no free account id near the candidate")


class SqliteUsers:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def create(self, username: str, password_hash: str, created_at: datetime, email: str | None = None) -> User:
        lc, ms = canonical(username), to_ms(created_at)
        email_lc = email_key(email) if email else None

        def insert(conn: sqlite3.Connection) -> User:
            if conn.execute("SELECT 1 FROM users WHERE username_lc = ?", (lc,)).fetchone() is not None:
                raise Conflict(f"username '{username}' is taken", code="username_taken")
            if email_lc and conn.execute("SELECT 1 FROM users WHERE email_lc = ?", (email_lc,)).fetchone() is not None:
                raise Conflict("that email address is taken", code="email_taken")
            account_id = _free_id(conn, candidate_id(from_ms(ms), lc))
            conn.execute(
                "INSERT INTO users (username_lc, username, password_hash, created_at, account_id, email, email_lc) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (lc, username, password_hash, ms, account_id, email, email_lc),
            )
            return User(username=username, created_at=from_ms(ms), account_id=account_id, email=email)

        return await self.db.run(insert, name="users_create")

    async def get(self, username: str) -> User | None:
        lc = canonical(username)

        def read(conn: sqlite3.Connection) -> User | None:
            row = conn.execute(f"SELECT {_USER_COLUMNS} FROM users WHERE username_lc = ?", (lc,)).fetchone()
            return _user(row) if row else None

        return await self.db.run(read, name="users_get", write=False)

    async def get_many(self, usernames: Sequence[str]) -> dict[str, User]:
        names = list(dict.fromkeys(canonical(u) for u in usernames))
        if not names:
            return {}

        def read(conn: sqlite3.Connection) -> dict[str, User]:
            marks = ",".join("?" * len(names))
            rows = conn.execute(f"SELECT username_lc, {_USER_COLUMNS} FROM users WHERE username_lc IN ({marks})", names)
            return {r[0]: _user(r[1:]) for r in rows.fetchall()}

        return await self.db.run(read, name="users_get_many", write=False)

    async def credentials(self, username: str) -> tuple[User, str] | None:
        lc = canonical(username)

        def read(conn: sqlite3.Connection) -> tuple[User, str] | None:
            row = conn.execute(f"SELECT {_USER_COLUMNS}, password_hash FROM users WHERE username_lc = ?", (lc,)).fetchone()
            return (_user(row[:4]), row[4]) if row else None

        return await self.db.run(read, name="users_credentials", write=False)

    async def search_prefix(self, prefix: str, limit: int) -> list[User]:
        prefix = canonical(prefix)
        if limit <= 0:
            return []

        def read(conn: sqlite3.Connection) -> list[User]:
            rows = conn.execute(
                f"SELECT {_USER_COLUMNS} FROM users WHERE username_lc >= ? AND username_lc < ? ORDER BY username_lc LIMIT ?",
                (prefix, prefix + _TOP, limit),
            ).fetchall()
            return [_user(r) for r in rows]

        return await self.db.run(read, name="users_search", write=False)

    async def by_account_id(self, account_id: int) -> User | None:
        if not 0 < account_id < 1 << 63:
            return None

        def read(conn: sqlite3.Connection) -> User | None:
            row = conn.execute(f"SELECT {_USER_COLUMNS} FROM users WHERE account_id = ?", (account_id,)).fetchone()
            return _user(row) if row else None

        return await self.db.run(read, name="users_by_account_id", write=False)

    async def by_email(self, email: str) -> User | None:
        key = email_key(email)

        def read(conn: sqlite3.Connection) -> User | None:
            row = conn.execute(f"SELECT {_USER_COLUMNS} FROM users WHERE email_lc = ?", (key,)).fetchone()
            return _user(row) if row else None

        return await self.db.run(read, name="users_by_email", write=False)

    async def assign_account_id(self, user: User) -> User:
        if user.account_id:
            return user
        lc = canonical(user.username)

        def assign(conn: sqlite3.Connection) -> User:
            row = conn.execute(f"SELECT {_USER_COLUMNS} FROM users WHERE username_lc = ?", (lc,)).fetchone()
            if row is None or row[2]:
                return _user(row) if row else user
            account_id = _free_id(conn, candidate_id(from_ms(row[1]), lc))
            conn.execute("UPDATE users SET account_id = ? WHERE username_lc = ?", (account_id, lc))
            return User(username=row[0], created_at=from_ms(row[1]), account_id=account_id, email=row[3])

        return await self.db.run(assign, name="users_assign_id")

    async def backfill(self) -> None:
        """``backfill_account_ids`` as the engine's after-migration step."""
        await self.backfill_account_ids()

    async def backfill_account_ids(self) -> int:
        def backfill(conn: sqlite3.Connection) -> int:
            rows = conn.execute("SELECT username_lc, created_at FROM users WHERE account_id IS NULL").fetchall()
            for lc, ms in rows:
                conn.execute(
                    "UPDATE users SET account_id = ? WHERE username_lc = ?", (_free_id(conn, candidate_id(from_ms(ms), lc)), lc)
                )
            return len(rows)

        return await self.db.run(backfill, name="users_backfill_ids")


class SqliteSessions:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        self._creates = 0

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
        expires, now = (to_ms(expires_at) if expires_at is not None else NEVER_MS), now_ms()
        if expires <= now:
            return  # already expired: nothing a later get could return
        self._creates += 1
        purge = self._creates % _PURGE_EVERY == 0

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO sessions (token_hash, username, expires_at, scopes, client_id, kind) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (token_hash) DO UPDATE SET username = excluded.username, expires_at = excluded.expires_at, "
                "scopes = excluded.scopes, client_id = excluded.client_id, kind = excluded.kind",
                (token_hash, username, expires, scopes, client_id, kind),
            )
            if purge:
                conn.execute(
                    "DELETE FROM sessions WHERE rowid IN (SELECT rowid FROM sessions WHERE expires_at <= ? LIMIT ?)",
                    (now, _PURGE_BATCH),
                )

        await self.db.run(insert, name="sessions_create")

    async def get(self, token_hash: str) -> Session | None:
        now = now_ms()

        def read(conn: sqlite3.Connection) -> Session | None:
            row = conn.execute(
                "SELECT username, expires_at, scopes, client_id, kind FROM sessions WHERE token_hash = ? AND expires_at > ?",
                (token_hash, now),
            ).fetchone()
            if row is None:
                return None
            expires = None if row[1] >= NEVER_MS else from_ms(row[1])
            return Session(row[0], expires, row[2] or FULL_SCOPES, row[3], row[4] or "user")

        return await self.db.run(read, name="sessions_get", write=False)

    async def revoke(self, token_hash: str, event: OutboxEvent | None = None) -> None:
        def delete(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM sessions WHERE token_hash = ?", (token_hash,))
            if event is not None:  # in the same transaction
                append_event(conn, event)

        await self.db.run(delete, name="sessions_revoke")


def build(settings: StorageSettings) -> SocialGraphStorage:
    db = SqliteDatabase.for_owner(settings, OWNER)
    users = SqliteUsers(db)
    return SocialGraphStorage(
        users=users,
        sessions=SqliteSessions(db),
        follows=SqliteFollows(db),
        outbox=SqliteOutbox(db),
        engine=SqliteEngine(db, MIGRATIONS, after_migrate=users.backfill),
        activity=SqliteActivity(db),
        oauth=SqliteOAuth(db),
    )
