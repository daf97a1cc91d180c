"""A read-through cache of tweets for timeline pages (hydration).

A timeline page is one slice of ids plus a multi-get of up to 100 tweets; the
multi-get is most of its cost (one read per tweet). Tweets never change once
written — only deletion ends them — and the same tweet is read on every
follower's home timeline, so tweet-store keeps the tweets it has read or
written in a bounded in-memory LRU (``cachetools.TTLCache``) and asks the
store only for the rest. This is how large timeline systems hydrate pages.

What it promises (``tests/contract/test_tweet_cache.py`` checks each):

* ``get_many`` returns exactly what the store would, except for a tweet
  deleted through *another* tweet-store replica: that one can still be served
  from this replica's cache until its entry expires (``ttl_s``) or its id
  leaves the timeline (the fan-out worker removes a deleted tweet's home rows
  within seconds; userlines and the public timeline drop it at once, in the
  same batch as the delete). A delete through *this* replica is seen at once.
* A read racing a local delete cannot put the deleted tweet back: deleted ids
  are remembered (as long as cache entries live) and never cached again.
* ``get`` — ``GET /v1/tweets/{id}`` and the author check of a delete — always
  asks the store: a single tweet is cheap and must be authoritative.
* Unknown ids are not cached (a miss costs one read, a wrong "absent" would
  hide a tweet).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from cachetools import TTLCache

from fanline_shared import metrics
from fanline_shared.domain import OutboxEvent, Tweet

from .ports import TweetRepository

# Defaults: ~1 KB a tweet, so 20,000 tweets are ~20 MB per process — the
# tweets of the last minutes on a busy node, which is what timelines show.
DEFAULT_SIZE = 20_000
DEFAULT_TTL_S = 60.0


@dataclass(frozen=True)
class TweetCachePolicy:
    """``size`` tweets at most (0 turns the cache off), each kept ``ttl_s``."""

    size: int = DEFAULT_SIZE
    ttl_s: float = DEFAULT_TTL_S

    @property
    def enabled(self) -> bool:
        return self.size > 0 and self.ttl_s > 0


class CachedTweets:
    """A ``TweetRepository`` that serves ``get_many`` from memory where it can
    and delegates everything else to ``store``."""

    def __init__(self, store: TweetRepository, policy: TweetCachePolicy) -> None:
        if not policy.enabled:
            raise ValueError("a disabled policy needs no cache")
        self._store = store
        self._tweets: TTLCache[uuid.UUID, Tweet] = TTLCache(maxsize=policy.size, ttl=policy.ttl_s)
        self._deleted: TTLCache[uuid.UUID, bool] = TTLCache(maxsize=policy.size, ttl=policy.ttl_s)

    def __len__(self) -> int:
        return len(self._tweets)

    def _keep(self, tweet: Tweet) -> None:
        if tweet.id not in self._deleted:
            self._tweets[tweet.id] = tweet

    async def create(self, tweet: Tweet, event: OutboxEvent, *, fresh: bool = False) -> bool:
        created = await self._store.create(tweet, event, fresh=fresh)
        # A new tweet is read next on its followers' timelines: keep it.
        self._keep(tweet)
        return created

    async def reserve_idempotency_key(self, username: str, key: str, candidate: Tweet, ttl_s: int) -> Tweet:
        return await self._store.reserve_idempotency_key(username, key, candidate, ttl_s)

    async def get(self, tweet_id: uuid.UUID) -> Tweet | None:
        return await self._store.get(tweet_id)

    async def get_many(self, tweet_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Tweet]:
        found: dict[uuid.UUID, Tweet] = {}
        missing: list[uuid.UUID] = []
        for tid in dict.fromkeys(tweet_ids):  # each id once, in order
            if tid in self._deleted:
                continue
            tweet = self._tweets.get(tid)
            if tweet is None:
                missing.append(tid)
            else:
                found[tid] = tweet
        if found:
            metrics.TWEET_CACHE_LOOKUPS.labels(result="hit").inc(len(found))
        if missing:
            metrics.TWEET_CACHE_LOOKUPS.labels(result="miss").inc(len(missing))
            for tid, tweet in (await self._store.get_many(missing)).items():
                # Deleted (here) while the read was in flight: not served, not kept.
                if tid not in self._deleted:
                    found[tid] = tweet
                    self._keep(tweet)
        return found

    async def was_deleted(self, tweet_id: uuid.UUID) -> bool:
        return await self._store.was_deleted(tweet_id)

    async def delete(self, tweet: Tweet, event: OutboxEvent, *, remember_s: int = 0) -> bool:
        # Remembered first, so a read in flight cannot cache it again. If the
        # store then fails, the delete may or may not have happened; this
        # replica errs on hiding the tweet until the client's retry settles it.
        self._deleted[tweet.id] = True
        self._tweets.pop(tweet.id, None)
        return await self._store.delete(tweet, event, remember_s=remember_s)

    async def userline(self, username: str, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        return await self._store.userline(username, limit, before)

    async def public(self, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        return await self._store.public(limit, before)

    async def userline_after(self, username: str, limit: int, after: uuid.UUID | None) -> list[uuid.UUID]:
        return await self._store.userline_after(username, limit, after)

    async def public_after(self, limit: int, after: uuid.UUID | None) -> list[uuid.UUID]:
        return await self._store.public_after(limit, after)

    async def counts(self, usernames: Sequence[str]) -> dict[str, int]:
        return await self._store.counts(usernames)
