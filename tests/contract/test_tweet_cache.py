"""tweet-store's hydration cache (``CachedTweets``) over every adapter.

The cache is a ``TweetRepository`` too: the repository contract's tests that
touch what it changes (create, get_many, delete) run again through it, and
the cache's own promises (cache.py) are checked against the real stores —
including two replicas (two caches) over one store.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from prometheus_client import REGISTRY

from fanline_shared.domain import new_timeuuid
from fanline_tweet_store.adapters import TweetStoreStorage
from fanline_tweet_store.cache import CachedTweets, TweetCachePolicy

from . import test_tweets as contract
from .support import Clock, Names
from .test_tweets import create, delete, tweet

POLICY = TweetCachePolicy(size=1000, ttl_s=60)


def cached(store: TweetStoreStorage, policy: TweetCachePolicy = POLICY) -> TweetStoreStorage:
    """The storage as tweet-store's composition root builds it."""
    return dataclasses.replace(store, tweets=CachedTweets(store.tweets, policy))


def hits() -> float:
    return REGISTRY.get_sample_value("fanline_tweet_cache_lookups_total", {"result": "hit"}) or 0.0


# --- the repository contract, through the cache ---------------------------------------


async def test_contract_create_is_idempotent(tweet_store: TweetStoreStorage, names: Names) -> None:
    await contract.test_create_is_idempotent(cached(tweet_store), names)


async def test_contract_fresh_create(tweet_store: TweetStoreStorage, names: Names) -> None:
    await contract.test_fresh_create_stores_everything_and_counts_once(cached(tweet_store), names)


async def test_contract_get_many_returns_known_ids_only(tweet_store: TweetStoreStorage, names: Names) -> None:
    store = cached(tweet_store)
    await contract.test_get_many_returns_known_ids_only(store, names)
    await contract.test_get_many_returns_known_ids_only(store, names)  # now warm


async def test_contract_delete_removes_tweet_everywhere(tweet_store: TweetStoreStorage, names: Names, clock: Clock) -> None:
    await contract.test_delete_removes_tweet_everywhere(cached(tweet_store), names, clock)


# --- the cache's own promises --------------------------------------------------------------


async def test_warm_reads_are_served_from_memory(tweet_store: TweetStoreStorage, names: Names) -> None:
    author = names.user("Ch")
    ts = [tweet(author) for _ in range(5)]
    for t in ts:
        await create(tweet_store, t)  # written around the cache: cold
    store = cached(tweet_store)
    ids = [t.id for t in ts]
    before = hits()
    assert await store.tweets.get_many(ids) == {t.id: t for t in ts}
    assert hits() == before
    assert await store.tweets.get_many([*ids, new_timeuuid()]) == {t.id: t for t in ts}
    assert hits() == before + 5


async def test_a_local_delete_is_seen_at_once_even_when_cached(tweet_store: TweetStoreStorage, names: Names) -> None:
    author = names.user("Cd")
    keep, gone = tweet(author), tweet(author)
    store = cached(tweet_store)
    for t in (keep, gone):
        await create(store, t)
    assert await store.tweets.get_many([keep.id, gone.id]) == {keep.id: keep, gone.id: gone}
    assert await delete(store, gone) is True
    assert await store.tweets.get_many([keep.id, gone.id]) == {keep.id: keep}
    assert await store.tweets.get(gone.id) is None


async def test_another_replicas_delete_shows_within_the_ttl(tweet_store: TweetStoreStorage, names: Names) -> None:
    """Two tweet-store replicas over one store: a delete through B is served
    stale by A's cache only until A's entry expires; ``get`` is never stale."""
    author = names.user("Cr")
    t = tweet(author)
    a = cached(tweet_store, TweetCachePolicy(size=100, ttl_s=0.5))
    b = cached(tweet_store, TweetCachePolicy(size=100, ttl_s=0.5))
    await create(a, t)
    assert await a.tweets.get_many([t.id]) == {t.id: t}
    assert await delete(b, t) is True
    assert await a.tweets.get(t.id) is None  # authoritative
    assert await b.tweets.get_many([t.id]) == {}
    await asyncio.sleep(0.6)
    assert await a.tweets.get_many([t.id]) == {}


async def test_unknown_ids_are_not_cached(tweet_store: TweetStoreStorage, names: Names) -> None:
    """An id read before its tweet is visible (another replica's write) is
    found as soon as the store has it."""
    author = names.user("Cu")
    t = tweet(author)
    store = cached(tweet_store)
    assert await store.tweets.get_many([t.id]) == {}
    await create(tweet_store, t)  # through another replica
    assert await store.tweets.get_many([t.id]) == {t.id: t}


@pytest.mark.parametrize("size", [1, 3])
async def test_the_cache_is_bounded(tweet_store: TweetStoreStorage, names: Names, size: int) -> None:
    author = names.user("Cb")
    ts = [tweet(author) for _ in range(6)]
    tweets = CachedTweets(tweet_store.tweets, TweetCachePolicy(size=size, ttl_s=60))
    store = dataclasses.replace(tweet_store, tweets=tweets)
    for t in ts:
        await create(store, t)
    assert len(tweets) == size
    assert await store.tweets.get_many([t.id for t in ts]) == {t.id: t for t in ts}
    assert len(tweets) == size
