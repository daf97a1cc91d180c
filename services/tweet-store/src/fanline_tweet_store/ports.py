"""tweet-store's storage ports: the small typed interfaces it stores through.

Every port has two adapters — Cassandra (``adapters/cassandra.py``,
``adapters/cassandra_home.py``) and embedded SQLite (``adapters/sqlite.py``)
— and one contract-test suite (``tests/contract/``) runs unchanged against
both. The docstrings below are the contract; the tests enforce it. The outbox
port is the kit's (``fanline_shared.outbox.ports``).

Conventions for every port (shared with social-graph's and the outbox's):

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

from fanline_shared.domain import OutboxEvent, Tweet


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

    async def userline_after(self, username: str, limit: int, after: uuid.UUID | None) -> list[uuid.UUID]:
        """The user's ``limit`` *oldest* tweet ids strictly newer than
        ``after`` (None: from the start), oldest first (``min_id`` pages):
        passing the last id of one call continues with no gap and no repeat."""

    async def public_after(self, limit: int, after: uuid.UUID | None) -> list[uuid.UUID]:
        """Every tweet id strictly newer than ``after``, oldest first, at most ``limit``."""

    async def counts(self, usernames: Sequence[str]) -> dict[str, int]:
        """``{canonical: tweets_count}`` for each name."""


class TrimOutcome(NamedTuple):
    """What one trim found: ``horizon`` if it trimmed (else None), the
    owner's rows it counted (at most ``keep + 1``) and the newest of them."""

    horizon: uuid.UUID | None
    rows: int
    newest: uuid.UUID | None


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

    async def by_author(self, owner: str, author: str) -> list[uuid.UUID]:
        """Every stored id of the owner's home timeline whose author is
        ``author``, newest first: one read of the owner's whole partition,
        which the row cap bounds (``trim``) however many tweets the author
        has. What a purge reads instead of the author's userline once that
        is the longer of the two."""

    async def window(self, owner: str, limit: int, before: uuid.UUID | None) -> HomeWindow:
        """``slice`` plus the owner's horizon, in one round of queries."""

    async def window_after(self, owner: str, limit: int, after: uuid.UUID | None) -> HomeWindow:
        """The owner's ``limit`` oldest stored ids strictly newer than
        ``after``, oldest first (whatever the horizon), plus the horizon: one
        query when a row comes back (the horizon is read with it)."""

    async def trim(self, owner: str, keep: int) -> uuid.UUID | None:
        """Keep the owner's ``keep`` newest rows: remove every older row (in
        Cassandra one range tombstone, not one per row) and raise the horizon
        to the oldest row kept. Returns the horizon if it trimmed, else None
        (``keep`` or fewer rows). The horizon only ever rises, whatever the
        order concurrent trims land in."""

    async def trim_counted(self, owner: str, keep: int) -> TrimOutcome:
        """``trim``, with what its scan counted (``TrimOutcome``)."""

    async def count_newer(self, owner: str, after: uuid.UUID, limit: int) -> tuple[int, uuid.UUID | None]:
        """The owner's rows newer than ``after``, counted up to ``limit``, and
        the newest of them (None if none): the cap's cheap check of an owner
        it counted a moment ago (``home_cap.py``)."""

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


class IdSlots(Protocol):
    """Leases of the 64 status-id slots (``sids.py``): at most one holder
    per slot at a time, for a bounded time, so that no two processes mint the
    same id. A lease expires by itself ``ttl_s`` after it was last taken or
    renewed (the storage's clock); a holder must stop minting before its own
    ``ttl_s`` has passed since it *asked*."""

    async def acquire_slot(self, holder: str, ttl_s: int) -> int | None:
        """Take a free (or expired) slot for ``holder`` and return it; None
        if all 64 are held. Of concurrent callers, each slot goes to one."""

    async def renew_slot(self, slot: int, holder: str, ttl_s: int) -> bool:
        """Extend ``holder``'s lease of ``slot``; False if it is not (or no
        longer) ``holder``'s."""

    async def release_slot(self, slot: int, holder: str) -> None:
        """Give ``slot`` up if ``holder`` has it; otherwise change nothing."""
