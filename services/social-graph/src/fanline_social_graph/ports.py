"""social-graph's storage ports: the small typed interfaces it stores through.

Every port has two adapters — Cassandra (``adapters/cassandra.py``) and
embedded SQLite (``adapters/sqlite.py``) — and one contract-test suite
(``tests/contract/``) runs unchanged against both. The docstrings below are
the contract; the tests enforce it. The outbox port is the kit's
(``fanline_shared.outbox.ports``).

Conventions for every port (shared with tweet-store's and the outbox's):

* usernames are matched case-insensitively (``domain.canonical``); records
  keep the display case given at sign-up;
* every write is idempotent: repeating it (a retry, a redelivered event) leaves
  the same state as doing it once;
* time-ordered slices are newest first, and ``before`` is exclusive: passing
  the last id of one page yields the next page with no gap and no repeat;
* adapters raise ``errors.Unavailable`` when their engine cannot answer, and
  nothing else for infrastructure failures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol

from fanline_shared.domain import Edge, OutboxEvent, Session, User


class UserRepository(Protocol):
    """Users and their password hashes (owned by social-graph).

    Every user has a numeric ``account_id`` (the Mastodon-compatible API's
    account id: ``created_at_ms << 16 | hash16(canonical name)``, the next
    free value on a collision), unique and stable, and optionally an
    ``email``, unique regardless of case."""

    async def create(self, username: str, password_hash: str, created_at: datetime, email: str | None = None) -> User:
        """Create a user with a new account id; raise
        ``Conflict(code='username_taken')`` if the canonical name exists, or
        ``Conflict(code='email_taken')`` if ``email`` (compared lower-cased)
        belongs to someone else. Exactly one of any number of concurrent
        creates of the same canonical name (or email) succeeds (LWT in
        Cassandra)."""

    async def get(self, username: str) -> User | None:
        """The user with this canonical name, or None."""

    async def get_many(self, usernames: Sequence[str]) -> dict[str, User]:
        """Users by canonical name; unknown names are absent from the result."""

    async def credentials(self, username: str) -> tuple[User, str] | None:
        """The user and their password hash, or None."""

    async def search_prefix(self, prefix: str, limit: int) -> list[User]:
        """Users whose canonical name starts with ``prefix`` (itself a
        canonical string), in canonical-name order, at most ``limit``."""

    async def by_account_id(self, account_id: int) -> User | None:
        """The user with this account id, or None."""

    async def by_email(self, email: str) -> User | None:
        """The user with this email (compared lower-cased), or None."""

    async def assign_account_id(self, user: User) -> User:
        """``user`` with an account id: the one it has, or a new one stored
        now (a user created before account ids existed, or by an older
        replica). Idempotent: concurrent callers end with the same id."""

    async def backfill_account_ids(self) -> int:
        """Give every user without an account id one (at start, once: a
        marker records that it ran); returns how many were assigned."""


class SessionRepository(Protocol):
    """Opaque bearer tokens, stored only as hashes (owned by social-graph):
    ``/v1/sessions`` tokens and OAuth tokens alike (one store)."""

    async def create(
        self,
        token_hash: str,
        username: str,
        expires_at: datetime | None,
        *,
        scopes: str = "read write follow push",
        client_id: str | None = None,
        kind: str = "user",
    ) -> None:
        """Store a token that expires at ``expires_at`` (None: never, until
        revoked), with its grant (see ``domain.Session``)."""

    async def get(self, token_hash: str) -> Session | None:
        """The live session, or None if unknown, revoked or expired."""

    async def revoke(self, token_hash: str) -> None:
        """Make the token unusable at once. Unknown tokens are ignored."""


class FollowRepository(Protocol):
    """The follow graph and its counts (owned by social-graph).

    ``follow``/``unfollow`` also append ``event`` to the service's outbox, no
    later than the edge changes (in the same write, or before it), so a
    stored change always has its Followed/Unfollowed event; an event whose
    change never happened is harmless (the worker checks current state)."""

    async def follow(self, follower: str, followee: str, since: datetime, event: OutboxEvent) -> bool:
        """Record ``follower`` → ``followee``; True if it was new. Counts move
        only when the edge is new."""

    async def unfollow(self, follower: str, followee: str, event: OutboxEvent) -> bool:
        """Remove the edge; True if it existed."""

    async def is_following(self, follower: str, followee: str) -> bool: ...

    async def reconcile(self, follower: str, followee: str) -> bool:
        """Make the dependent rows (the ``followers`` row fan-out reads) agree
        with the edge as it stands now, and return whether ``follower``
        follows ``followee``. The worker calls it when it applies a
        Followed/Unfollowed event, which repairs a follow or unfollow that
        died between its edge write and its dependent rows (Cassandra; on
        SQLite they commit together). Idempotent."""

    async def following(self, username: str, limit: int, after: str | None) -> list[Edge]:
        """Accounts ``username`` follows, by canonical name ascending, strictly
        after the canonical name ``after``."""

    async def followers(self, username: str, limit: int, after: str | None) -> list[Edge]:
        """Accounts following ``username``; same order and paging."""

    async def counts(self, usernames: Sequence[str]) -> dict[str, tuple[int, int]]:
        """``{canonical: (followers_count, following_count)}`` for each name."""


class Activity(NamedTuple):
    """When a user was last seen (coarsely), and when they last came back
    after being inactive (None: never, or not recorded)."""

    last_seen: datetime | None
    returned_at: datetime | None


class ActivityRepository(Protocol):
    """Coarse last-active tracking and the *active followers* index (owned by
    social-graph).

    ``followers_active`` holds a follower under a followee only while the
    follower is active: rows are written with a TTL and renewed while the
    follower keeps making requests, so an inactive follower drops out by
    itself and the fan-out (which pages this index) skips them with no check
    per row. See ``fanline_social_graph.activity``."""

    async def get(self, username: str) -> Activity:
        """The user's recorded activity (both None if never recorded)."""

    async def record(self, username: str, last_seen: datetime, returned_at: datetime | None) -> None:
        """Record the user as seen at ``last_seen``; ``returned_at`` as given."""

    async def activate(self, follower: str, followees: Sequence[str], ttl_s: int) -> None:
        """(Re)write ``follower`` under each followee's active followers, for ``ttl_s``."""

    async def deactivate(self, follower: str, followee: str) -> None:
        """Remove ``follower`` from ``followee``'s active followers."""

    async def active_followers(self, username: str, limit: int, after: str | None) -> list[Edge]:
        """Active followers of ``username``, by canonical name, strictly after ``after``."""


