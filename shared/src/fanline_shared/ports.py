"""Storage ports: the small typed interfaces each owning service stores through.

Every port has two adapters — Cassandra (``adapters/cassandra.py`` in the owning
service) and embedded SQLite (``adapters/sqlite.py``) — and one contract-test
suite (``tests/contract/``) runs unchanged against both. The docstrings below
are the contract; the tests enforce it.

Conventions for every port:

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

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from .domain import Edge, OutboxEvent, Session, Tweet, User


class Lifecycle(Protocol):
    async def start(self) -> None:
        """Connect and create or migrate the schema (idempotent)."""

    async def close(self) -> None:
        """Release connections; safe to call twice."""

    async def ping(self) -> None:
        """Raise ``Unavailable`` unless the engine answers a trivial query now."""


class UserRepository(Protocol):
    """Users and their password hashes (owned by social-graph)."""

    async def create(self, username: str, password_hash: str, created_at: datetime) -> User:
        """Create a user; raise ``Conflict(code='username_taken')`` if the
        canonical name exists. Exactly one of any number of concurrent creates
        of the same canonical name succeeds (LWT in Cassandra)."""

    async def get(self, username: str) -> User | None:
        """The user with this canonical name, or None."""

    async def get_many(self, usernames: Sequence[str]) -> dict[str, User]:
        """Users by canonical name; unknown names are absent from the result."""

    async def credentials(self, username: str) -> tuple[User, str] | None:
        """The user and their password hash, or None."""

    async def search_prefix(self, prefix: str, limit: int) -> list[User]:
        """Users whose canonical name starts with ``prefix`` (itself a
        canonical string), in canonical-name order, at most ``limit``."""


class SessionRepository(Protocol):
    """Opaque bearer tokens, stored only as hashes (owned by social-graph)."""

    async def create(self, token_hash: str, username: str, expires_at: datetime) -> None:
        """Store a session that expires at ``expires_at``."""

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


class TweetRepository(Protocol):
    """Tweets, userlines and the public timeline (owned by tweet-store).

    Slices return tweet ids; callers multi-get the tweets with ``get_many``."""

    async def create(self, tweet: Tweet, event: OutboxEvent, *, fresh: bool = False) -> bool:
        """Store the tweet in the tweets table, the author's userline and the
        public timeline, and ``event`` in the outbox. True if it was new;
        writing the same tweet again changes nothing.

        ``fresh=True`` is the caller's promise that ``tweet.id`` was minted for
        this one call and is never written by anyone else (no idempotency key:
        nothing can repeat it). The adapter may then skip the existence check
        (in Cassandra: no lightweight transaction, one round of writes) and
        returns True."""

    async def reserve_idempotency_key(self, username: str, key: str, candidate: Tweet, ttl_s: int) -> Tweet:
        """Bind ``key`` (per user, for ``ttl_s``) to ``candidate`` if unbound,
        and return the tweet the key is bound to — ``candidate`` or the one an
        earlier (possibly still in-flight or crashed) request bound."""

    async def get(self, tweet_id: uuid.UUID) -> Tweet | None: ...

    async def get_many(self, tweet_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Tweet]:
        """Tweets by id in one round of queries; deleted/unknown ids absent."""

    async def delete(self, tweet: Tweet, event: OutboxEvent, *, remember_s: int = 0) -> bool:
        """Remove the tweet everywhere tweet-store keeps it and append
        ``event`` to the outbox; True if it existed. With ``remember_s``,
        ``was_deleted`` answers True for this id for at least that long (an
        idempotent repeat must not bring the tweet back)."""

    async def was_deleted(self, tweet_id: uuid.UUID) -> bool:
        """True if ``delete`` removed this tweet and still remembers it."""

    async def userline(self, username: str, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        """The user's tweet ids, newest first, strictly older than ``before``."""

    async def public(self, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        """Every tweet id, newest first, strictly older than ``before``."""

    async def counts(self, usernames: Sequence[str]) -> dict[str, int]:
        """``{canonical: tweets_count}`` for each name."""


class HomeTimelineRepository(Protocol):
    """Home-timeline rows ``(owner, tweet_id, author)`` (owned by tweet-store).

    Rows are keyed by ``(owner, tweet_id)``, so rewriting a row is a no-op:
    redelivered events cannot create duplicates. Rows expire after the
    configured retention (see docs/architecture.md)."""

    async def add(self, owners: Sequence[str], tweet_id: uuid.UUID, author: str) -> None:
        """Insert the tweet into each owner's home timeline."""

    async def add_many(self, owner: str, entries: Sequence[tuple[uuid.UUID, str]]) -> None:
        """Insert several ``(tweet_id, author)`` into one owner's timeline."""

    async def remove(self, owners: Sequence[str], tweet_id: uuid.UUID) -> None:
        """Remove the tweet from each owner's home timeline."""

    async def remove_many(self, owner: str, tweet_ids: Sequence[uuid.UUID]) -> None:
        """Remove several tweets from one owner's home timeline."""

    async def slice(self, owner: str, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        """The owner's home timeline ids, newest first, older than ``before``."""

    async def present(self, owner: str, tweet_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        """Those of ``tweet_ids`` that are in the owner's home timeline now
        (one partition read per hundred ids in Cassandra), so a purge deletes
        only rows that exist instead of writing tombstones for the rest."""


class Outbox(Protocol):
    """Events waiting to be published (one per owning service)."""

    async def pending(self, older_than: datetime, limit: int) -> list[OutboxEvent]:
        """Unacknowledged events created before ``older_than``, oldest first."""

    async def ack(self, event_ids: Sequence[uuid.UUID]) -> None:
        """Forget published events. Unknown ids are ignored."""


class AppliedAckOutbox(Outbox, Protocol):
    """An outbox that can keep events until the fan-out worker applied them
    (the embedded default, whose broker forgets everything when it stops).

    In this mode a published event is only *marked* published (``pending``
    no longer returns it); the worker ``ack``s it once applied; ``replay``
    makes every published-but-unapplied event pending again, so it is
    published anew — run at start, when the embedded broker may have lost
    it. Only the SQLite adapter implements it (see docs/architecture.md)."""

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None:
        """Stop returning these events from ``pending``; unknown ids ignored."""

    async def replay(self) -> int:
        """Make every published, unacknowledged event pending again; return
        how many."""
