"""The hydration cache's races, with a store whose reads can be held.

The contract suite (tests/contract/test_tweet_cache.py) runs the cache over
the real stores; this file pins the interleavings a real store cannot be made
to produce on demand.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest

from fanline_shared import events
from fanline_shared.domain import OutboxEvent, Tweet, new_timeuuid
from fanline_tweet_store.cache import CachedTweets, TweetCachePolicy


class HeldStore:
    """Just enough of a ``TweetRepository``: reads wait for ``release``."""

    def __init__(self) -> None:
        self.tweets: dict[uuid.UUID, Tweet] = {}
        self.release = asyncio.Event()
        self.release.set()
        self.reads: list[list[uuid.UUID]] = []

    async def create(self, tweet: Tweet, event: OutboxEvent, *, fresh: bool = False) -> bool:
        new = tweet.id not in self.tweets
        self.tweets[tweet.id] = tweet
        return new

    async def get(self, tweet_id: uuid.UUID) -> Tweet | None:
        return self.tweets.get(tweet_id)

    async def get_many(self, tweet_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Tweet]:
        self.reads.append(list(tweet_ids))
        snapshot = {i: self.tweets[i] for i in tweet_ids if i in self.tweets}
        await self.release.wait()
        return snapshot

    async def delete(self, tweet: Tweet, event: OutboxEvent, *, remember_s: int = 0) -> bool:
        return self.tweets.pop(tweet.id, None) is not None


def a_tweet() -> Tweet:
    return Tweet(id=new_timeuuid(), username="alice", body="hi")


async def test_a_read_racing_a_delete_does_not_bring_the_tweet_back() -> None:
    store = HeldStore()
    cache = CachedTweets(store, TweetCachePolicy(size=10, ttl_s=60))  # type: ignore[arg-type]
    t = a_tweet()
    await store.create(t, events.tweet_created(t.id, t.username, t.created_at))
    store.release.clear()
    read = asyncio.create_task(cache.get_many([t.id]))  # reads the tweet, then is held
    await asyncio.sleep(0)
    assert await cache.delete(t, events.tweet_deleted(t.id, t.username)) is True
    store.release.set()
    assert await read == {}  # deleted while in flight: not served...
    assert len(cache) == 0  # ...and not kept
    assert await cache.get_many([t.id]) == {}


async def test_each_id_is_read_once_and_only_misses_are_read() -> None:
    store = HeldStore()
    cache = CachedTweets(store, TweetCachePolicy(size=10, ttl_s=60))  # type: ignore[arg-type]
    warm, cold = a_tweet(), a_tweet()
    await cache.create(warm, events.tweet_created(warm.id, warm.username, warm.created_at))
    await store.create(cold, events.tweet_created(cold.id, cold.username, cold.created_at))
    found = await cache.get_many([cold.id, warm.id, cold.id])
    assert found == {cold.id: cold, warm.id: warm}
    assert store.reads == [[cold.id]]
    assert await cache.get_many([cold.id, warm.id]) == {cold.id: cold, warm.id: warm}
    assert store.reads == [[cold.id]]


def test_a_disabled_policy_builds_no_cache() -> None:
    assert not TweetCachePolicy(size=0).enabled
    assert not TweetCachePolicy(ttl_s=0).enabled
    with pytest.raises(ValueError):
        CachedTweets(HeldStore(), TweetCachePolicy(size=0))  # type: ignore[arg-type]
