"""The indexes of users by account id and by email, in social-graph's
keyspace (``users_by_id``, ``users_by_email``; schema in ``cassandra.py``).

Both are claimed with an LWT *before* the user row (itself an LWT on the
name), so two sign-ups never share an id or an email. A claim whose sign-up
then lost its name (or crashed) is left behind and names nobody: lookups
check the user row agrees, and an email claim no user backs is taken over
(an LWT conditioned on the old owner) once it is ``ORPHANED_AFTER`` old —
a younger one may belong to a sign-up still running, which would then
succeed too. The account-id backfill walks the
users table by token range, one bounded page at a time, and records in
``backfills`` that it ran, so later starts skip it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from cassandra.cluster import Session
from cassandra.query import PreparedStatement

from fanline_shared.cassandra import execute, execute_lwt, prepare, to_utc
from fanline_shared.domain import User, utcnow
from fanline_shared.errors import Conflict, Unavailable

from ..accounts import MAX_ID_PROBES, email_key

BACKFILL = "account_ids"
# Far longer than a sign-up may take (the gateway's password deadline is seconds).
ORPHANED_AFTER = timedelta(minutes=2)
_SCAN_PAGE = 500
_MIN_TOKEN = -(1 << 63)


class UserIndexes:
    """Statements over ``users_by_id``, ``users_by_email`` and ``backfills``
    (prepared by ``CassandraUsers``, which owns the user rows)."""

    def __init__(self, ks: str, session: Session) -> None:
        p = prepare
        self._claim_id = p(
            session,
            f"INSERT INTO {ks}.users_by_id (account_id, username_lc) VALUES (?, ?) IF NOT EXISTS",
            write=True,
            idempotent=False,
        )
        self._id = p(session, f"SELECT username_lc FROM {ks}.users_by_id WHERE account_id = ?")
        self._set_id = p(
            session,
            f"UPDATE {ks}.users SET account_id = ? WHERE username_lc = ? IF account_id = null",
            write=True,
            idempotent=False,
        )
        self._claim_email = p(
            session,
            f"INSERT INTO {ks}.users_by_email (email_lc, username_lc, claimed_at) VALUES (?, ?, ?) IF NOT EXISTS",
            write=True,
            idempotent=False,
        )
        self._take_email = p(
            session,
            f"UPDATE {ks}.users_by_email SET username_lc = ?, claimed_at = ? WHERE email_lc = ? IF username_lc = ?",
            write=True,
            idempotent=False,
        )
        self._release_email = p(
            session, f"DELETE FROM {ks}.users_by_email WHERE email_lc = ? IF username_lc = ?", write=True, idempotent=False
        )
        self._email = p(session, f"SELECT username_lc FROM {ks}.users_by_email WHERE email_lc = ?")
        self._scan = p(
            session,
            f"SELECT token(username_lc) AS t, username, created_at, account_id, email FROM {ks}.users "
            "WHERE token(username_lc) > ? LIMIT ?",
        )
        self._done = p(session, f"SELECT done_at FROM {ks}.backfills WHERE name = ?")
        self._mark = p(session, f"INSERT INTO {ks}.backfills (name, done_at) VALUES (?, ?)", write=True)

    async def reserve_id(self, session: Session, username_lc: str, candidate: int) -> int:
        """``candidate`` or the next free value, claimed for ``username_lc``."""
        for _ in range(MAX_ID_PROBES):
            applied, row = await execute_lwt(session, self._claim_id, (candidate, username_lc), name="users_id_claim")
            if applied or (row is not None and getattr(row, "username_lc", None) == username_lc):
                return candidate
            candidate += 1
        raise Unavailable("no free account id near the candidate")

    async def set_id(self, session: Session, username_lc: str, account_id: int) -> tuple[bool, Any]:
        return await execute_lwt(session, self._set_id, (account_id, username_lc), name="users_id_set")

    async def name_of_id(self, session: Session, account_id: int) -> str | None:
        if not 0 < account_id < 1 << 63:
            return None
        rows = await execute(session, self._id, (account_id,), name="users_by_id")
        return rows[0].username_lc if rows else None

    async def name_of_email(self, session: Session, email: str) -> str | None:
        rows = await execute(session, self._email, (email_key(email),), name="users_by_email")
        return rows[0].username_lc if rows else None

    async def reserve_email(self, session: Session, email: str, username_lc: str, get_user: PreparedStatement) -> None:
        """Claim ``email`` for ``username_lc``, or ``Conflict(email_taken)``
        if a user has it; a claim no user backs (an abandoned sign-up) is
        taken over."""
        key, now = email_key(email), utcnow()
        applied, row = await execute_lwt(session, self._claim_email, (key, username_lc, now), name="users_email_claim")
        owner = getattr(row, "username_lc", None) if row is not None else None
        if applied or owner == username_lc:
            return
        taken = Conflict("that email address is taken", code="email_taken")
        claimed_at = getattr(row, "claimed_at", None) if row is not None else None
        if claimed_at is not None and now - to_utc(claimed_at) < ORPHANED_AFTER:
            raise taken  # possibly a sign-up still running
        users = await execute(session, get_user, (owner,), name="users_get") if owner else []
        if users and users[0].email is not None and email_key(users[0].email) == key:
            raise taken
        took, _ = await execute_lwt(session, self._take_email, (username_lc, now, key, owner), name="users_email_claim")
        if not took:
            raise taken

    async def release_email(self, session: Session, email: str, username_lc: str) -> None:
        await execute_lwt(session, self._release_email, (email_key(email), username_lc), name="users_email_release")

    async def backfill(self, session: Session, assign: Callable[[User], Awaitable[User]]) -> int:
        """Assign an account id to every user without one, once per keyspace."""
        if await execute(session, self._done, (BACKFILL,), name="backfills"):
            return 0
        assigned, after = 0, _MIN_TOKEN
        while True:
            rows = await execute(session, self._scan, (after, _SCAN_PAGE), name="users_backfill_scan")
            for row in rows:
                if not row.account_id:
                    await assign(User(username=row.username, created_at=to_utc(row.created_at), email=row.email))
                    assigned += 1
            if len(rows) < _SCAN_PAGE:
                break
            after = rows[-1].t
        await execute(session, self._mark, (BACKFILL, utcnow()), name="backfills")
        return assigned
