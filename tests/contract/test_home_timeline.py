"""Contract of ``HomeTimelineRepository`` (tweet-store), run against every adapter."""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import timedelta

import pytest

from fanline_shared.domain import new_timeuuid, timeuuid_time, utcnow
from fanline_tweet_store.adapters import TweetStoreStorage

from .support import DEFAULT_RETENTION_S, Names, TweetStoreFactory


def recent_ids(n: int, spacing: timedelta = timedelta(seconds=7)) -> list[uuid.UUID]:
    """``n`` ids within the retention, oldest first, distinct times."""
    start = utcnow() - timedelta(minutes=30)
    return [new_timeuuid(start + i * spacing) for i in range(n)]


def newest_first(ids: list[uuid.UUID]) -> list[uuid.UUID]:
    return sorted(ids, key=timeuuid_time, reverse=True)


async def test_add_reaches_every_owner_once(tweet_store: TweetStoreStorage, names: Names) -> None:
    owners = [names.user("Ow") for _ in range(5)]
    tid = new_timeuuid()
    author = names.user()
    await tweet_store.home.add([*owners, owners[0].upper(), owners[1].lower()], tid, author)
    await tweet_store.home.add(owners, tid, author)  # redelivered: still one row
    for owner in owners:
        assert await tweet_store.home.slice(owner.swapcase(), 10, None) == [tid]
    assert await tweet_store.home.slice(names.user(), 10, None) == []
    await tweet_store.home.add([], tid, author)  # no owners: nothing to do


async def test_large_fan_out(tweet_store: TweetStoreStorage, names: Names) -> None:
    owners = [names.user("F") for _ in range(600)]
    tid = new_timeuuid()
    await tweet_store.home.add(owners, tid, names.user())
    sample = random.sample(owners, 25)
    slices = await asyncio.gather(*(tweet_store.home.slice(o, 5, None) for o in sample))
    assert all(s == [tid] for s in slices)


async def test_add_many_orders_newest_first_without_duplicates(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner, author = names.user(), names.user()
    ids = recent_ids(12)
    entries = [(i, author) for i in ids]
    shuffled = entries + entries[:4]
    random.shuffle(shuffled)
    await tweet_store.home.add_many(owner, shuffled)
    await tweet_store.home.add_many(owner, entries[3:])  # again: no-op
    assert await tweet_store.home.slice(owner, 100, None) == newest_first(ids)
    await tweet_store.home.add_many(owner, [])


@pytest.mark.parametrize("page_size", [1, 7, 30, 50], ids=lambda n: f"page-{n}")
async def test_slice_pages_with_before(tweet_store: TweetStoreStorage, names: Names, page_size: int) -> None:
    owner = names.user()
    ids = recent_ids(30)
    for i in random.sample(ids, len(ids)):
        await tweet_store.home.add([owner], i, names.user())
    seen: list[uuid.UUID] = []
    before = None
    while True:
        page = await tweet_store.home.slice(owner, page_size, before)
        assert len(page) <= page_size
        seen.extend(page)
        if len(page) < page_size:
            break
        before = page[-1]
    assert seen == newest_first(ids)


async def test_remove_from_some_owners(tweet_store: TweetStoreStorage, names: Names) -> None:
    owners = [names.user() for _ in range(4)]
    keep, gone = recent_ids(2)
    author = names.user()
    for tid in (keep, gone):
        await tweet_store.home.add(owners, tid, author)
    await tweet_store.home.remove([owners[0], owners[1].upper()], gone)
    await tweet_store.home.remove([owners[0]], gone)  # again: fine
    await tweet_store.home.remove([owners[0]], new_timeuuid())  # unknown: fine
    await tweet_store.home.remove([], gone)
    assert await tweet_store.home.slice(owners[0], 10, None) == [keep]
    assert await tweet_store.home.slice(owners[1], 10, None) == [keep]
    assert await tweet_store.home.slice(owners[2], 10, None) == [gone, keep]


async def test_remove_many_from_one_owner(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner, other = names.user(), names.user()
    ids = recent_ids(150, spacing=timedelta(seconds=1))
    author = names.user()
    await tweet_store.home.add_many(owner, [(i, author) for i in ids])
    await tweet_store.home.add_many(other, [(i, author) for i in ids[:3]])
    doomed = [*ids[::2], new_timeuuid()]
    await tweet_store.home.remove_many(owner.upper(), doomed)
    await tweet_store.home.remove_many(owner, [])
    assert await tweet_store.home.slice(owner, 200, None) == newest_first(ids[1::2])
    assert await tweet_store.home.slice(other, 10, None) == newest_first(ids[:3])


async def test_rows_older_than_retention_are_not_written(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner, author = names.user(), names.user()
    too_old = new_timeuuid(utcnow() - timedelta(seconds=DEFAULT_RETENTION_S + 60))
    old_ok = new_timeuuid(utcnow() - timedelta(seconds=DEFAULT_RETENTION_S - 120))
    future = new_timeuuid(utcnow() + timedelta(days=2))
    await tweet_store.home.add([owner], too_old, author)
    assert await tweet_store.home.slice(owner, 10, None) == []
    await tweet_store.home.add_many(owner, [(too_old, author), (old_ok, author), (future, author)])
    assert await tweet_store.home.slice(owner, 10, None) == [future, old_ok]


async def test_rows_disappear_when_retention_passes(make_tweet_store: TweetStoreFactory, names: Names) -> None:
    store = await make_tweet_store(retention_s=4)
    owner, author = names.user(), names.user()
    # 1.5 s old: about 2.5 s left to live, whenever it is written (Cassandra
    # TTLs count whole seconds, so it may go up to a second early, never late).
    aging = new_timeuuid(utcnow() - timedelta(seconds=1.5))
    fresh = new_timeuuid(utcnow() + timedelta(seconds=30))
    await store.home.add([owner], aging, author)
    await store.home.add_many(owner, [(fresh, author)])
    assert await store.home.slice(owner, 10, None) == [fresh, aging]
    await asyncio.sleep(3.0)
    assert await store.home.slice(owner, 10, None) == [fresh]