# --- OAuth apps and authorization codes (the Mastodon-compatible API, oauth.py) ---
# Secrets and codes are stored only as SHA-256 hashes (random, high-entropy
# strings: a slow hash adds nothing). Tokens live in ``SessionRepository``.


@dataclass(frozen=True, slots=True)
class OAuthApp:
    """A client registered with ``POST /api/v1/apps``."""

    client_id: str
    secret_hash: str
    name: str
    website: str | None
    redirect_uris: tuple[str, ...]
    scopes: tuple[str, ...]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class CodeGrant:
    """What an authorization code stands for, until it is exchanged (once)."""

    client_id: str
    username: str
    redirect_uri: str
    scopes: tuple[str, ...]
    challenge: str | None = None  # PKCE code_challenge
    challenge_method: str | None = None  # "S256" or "plain"


class OAuthRepository(Protocol):
    async def create_app(self, app: OAuthApp) -> None:
        """Store a new app (its ``client_id`` is fresh and random)."""

    async def get_app(self, client_id: str) -> OAuthApp | None:
        """The app, or None."""

    async def create_code(self, code_hash: str, grant: CodeGrant, ttl_s: int) -> None:
        """Store a code that expires after ``ttl_s``."""

    async def take_code(self, code_hash: str) -> CodeGrant | None:
        """The grant of a live code, removing it: of any number of
        concurrent takers exactly one gets it (an LWT in Cassandra), and an
        expired or already taken code gives None."""
