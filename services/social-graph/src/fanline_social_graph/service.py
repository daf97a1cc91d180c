"""The social-graph service layer: sign-up, log-in, sessions and follows.

Storage goes through the ports in ``ports.py``; this module holds
the rules (validation, hashing, who may do what) and knows nothing of HTTP.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from fanline_shared import events, metrics
from fanline_shared.domain import (
    Edge,
    OutboxEvent,
    Session,
    User,
    canonical,
    is_valid_username,
    to_rfc3339,
    utcnow,
    validate_password,
    validate_username,
)
from fanline_shared.errors import InvalidInput, NotFound, Unauthorized
from fanline_shared.scopes import FULL as FULL_SCOPES

from .accounts import EMAIL_MAX, validate_email
from .activity import ActivityTracker
from .adapters import SocialGraphStorage
from .hashing import Argon2Budget

# Verified against when the username is unknown, so a failed log-in takes the
# same time whether or not the user exists.
_DUMMY_PASSWORD = "not-a-real-password-" + secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class VerifiedSession:
    """A live token as the session lookup reports it: its grant (user or
    app, scopes, app), when its user came back from inactivity, and
    ``cache_s``: how long a gateway may reuse this answer without asking
    again — the activity tracker's refresh period, so a user who keeps making
    requests is still seen often enough to stay active (``activity.py``)."""

    grant: Session
    returned_at: datetime | None
    cache_s: float

    @property
    def username(self) -> str:
        return self.grant.username


def token_hash(token: str) -> str:
    """Sessions are stored by the SHA-256 of the token, never the token."""
    return hashlib.sha256(token.encode()).hexdigest()


class SocialGraph:
    def __init__(
        self,
        storage: SocialGraphStorage,
        hasher: PasswordHasher,
        session_ttl_s: int,
        budget: Argon2Budget | None = None,
        inactive_after_s: float = 7 * 24 * 3600,
        oauth_token_ttl_s: int = 0,
    ) -> None:
        self._storage = storage
        self._hasher = hasher
        self._argon2 = budget or Argon2Budget(1, 2.0)
        self._session_ttl = timedelta(seconds=session_ttl_s)
        # OAuth tokens last until revoked (Mastodon's do), unless set.
        self._oauth_ttl = timedelta(seconds=oauth_token_ttl_s) if oauth_token_ttl_s > 0 else None
        self._dummy_hash = hasher.hash(_DUMMY_PASSWORD)
        self.activity = ActivityTracker(storage.activity, self._followees, inactive_after_s)

    async def _followees(self, username: str, limit: int, after: str | None) -> list[str]:
        return [canonical(e.username) for e in await self._storage.follows.following(username, limit, after)]

    # --- users ----------------------------------------------------------------

    async def sign_up(self, username: object, password: object, email: object = None) -> User:
        name = validate_username(username)
        secret = validate_password(password)
        address = validate_email(email)
        # argon2 is deliberately slow and memory-hard: off the event loop,
        # within the memory budget (503 when it is in use).
        password_hash = await self._argon2.run(self._hasher.hash, secret)
        user = await self._storage.users.create(name, password_hash, utcnow(), address)
        await self.activity.created(user.username)
        metrics.USERS_CREATED.inc()
        return user

    async def _user(self, username: str) -> User | None:
        return await self._storage.users.get(username) if is_valid_username(username) else None

    async def follow_counts(self, username: str) -> tuple[int, int]:
        """``(followers_count, following_count)`` of a user (0, 0 if unknown)."""
        return (await self._storage.follows.counts([username])).get(canonical(username), (0, 0))

    async def profile(self, username: str) -> dict[str, Any]:
        user = await self._user(username)
        if user is None:
            raise NotFound(f"no user named '{username}'", code="user_not_found")
        return (await self._with_counts([user]))[0]

    async def profiles(self, usernames: Sequence[str]) -> list[dict[str, Any]]:
        """Profiles in the order asked; unknown or invalid names left out."""
        valid = [u for u in usernames if is_valid_username(u)]
        found = await self._storage.users.get_many(valid)
        ordered: list[User] = []
        seen: set[str] = set()
        for name in valid:
            user = found.get(canonical(name))
            if user is not None and canonical(name) not in seen:
                seen.add(canonical(name))
                ordered.append(user)
        return await self._with_counts(ordered)

    async def search(self, prefix: str, limit: int) -> list[dict[str, Any]]:
        if not prefix or len(prefix) > 15 or not is_valid_username(prefix):
            return []
        found = await self._storage.users.search_prefix(canonical(prefix), limit)
        # The prefix index holds names, not account ids: read the users.
        full = await self._storage.users.get_many([u.username for u in found]) if found else {}
        return await self._with_counts([full.get(canonical(u.username), u) for u in found])

    async def profiles_by_email(self, email: str) -> list[dict[str, Any]]:
        """The profile of the user with this email, if any (a list of 0 or 1)."""
        user = await self._storage.users.by_email(email) if 0 < len(email) <= EMAIL_MAX else None
        return await self._with_counts([user]) if user is not None else []

    async def profiles_by_id(self, account_ids: Sequence[int]) -> list[dict[str, Any]]:
        """Profiles by account id, in the order asked; unknown ids left out."""
        found = await asyncio.gather(*(self._storage.users.by_account_id(i) for i in dict.fromkeys(account_ids)))
        return await self._with_counts([u for u in found if u is not None])

    async def _with_counts(self, users: list[User]) -> list[dict[str, Any]]:
        users = [await self._storage.users.assign_account_id(u) if not u.account_id else u for u in users]
        counts = await self._storage.follows.counts([u.username for u in users]) if users else {}
        out = []
        for user in users:
            followers, following = counts.get(canonical(user.username), (0, 0))
            out.append(
                {
                    "username": user.username,
                    "created_at": to_rfc3339(user.created_at),
                    "followers_count": followers,
                    "following_count": following,
                    "id": str(user.account_id),
                }
            )
        return out

    # --- sessions -------------------------------------------------------------

    async def login(
        self, username: object, password: object, *, scopes: str = FULL_SCOPES, client_id: str | None = None
    ) -> dict[str, Any]:
        """A token for the user whose name — or, for an OAuth password grant
        (``client_id``), email — and password these are, with ``scopes``;
        the same argon2 path either way."""
        failure = Unauthorized("wrong username or password", code="unauthorized")
        if not isinstance(username, str) or not isinstance(password, str) or len(password) > 1024:
            raise failure
        if client_id is not None and "@" in username:
            by_email = await self._storage.users.by_email(username) if len(username) <= EMAIL_MAX else None
            username = by_email.username if by_email is not None else ""
        found = await self._storage.users.credentials(username) if is_valid_username(username) else None
        stored_hash = found[1] if found else self._dummy_hash
        try:
            await self._argon2.run(self._hasher.verify, stored_hash, password)
            ok = found is not None
        except (VerificationError, InvalidHashError):
            ok = False
        if not ok or found is None:
            metrics.LOGINS.labels("failure").inc()
            raise failure
        user = found[0]
        token, expires_at = await self.issue(user.username, scopes=scopes, client_id=client_id)
        await self.activity.seen(user.username)
        metrics.LOGINS.labels("success").inc()
        return {
            "token": token,
            "username": user.username,
            "expires_at": to_rfc3339(expires_at) if expires_at else None,
            "scopes": scopes,
        }

    async def issue(
        self, username: str | None, *, scopes: str = FULL_SCOPES, client_id: str | None = None
    ) -> tuple[str, datetime | None]:
        """Store a new token and return it with its expiry: a user's
        (``username``) or, without one, an app's own (client credentials).

        A user's token names its user so the gateway can start reading that
        user's timeline while verifying it; it is still verified in full (by
        the hash of the whole token), so the name grants nothing. An app's
        token can never look like one: ``~`` is no username character."""
        if username is None:
            token, kind = f"app~{secrets.token_urlsafe(32)}", "app"
        else:
            token, kind = f"{canonical(username)}.{secrets.token_urlsafe(32)}", "user"
        ttl = self._session_ttl if client_id is None else self._oauth_ttl
        expires_at = utcnow() + ttl if ttl is not None else None
        await self._storage.sessions.create(
            token_hash(token), username or "", expires_at, scopes=scopes, client_id=client_id, kind=kind
        )
        return token, expires_at

    async def authenticate(self, token: str | None) -> str:
        return (await self.session(token)).username

    async def session(self, token: str | None) -> VerifiedSession:
        """The token's grant — an authenticated request, so its user is
        active — and, for a user, when they came back from inactivity (within
        the last day), if so."""
        if not token or len(token) > 200:
            raise Unauthorized("missing or malformed token", code="unauthorized")
        session = await self._storage.sessions.get(token_hash(token))
        if session is None:
            raise Unauthorized("invalid, expired or revoked token", code="unauthorized")
        if session.kind == "app":
            return VerifiedSession(session, None, self.activity.refresh_s)
        returned_at = await self.activity.seen(session.username)
        return VerifiedSession(session, returned_at, self.activity.refresh_s)

    async def logout(self, token: str | None) -> OutboxEvent:
        """Revoke the token; the ``SessionRevoked`` event stored with it tells
        every gateway to drop its cached verifications of the user's tokens."""
        username = await self.authenticate(token)
        assert token is not None
        event = events.session_revoked(username)
        await self._storage.sessions.revoke(token_hash(token), event)
        return event

    async def relationships(self, actor: str, targets: Sequence[str]) -> list[dict[str, Any]]:
        """Whether ``actor`` follows each target and each target ``actor``."""
        names = [t for t in dict.fromkeys(targets) if is_valid_username(t)]
        follows = self._storage.follows
        pairs = await asyncio.gather(
            *(asyncio.gather(follows.is_following(actor, t), follows.is_following(t, actor)) for t in names)
        )
        return [{"username": t, "following": a, "followed_by": b} for t, (a, b) in zip(names, pairs, strict=True)]

    # --- follows --------------------------------------------------------------

    async def follow(self, follower: str, followee: str) -> tuple[bool, OutboxEvent]:
        source, target = await self._pair(follower, followee)
        event = events.followed(source.username, target.username)
        created = await self._storage.follows.follow(source.username, target.username, utcnow(), event)
        # After the edge: the fan-out may reach the follower only once they
        # follow (the reverse order could deliver a tweet of a stranger).
        await self.activity.followed(source.username, target.username)
        return created, event

    async def unfollow(self, follower: str, followee: str) -> tuple[bool, OutboxEvent]:
        source, target = await self._pair(follower, followee)
        event = events.unfollowed(source.username, target.username)
        # Before the edge goes: once unfollowed, no fan-out may reach them.
        await self.activity.unfollowed(source.username, target.username)
        removed = await self._storage.follows.unfollow(source.username, target.username, event)
        return removed, event

    async def _pair(self, follower: str, followee: str) -> tuple[User, User]:
        if canonical(follower) == canonical(followee):
            raise InvalidInput("you cannot follow yourself", code="cannot_follow_self")
        found = await self._storage.users.get_many([n for n in (follower, followee) if is_valid_username(n)])
        source, target = found.get(canonical(follower)), found.get(canonical(followee))
        if source is None:
            raise NotFound(f"no user named '{follower}'", code="user_not_found")
        if target is None:
            raise NotFound(f"no user named '{followee}'", code="user_not_found")
        return source, target

    async def is_following(self, follower: str, followee: str) -> bool:
        return await self._storage.follows.is_following(follower, followee)

    async def reconcile(self, follower: str, followee: str) -> bool:
        """Repair the pair's dependent rows from its edge; True if following."""
        return await self._storage.follows.reconcile(follower, followee)

    async def edges(self, username: str, direction: str, limit: int, after: str | None) -> tuple[list[Edge], str | None]:
        """One page of following/followers and the ``after`` of the next page."""
        repo = self._storage.follows
        fetch = {
            "following": repo.following,
            "followers": repo.followers,
            "followers-active": self._storage.activity.active_followers,
        }[direction]
        items = await fetch(username, limit + 1, after)
        # 404 for unknown users. Edges exist only between users, and users
        # are never deleted, so a page with an edge proves the user exists:
        # the users table is read only for an empty page (one statement
        # fewer on every fan-out page; issue 31).
        if not items and await self._user(username) is None:
            raise NotFound(f"no user named '{username}'", code="user_not_found")
        page, more = items[:limit], len(items) > limit
        return page, (canonical(page[-1].username) if more and page else None)


def edge_json(edge: Edge) -> dict[str, str]:
    return {"username": edge.username, "since": to_rfc3339(edge.since)}


def edges_json(edges: list[Edge]) -> list[dict[str, str]]:
    """``edge_json`` of a page, each distinct ``since`` formatted once: a
    fan-out page (up to 1,000 followers) carries one constant instant."""
    stamps: dict[datetime, str] = {}
    out = []
    for edge in edges:
        since = stamps.get(edge.since)
        if since is None:
            since = stamps[edge.since] = to_rfc3339(edge.since)
        out.append({"username": edge.username, "since": since})
    return out


__all__ = ["SocialGraph", "VerifiedSession", "datetime", "edge_json", "edges_json", "token_hash"]
