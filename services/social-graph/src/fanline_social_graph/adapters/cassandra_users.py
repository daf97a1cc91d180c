"""Cassandra adapter of social-graph's accounts: ``users`` and the
``users_by_prefix`` search index (split out of ``cassandra.py``, whose
docstring says how a sign-up's writes are ordered so that a retry heals a
crashed attempt, and whose migrations hold these tables). The account-id and
email indexes it reserves through are ``cassandra_ids.py``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from cassandra.cluster import Session

from fanline_shared.cassandra import Repository, execute, execute_concurrent, execute_lwt, prepare, to_utc, truncate_ms
from fanline_shared.domain import User, canonical
from fanline_shared.errors import Conflict

from ..accounts import candidate_id, email_key
from .cassandra_ids import UserIndexes

# Canonical usernames use these characters (domain.USERNAME_RE, lower-cased),
# in the byte order Cassandra sorts text in.
ALPHABET = "".join(sorted("abcdefghijklmnopqrstuvwxyz0123456789_"))
_ALPHABET_SET = frozenset(ALPHABET)
_TOP = "\U0010ffff"  # sorts after every character a username can contain
_LOOKUP_CONCURRENCY = 64
_IN_LOOKUP_MAX = 4  # names read with one IN query; more: one query per name (get_many)


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
        self._get_in = prepare(session, f"SELECT {columns} FROM {ks}.users WHERE username_lc IN ?")
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
        if len(names) <= _IN_LOOKUP_MAX:
            # A few names (a follow's pair): one request for all of them. More
            # would make one coordinator wait for every partition, so larger
            # lookups stay one request per name, in a window.
            rows = await execute(self._session, self._get_in, (names,), name="users_get_many")
            return {canonical(r.username): _user(r) for r in rows}
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
