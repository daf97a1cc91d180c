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
from typing import NamedTuple, Protocol

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


class HomeWindow(NamedTuple):
    """A slice of stored home rows and the owner's *horizon*.

    ``horizon`` is the oldest id the stored rows are trusted down to (None:
    nothing was ever trimmed, the rows reach back to the retention horizon).
    Rows older than ``horizon`` were trimmed away (``trim``), may have been
    written back later by a late or replayed event, and must be ignored:
    below the horizon the home timeline is read from the userlines instead
    (``fanline_tweet_store.hybrid``)."""

    ids: list[uuid.UUID]
    horizon: uuid.UUID | None


class HomeTimelineRepository(Protocol):
    """Home-timeline rows ``(owner, tweet_id, author)`` (owned by tweet-store).

    Rows are keyed by ``(owner, tweet_id)``, so rewriting a row is a no-op:
    redelivered events cannot create duplicates. Rows expire after the
    configured retention, and each owner's rows are capped by ``trim`` (see
    docs/architecture.md)."""

    async def add(self, owners: Sequence[str], tweet_id: uuid.UUID, author: str) -> None:
        """Insert the tweet into each owner's home timeline."""

    async def add_many(self, owner: str, entries: Sequence[tuple[uuid.UUID, str]]) -> None:
        """Insert several ``(tweet_id, author)`` into one owner's timeline."""

    async def remove(self, owners: Sequence[str], tweet_id: uuid.UUID) -> None:
        """Remove the tweet from each owner's home timeline."""

    async def remove_many(self, owner: str, tweet_ids: Sequence[uuid.UUID]) -> None:
        """Remove several tweets from one owner's home timeline."""

    async def slice(self, owner: str, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        """The owner's stored home ids, newest first, older than ``before``
        (whatever the horizon: see ``window``)."""

    async def present(self, owner: str, tweet_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        """Those of ``tweet_ids`` that are in the owner's home timeline now
        (one partition read per hundred ids in Cassandra), so a purge deletes
        only rows that exist instead of writing tombstones for the rest."""

    async def window(self, owner: str, limit: int, before: uuid.UUID | None) -> HomeWindow:
        """``slice`` plus the owner's horizon, in one round of queries."""

    async def trim(self, owner: str, keep: int) -> uuid.UUID | None:
        """Keep the owner's ``keep`` newest rows: remove every older row (in
        Cassandra one range tombstone, not one per row) and raise the horizon
        to the oldest row kept. Returns the horizon if it trimmed, else None
        (``keep`` or fewer rows). The horizon only ever rises, whatever the
        order concurrent trims land in."""

    async def raise_horizon(self, owner: str, tweet_id: uuid.UUID) -> None:
        """Raise the owner's horizon to ``tweet_id`` (no-op if it is higher already)."""

    async def regenerated_at(self, owner: str) -> datetime | None:
        """When the owner's home timeline was last regenerated, if ever."""

    async def mark_regenerated(self, owner: str, at: datetime) -> None:
        """Record a finished regeneration (the time only ever rises)."""

    async def claim_regeneration(self, owner: str, ttl_s: int) -> bool:
        """Claim the owner's regeneration for ``ttl_s``: True for exactly one
        of any number of concurrent claimers (all replicas), until released
        or expired."""

    async def release_regeneration(self, owner: str) -> None:
        """Give a claim back (unknown claims are ignored)."""


class LargeAccountRegistry(Protocol):
    """Authors whose tweets were not fanned out on write (owned by tweet-store).

    The fan-out worker registers an author *before* it skips the fan-out of
    one of their tweets; a registration lasts ``ttl_s`` (the home retention
    plus a margin), renewed by later registrations. Home reads merge the
    userlines of registered authors the reader follows, so every tweet that
    skipped the fan-out is merged at read time for as long as it could have
    been stored — also after the author dropped under the threshold."""

    async def register(self, author: str, ttl_s: int) -> None:
        """Record ``author`` (canonical) as large for ``ttl_s`` seconds."""

    async def members(self) -> set[str]:
        """Every registered author (canonical names) whose registration is live."""


class RelayLease(Protocol):
    """Which outbox relay may publish this outbox's stale events: one holder
    at a time, for a bounded time, so that N gateway replicas do not publish
    N copies of every event after an outage (issue 14, 3(e)).

    The lease expires by itself ``ttl_s`` after it was last taken or renewed
    (the storage's clock: a Cassandra TTL, SQLite's owning process), so a
    holder that dies is replaced; a holder must stop relaying before its
    own ``ttl_s`` has passed since it *asked* for the lease."""

    async def acquire_lease(self, holder: str, ttl_s: int) -> bool:
        """Take the lease if it is free or expired, or renew it if ``holder``
        has it; True if ``holder`` holds it for the next ``ttl_s`` seconds.
        Of concurrent callers at most one gets True."""

    async def release_lease(self, holder: str) -> None:
        """Give the lease up if ``holder`` has it (a standby takes over at its
        next try instead of after the TTL); otherwise change nothing."""


class Outbox(RelayLease, Protocol):
    """Events waiting to be published (one per owning service), and the
    lease of the relay that publishes them."""

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
