"""The hybrid home read (``fanline_tweet_store.hybrid``) over every adapter:
stored rows, large accounts merged at read time, and paging past the cap.

The social graph is a dict here (``following``): what is under test is how
tweet-store combines its own tables, which is the same on both backends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from datetime import timedelta

import pytest

from fanline_shared import events
from fanline_shared.domain import Tweet, canonical, new_timeuuid, utcnow
from fanline_tweet_store.adapters import TweetStoreStorage
from fanline_tweet_store.hybrid import HybridHome, HybridPolicy

from .support import Names
from .test_home_timeline import newest_first

FRESH = HybridPolicy(registry_ttl_s=0.001, recent_ttl_s=0.001, following_ttl_s=0.001, recent_depth=5)


class Graph:
    """Who follows whom, as tweet-store's home reads would learn it from social-graph."""

    def __init__(self) -> None:
        self.edges: dict[str, set[str]] = {}

    def follow(self, follower: str, *followees: str) -> None:
        self.edges.setdefault(canonical(follower), set()).update(canonical(f) for f in followees)

    def unfollow(self, follower: str, followee: str) -> None:
        self.edges.get(canonical(follower), set()).discard(canonical(followee))

    async def following(self, username: str) -> list[str]:
        return sorted(self.edges.get(canonical(username), set()))


@pytest.fixture
def graph() -> Graph:
    return Graph()


def reader(store: TweetStoreStorage, graph: Graph, policy: HybridPolicy = FRESH, retention_s: int = 3600) -> HybridHome:
    return HybridHome(store.home, store.tweets, store.large, graph.following, retention_s=retention_s, policy=policy)


async def post(
    store: TweetStoreStorage, author: str, count: int, *, start_min_ago: float = 50, step_s: float = 3.0
) -> list[uuid.UUID]:
    """``count`` tweets by ``author`` (oldest first), in its userline; not fanned out."""
    ids = []
    start = utcnow() - timedelta(minutes=start_min_ago)
    for n in range(count):
        tid = new_timeuuid(start + timedelta(seconds=n * step_s))
        tweet = Tweet(id=tid, username=author, body=f"{author} {n}")
        await store.tweets.create(tweet, events.tweet_created(tid, author, tweet.created_at), fresh=True)
        ids.append(tid)
    return ids


async def fan_out(store: TweetStoreStorage, author: str, ids: Iterable[uuid.UUID], owners: list[str]) -> None:
    for tid in ids:
        await store.home.add(owners, tid, author)


async def page_all(home: HybridHome, owner: str, limit: int) -> list[uuid.UUID]:
    """Every id of the timeline, paging like a client (limit + 1, cursor = last id)."""
    seen: list[uuid.UUID] = []
    before = None
    while True:
        ids = await home.ids(owner, limit + 1, before)
        seen.extend(ids[:limit])
        if len(ids) <= limit:
            return seen
        before = ids[limit - 1]


async def test_without_large_accounts_or_trims_it_is_the_stored_slice(
    tweet_store: TweetStoreStorage, graph: Graph, names: Names
) -> None:
    owner, friend = names.user(), names.user()
    graph.follow(owner, friend)
    ids = await post(tweet_store, friend, 6)
    await fan_out(tweet_store, friend, ids, [owner, friend])
    home = reader(tweet_store, graph)
    assert await home.ids(owner, 4, None) == newest_first(ids)[:4]
    assert await page_all(home, owner, 4) == newest_first(ids)


