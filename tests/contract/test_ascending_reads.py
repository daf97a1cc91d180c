"""Oldest-first reads (Mastodon's ``min_id``) of every timeline source, and
the id slots' leases, over every adapter.

A ``min_id`` page is the ``limit`` oldest items newer than an id: each source
(userlines, the bucketed public line, stored home rows, large accounts'
heads, the userlines below a home timeline's horizon) reads oldest first
from that id, and paging forward from the last id of each page must yield
exactly what paging backward yields, reversed — no skip, no repeat.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest

from fanline_shared import events
from fanline_shared.domain import Tweet, new_timeuuid, utcnow
from fanline_tweet_store.adapters import TweetStoreStorage
from fanline_tweet_store.hybrid import HybridHome
from fanline_tweet_store.sids import SLOTS, SidGenerator, newer_than, to_sid

from .support import Clock, Names, tweet_store_service
from .test_home_timeline import newest_first
from .test_hybrid_home import FRESH, Graph, fan_out, post, reader


@pytest.fixture
def graph() -> Graph:
    return Graph()


async def forward(read, limit: int) -> list[uuid.UUID]:  # type: ignore[no-untyped-def]
    """Every id, paging oldest first from the start: ``read(limit, after)``."""
    seen: list[uuid.UUID] = []
    after = None
    while True:
        ids = await read(limit, after)
        seen.extend(ids)
        if len(ids) < limit:
            return seen
        after = ids[-1]


async def test_a_userline_reads_oldest_first_from_any_id(tweet_store: TweetStoreStorage, names: Names) -> None:
    author = names.user()
    ids = await post(tweet_store, author, 9)
    tweets = tweet_store.tweets
    assert await tweets.userline_after(author, 4, None) == ids[:4]
    assert await tweets.userline_after(author, 4, ids[2]) == ids[3:7]
    assert await tweets.userline_after(author, 50, ids[-1]) == []
    assert await forward(lambda n, a: tweets.userline_after(author, n, a), 2) == ids
    assert await forward(lambda n, a: tweets.userline_after(author, n, a), 3) == ids


async def test_the_public_line_reads_oldest_first_across_minutes_and_days(
    tweet_store: TweetStoreStorage, names: Names, clock: Clock
) -> None:
    """Tweets a few minutes and a day apart: buckets are skipped and crossed
    upward exactly as they are downward."""
    base = clock.past()
    offsets = [0, 1, 61, 62, 180, 24 * 3600 + 5, 24 * 3600 + 6, 3 * 24 * 3600]
    ids = []
    for n, seconds in enumerate(offsets):
        tid = new_timeuuid(base + timedelta(seconds=seconds))
        tweet = Tweet(id=tid, username=names.user(), body=f"p{n}")
        await tweet_store.tweets.create(tweet, events.tweet_created(tid, tweet.username, tweet.created_at), fresh=True)
        ids.append(tid)
    start = new_timeuuid(base - timedelta(seconds=1))
    tweets = tweet_store.tweets
    # Exactly as many as this window holds, so later windows of the module never show.
    assert await tweets.public_after(len(ids), start) == ids
    for limit in (1, 3):
        seen: list[uuid.UUID] = []
        after = start
        while len(seen) < len(ids):
            page = await tweets.public_after(min(limit, len(ids) - len(seen)), after)
            assert page, seen
            seen.extend(page)
            after = page[-1]
        assert seen == ids
    assert await tweets.public_after(2, ids[3]) == ids[4:6]


async def test_stored_home_rows_read_oldest_first_with_their_horizon(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner, author = names.user(), names.user()
    ids = await post(tweet_store, author, 6)
    await fan_out(tweet_store, author, ids, [owner])
    window = await tweet_store.home.window_after(owner, 4, None)
    assert window.ids == ids[:4] and window.horizon is None
    assert (await tweet_store.home.window_after(owner, 4, ids[3])).ids == ids[4:]
    await tweet_store.home.raise_horizon(owner, ids[2])
    assert (await tweet_store.home.window_after(owner, 2, ids[0])).horizon == ids[2]
    # No row above: the horizon still comes back.
    assert await tweet_store.home.window_after(owner, 2, ids[-1]) == type(window)([], ids[2])


async def test_forward_paging_of_a_home_timeline_is_backward_paging_reversed(
    tweet_store: TweetStoreStorage, graph: Graph, names: Names
) -> None:
    """Stored rows above a horizon, a large account merged at read time and
    the userlines below the horizon, all at once."""
    owner, friend, big, quiet = (names.user() for _ in range(4))
    graph.follow(owner, friend, big, quiet)
    friend_ids = await post(tweet_store, friend, 12, start_min_ago=50, step_s=7)
    quiet_ids = await post(tweet_store, quiet, 3, start_min_ago=49, step_s=11)
    own_ids = await post(tweet_store, owner, 2, start_min_ago=48, step_s=13)
    big_ids = await post(tweet_store, big, 9, start_min_ago=47, step_s=5)
    await fan_out(tweet_store, friend, friend_ids, [owner])
    await fan_out(tweet_store, quiet, quiet_ids, [owner])
    await fan_out(tweet_store, owner, own_ids, [owner])
    await tweet_store.large.register(big, 3600)
    # Trim to 6 stored rows: older ones come from the userlines.
    await tweet_store.home.trim(owner, 6)
    home = reader(tweet_store, graph)
    expected = newest_first(friend_ids + quiet_ids + own_ids + big_ids)
    for limit in (1, 4, 7, 40):
        assert await forward(lambda n, a: home.ids_after(owner, n, a), limit) == expected[::-1], limit
    # From the middle: the oldest ``limit`` newer than an id.
    middle = expected[10]
    assert await home.ids_after(owner, 3, middle) == expected[7:10][::-1]


async def test_forward_reads_never_go_past_the_retention_horizon(
    tweet_store: TweetStoreStorage, graph: Graph, names: Names
) -> None:
    owner, friend = names.user(), names.user()
    graph.follow(owner, friend)
    old = await post(tweet_store, friend, 5, start_min_ago=200)  # older than the 1 h retention below
    recent = await post(tweet_store, friend, 3, start_min_ago=20)
    await fan_out(tweet_store, friend, recent, [owner])
    await tweet_store.home.raise_horizon(owner, recent[0])
    home = HybridHome(tweet_store.home, tweet_store.tweets, tweet_store.large, graph.following, retention_s=3600, policy=FRESH)
    assert await home.ids_after(owner, 2, None) == recent[:2]
    assert old[0] not in await home.ids_after(owner, 20, old[0])


async def test_a_min_id_page_is_the_oldest_items_newer_than_it_newest_first(
    tweet_store: TweetStoreStorage, graph: Graph, names: Names
) -> None:
    owner, friend = names.user(), names.user()
    graph.follow(owner, friend)
    ids = await post(tweet_store, friend, 8)
    await fan_out(tweet_store, friend, ids, [owner])
    store = tweet_store_service(tweet_store, retention_s=3600, following=graph.following)
    for kind, who in (("home", owner), ("user", friend)):
        items, nxt = await store.page(kind, who, 3, None, None, ids[1])
        assert [t.id for t in items] == [ids[4], ids[3], ids[2]] and nxt is None
        # With max_id too: only what lies between, still the oldest first.
        items, _ = await store.page(kind, who, 5, ids[4], None, ids[1])
        assert [t.id for t in items] == [ids[3], ids[2]]
        items, _ = await store.page(kind, who, 5, None, None, ids[-1])
        assert items == []


# --- id slots ---------------------------------------------------------------------


async def test_each_slot_goes_to_one_holder_until_released_or_expired(tweet_store: TweetStoreStorage, names: Names) -> None:
    slots = tweet_store.slots
    holders = [f"{names.user()}-{n}" for n in range(SLOTS)]
    taken = await asyncio.gather(*(slots.acquire_slot(h, 30) for h in holders))
    # In a shared keyspace other tests may hold slots too: whatever was taken, each once.
    got = [s for s in taken if s is not None]
    assert len(got) == len(set(got)) and all(0 <= s < SLOTS for s in got)
    assert await slots.acquire_slot(names.user(), 30) is None or len(got) < SLOTS
    first_holder = holders[taken.index(got[0])]
    assert await slots.renew_slot(got[0], first_holder, 30)
    assert not await slots.renew_slot(got[0], "someone else", 30)
    await slots.release_slot(got[0], "someone else")  # not theirs: nothing changes
    assert await slots.renew_slot(got[0], first_holder, 30)
    for slot, holder in zip(taken, holders, strict=True):
        if slot is not None:
            await slots.release_slot(slot, holder)
    again = await slots.acquire_slot("newcomer", 30)
    assert again is not None
    await slots.release_slot(again, "newcomer")


async def test_an_unrenewed_slot_lease_expires(tweet_store: TweetStoreStorage) -> None:
    slots = tweet_store.slots
    held = [s for s in [await slots.acquire_slot(f"brief-{n}", 2) for n in range(SLOTS)] if s is not None]
    assert held
    await asyncio.sleep(3.2)
    assert not await slots.renew_slot(held[0], "brief-0", 2) or held[0] != 0
    taken = await slots.acquire_slot("after-expiry", 30)
    assert taken is not None
    await slots.release_slot(taken, "after-expiry")


async def test_posts_get_minted_ids_that_rise_and_resolve(tweet_store: TweetStoreStorage, names: Names) -> None:
    gen = SidGenerator(tweet_store.slots, ttl_s=30)
    await gen.start()
    try:
        store = tweet_store_service(tweet_store, retention_s=3600, ids=gen)
        author = names.user()
        posted = [(await store.post(author, f"n{n}", None))[0] for n in range(5)]
        sids = [to_sid(t.id) for t in posted]
        assert sids == sorted(sids) and len(set(sids)) == 5
        assert (await store.get(posted[2].id)).body == "n2"
        items, _ = await store.page("user", author, 10, None, newer_than(sids[1]))
        assert [t.id for t in items] == [t.id for t in posted[:1:-1]]
        assert posted[0].created_at <= utcnow()
    finally:
        await gen.close()