async def test_large_accounts_are_merged_for_their_followers_only(
    tweet_store: TweetStoreStorage, graph: Graph, names: Names
) -> None:
    owner, stranger, big, small = (names.user() for _ in range(4))
    graph.follow(owner, big, small)
    graph.follow(stranger, small)
    small_ids = await post(tweet_store, small, 4, start_min_ago=40)
    await fan_out(tweet_store, small, small_ids, [owner, stranger, small])
    big_ids = await post(tweet_store, big, 9, start_min_ago=41, step_s=2.0)  # interleaved in time
    await tweet_store.large.register(big, 3600)
    home = reader(tweet_store, graph)
    expected = newest_first(small_ids + big_ids)
    assert await page_all(home, owner, 3) == expected
    assert await page_all(home, stranger, 3) == newest_first(small_ids)
    # Unfollowing a large account takes its tweets out at once (no rows to purge).
    graph.unfollow(owner, big)
    await asyncio.sleep(2 * FRESH.following_ttl_s)  # the documented staleness of whom the owner follows
    assert await page_all(home, owner, 3) == newest_first(small_ids)


async def test_crossing_the_threshold_either_way_loses_and_duplicates_nothing(
    tweet_store: TweetStoreStorage, graph: Graph, names: Names
) -> None:
    owner, author = names.user(), names.user()
    graph.follow(owner, author)
    pushed = await post(tweet_store, author, 3, start_min_ago=30)  # small: fanned out
    await fan_out(tweet_store, author, pushed, [owner])
    await tweet_store.large.register(author, 3600)  # grows large
    merged = await post(tweet_store, author, 3, start_min_ago=20)  # not fanned out
    later = await post(tweet_store, author, 2, start_min_ago=10)  # drops back: fanned out again
    await fan_out(tweet_store, author, later, [owner])
    home = reader(tweet_store, graph)
    assert await page_all(home, owner, 2) == newest_first(pushed + merged + later)


async def test_paging_past_the_cap_reads_the_userlines(tweet_store: TweetStoreStorage, graph: Graph, names: Names) -> None:
    owner, a, b = names.user(), names.user(), names.user()
    graph.follow(owner, a, b)
    a_ids = await post(tweet_store, a, 12, start_min_ago=50, step_s=5)
    b_ids = await post(tweet_store, b, 12, start_min_ago=49, step_s=5)
    own = await post(tweet_store, owner, 3, start_min_ago=48, step_s=20)
    await fan_out(tweet_store, a, a_ids, [owner])
    await fan_out(tweet_store, b, b_ids, [owner])
    await fan_out(tweet_store, owner, own, [owner])
    everything = newest_first(a_ids + b_ids + own)
    horizon = await tweet_store.home.trim(owner, 10)
    assert horizon == everything[9]
    assert len(await tweet_store.home.slice(owner, 100, None)) == 10
    home = reader(tweet_store, graph)
    for limit in (1, 4, 10, 11, 30):
        assert await page_all(home, owner, limit) == everything, limit
    # A row written back below the horizon (a late event) is not trusted, and
    # an unfollowed author leaves the part below the horizon at once (the
    # worker purges their stored rows above it).
    await tweet_store.home.add([owner], a_ids[0], a)
    graph.unfollow(owner, b)
    await asyncio.sleep(2 * FRESH.following_ttl_s)  # the documented staleness of whom the owner follows
    assert await page_all(home, owner, 7) == everything[:10] + [i for i in everything[10:] if i not in b_ids]


async def test_paging_below_the_horizon_stops_at_the_retention_horizon(
    tweet_store: TweetStoreStorage, graph: Graph, names: Names
) -> None:
    owner, a = names.user(), names.user()
    graph.follow(owner, a)
    old = await post(tweet_store, a, 3, start_min_ago=50)  # older than a 40-minute retention
    young = await post(tweet_store, a, 12, start_min_ago=30)
    await fan_out(tweet_store, a, young, [owner])
    await tweet_store.home.trim(owner, 10)
    home = reader(tweet_store, graph, retention_s=40 * 60)
    assert await page_all(home, owner, 5) == newest_first(young)
    del old


async def test_a_cached_large_account_head_serves_pages_and_falls_back_past_it(
    tweet_store: TweetStoreStorage, graph: Graph, names: Names
) -> None:
    owner, big = names.user(), names.user()
    graph.follow(owner, big)
    ids = await post(tweet_store, big, 12, step_s=1)
    await tweet_store.large.register(big, 3600)
    cached = HybridPolicy(registry_ttl_s=60, recent_ttl_s=60, following_ttl_s=60, recent_depth=5)
    home = reader(tweet_store, graph, cached)
    assert await page_all(home, owner, 2) == newest_first(ids)  # head of 5, then the store
    assert await page_all(home, owner, 7) == newest_first(ids)


async def test_since_cuts_every_timeline_strictly_above_an_id(tweet_store: TweetStoreStorage, graph: Graph, names: Names) -> None:
    from fanline_tweet_store.home_cap import HomeCap
    from fanline_tweet_store.regeneration import Regenerator
    from fanline_tweet_store.service import TweetStore

    owner, a, big = names.user(), names.user(), names.user()
    graph.follow(owner, a, big)
    a_ids = await post(tweet_store, a, 8, start_min_ago=30)
    big_ids = await post(tweet_store, big, 4, start_min_ago=29)
    await fan_out(tweet_store, a, a_ids, [owner])
    await tweet_store.large.register(big, 3600)
    hybrid = reader(tweet_store, graph)
    store = TweetStore(
        tweet_store,
        retention_s=3600,
        idempotency_ttl_s=60,
        merge_count=50,
        hybrid=hybrid,
        cap=HomeCap(tweet_store.home, 10),
        regenerator=Regenerator(tweet_store.home, tweet_store.tweets, hybrid.following, retention_s=3600, max_rows=10),
    )
    everything = newest_first(a_ids + big_ids)
    since = everything[6]
    newer = everything[:6]
    for kind, who, expected in (("home", owner, newer), ("user", a, [i for i in newer if i in a_ids])):
        seen, before = [], None
        while True:
            items, nxt = await store.page(kind, who, 4, before, since)
            seen.extend(t.id for t in items)
            if nxt is None:
                break
            before = uuid.UUID(nxt)
        assert seen == expected, kind
    items, nxt = await store.page("home", owner, 10, None, everything[0])
    assert (items, nxt) == ([], None)  # nothing newer than the newest


@pytest.mark.parametrize(("authors", "per_author", "max_rows"), [(2, 30, 10), (3, 4, 50), (1, 0, 10), (25, 3, 10)])
async def test_a_regenerated_timeline_equals_the_one_never_away(
    tweet_store: TweetStoreStorage, graph: Graph, names: Names, authors: int, per_author: int, max_rows: int
) -> None:
    from fanline_tweet_store.regeneration import Regenerator

    owner, twin = names.user("away"), names.user("twin")
    followed = [names.user() for _ in range(authors)]
    graph.follow(owner, *followed)
    graph.follow(twin, *followed)
    posted: list[uuid.UUID] = []
    for n, author in enumerate(followed):
        ids = await post(tweet_store, author, per_author, start_min_ago=50 - n * 0.1, step_s=7)
        posted += ids
        # The twin got every row; the owner only the first third (then went away).
        await fan_out(tweet_store, author, ids, [twin])
        await fan_out(tweet_store, author, ids[: len(ids) // 3], [owner])
    own = await post(tweet_store, owner, 2, start_min_ago=20)
    await fan_out(tweet_store, owner, own, [owner])
    twin_own = await post(tweet_store, twin, 1, start_min_ago=21)
    await fan_out(tweet_store, twin, twin_own, [twin])
    home = reader(tweet_store, graph)
    regenerator = Regenerator(tweet_store.home, tweet_store.tweets, home.following, retention_s=3600, max_rows=max_rows)
    written = await regenerator.regenerate(owner)
    assert written <= max_rows
    expected = newest_first(posted + own)
    assert await page_all(home, owner, 7) == expected
    assert await page_all(home, twin, 7) == newest_first(posted + twin_own)
