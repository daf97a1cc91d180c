"""Contract of ``TweetRepository`` (tweet-store), run against every adapter."""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import datetime, timedelta

import pytest

from fanline_shared import events
from fanline_shared.domain import Tweet, new_timeuuid, timeuuid_time, utcnow
from fanline_tweet_store.adapters import TweetStoreStorage

from .support import Clock, Names, TweetStoreFactory


def tweet(author: str, when: datetime | None = None, body: str | None = None) -> Tweet:
    tid = new_timeuuid(when)
    return Tweet(id=tid, username=author, body=body or f"hello {tid.hex[:6]} ✓")


async def create(store: TweetStoreStorage, t: Tweet) -> bool:
    return await store.tweets.create(t, events.tweet_created(t.id, t.username, t.created_at))


async def delete(store: TweetStoreStorage, t: Tweet) -> bool:
    return await store.tweets.delete(t, events.tweet_deleted(t.id, t.username))


async def page_all(fetch, page_size: int, stop_after: int, before: uuid.UUID | None = None) -> list[uuid.UUID]:  # type: ignore[no-untyped-def]
    """Follow ``before`` cursors until ``stop_after`` ids or the end."""
    seen: list[uuid.UUID] = []
    while len(seen) < stop_after:
        page = await fetch(page_size, before)
        assert len(page) <= page_size
        seen.extend(page)
        if len(page) < page_size:
            break
        before = page[-1]
    return seen


def newest_first(tweets: list[Tweet]) -> list[uuid.UUID]:
    return [t.id for t in sorted(tweets, key=lambda t: t.created_at, reverse=True)]


async def test_create_is_idempotent(tweet_store: TweetStoreStorage, names: Names) -> None:
    author = names.user("Tw")
    t = tweet(author)
    assert await create(tweet_store, t) is True
    assert await create(tweet_store, t) is False
    assert await tweet_store.tweets.get(t.id) == t
    assert await tweet_store.tweets.counts([author]) == {author.lower(): 1}
    assert await tweet_store.tweets.userline(author, 10, None) == [t.id]


async def test_fresh_create_stores_everything_and_counts_once(tweet_store: TweetStoreStorage, names: Names) -> None:
    """The unkeyed path (no existence check) writes what the checked path
    writes: the tweet, userline, public line, count and outbox event."""
    author = names.user("Tf")
    t = tweet(author)
    event = events.tweet_created(t.id, t.username, t.created_at)
    assert await tweet_store.tweets.create(t, event, fresh=True) is True
    assert await tweet_store.tweets.get(t.id) == t
    assert await tweet_store.tweets.userline(author, 10, None) == [t.id]
    assert t.id in await tweet_store.tweets.public(50, None)
    assert await tweet_store.tweets.counts([author]) == {author.lower(): 1}
    pending = await tweet_store.outbox.pending(utcnow() + timedelta(seconds=5), 10_000)
    assert event.id in {e.id for e in pending}
    # a later checked create of the same tweet sees it and counts nothing
    assert await create(tweet_store, t) is False
    assert await tweet_store.tweets.counts([author]) == {author.lower(): 1}


async def test_get_unknown_is_none(tweet_store: TweetStoreStorage) -> None:
    assert await tweet_store.tweets.get(new_timeuuid()) is None


async def test_get_many_returns_known_ids_only(tweet_store: TweetStoreStorage, names: Names) -> None:
    author = names.user()
    known = [tweet(author) for _ in range(5)]
    for t in known:
        await create(tweet_store, t)
    unknown = new_timeuuid()
    found = await tweet_store.tweets.get_many([known[3].id, unknown, known[0].id, known[3].id, *[k.id for k in known]])
    assert found == {t.id: t for t in known}
    assert await tweet_store.tweets.get_many([]) == {}
    assert await tweet_store.tweets.get_many([unknown]) == {}


async def test_delete_removes_tweet_everywhere(tweet_store: TweetStoreStorage, names: Names, clock: Clock) -> None:
    author = names.user()
    base = clock.past()
    keep, gone = tweet(author, base), tweet(author, base + timedelta(seconds=1))
    for t in (keep, gone):
        await create(tweet_store, t)
    assert await delete(tweet_store, gone) is True
    assert await tweet_store.tweets.get(gone.id) is None
    assert await tweet_store.tweets.get_many([gone.id, keep.id]) == {keep.id: keep}
    assert await tweet_store.tweets.userline(author, 10, None) == [keep.id]
    bound = new_timeuuid(base + timedelta(seconds=2))
    assert (await tweet_store.tweets.public(1, bound)) == [keep.id]
    assert await tweet_store.tweets.counts([author]) == {author.lower(): 1}
    assert await delete(tweet_store, gone) is False  # idempotent
    assert await tweet_store.tweets.counts([author]) == {author.lower(): 1}
    assert await delete(tweet_store, tweet(author)) is False  # never existed


async def test_counts(tweet_store: TweetStoreStorage, names: Names) -> None:
    a, b, nobody = names.user("Ca"), names.user("Cb"), names.user()
    for author, n in ((a, 3), (b, 1)):
        for _ in range(n):
            await create(tweet_store, tweet(author))
    assert await tweet_store.tweets.counts([a.upper(), b, nobody]) == {a.lower(): 3, b.lower(): 1, nobody.lower(): 0}
    assert await tweet_store.tweets.counts([]) == {}


@pytest.mark.parametrize("page_size", [1, 10, 45, 100], ids=lambda n: f"page-{n}")
async def test_userline_pages_newest_first(tweet_store: TweetStoreStorage, names: Names, page_size: int) -> None:
    author, other = names.user(), names.user()
    start = utcnow() - timedelta(hours=2)
    mine = [tweet(author, start + timedelta(seconds=17 * i)) for i in range(45)]
    random.shuffle(mine)
    for t in mine:
        await create(tweet_store, t)
    await create(tweet_store, tweet(other, start + timedelta(seconds=5)))
    seen = await page_all(
        lambda limit, before: tweet_store.tweets.userline(author.upper(), limit, before), page_size, stop_after=1000
    )
    assert seen == newest_first(mine)
    assert await tweet_store.tweets.userline(names.user(), 10, None) == []


# Offsets from a window's start: same minute, neighbouring minutes, hours,
# several days (with empty days between) and more than a month.
PUBLIC_OFFSETS = [
    timedelta(0),
    timedelta(milliseconds=1),
    timedelta(seconds=30),
    timedelta(seconds=59, milliseconds=999),
    timedelta(minutes=1),
    timedelta(minutes=2, seconds=3),
    timedelta(minutes=59),
    timedelta(hours=5),
    timedelta(hours=23, minutes=59, seconds=59),
    timedelta(days=1),
    timedelta(days=1, minutes=1),
    timedelta(days=3),
    timedelta(days=3, hours=12),
    timedelta(days=9),
    timedelta(days=40),
    timedelta(days=40, seconds=1),
    timedelta(days=100),
]


@pytest.mark.parametrize("page_size", [1, 3, 7, 100], ids=lambda n: f"page-{n}")
async def test_public_timeline_pages_across_time_buckets(
    tweet_store: TweetStoreStorage, names: Names, clock: Clock, page_size: int
) -> None:
    base = clock.past()
    authors = [names.user() for _ in range(3)]
    mine = [tweet(random.choice(authors), base + offset) for offset in PUBLIC_OFFSETS]
    random.shuffle(mine)
    for t in mine:
        await create(tweet_store, t)
    # Start just above the window: nothing else in this module lies between.
    start = new_timeuuid(base + Clock.SPAN - timedelta(days=1))
    seen = await page_all(tweet_store.tweets.public, page_size, stop_after=len(mine), before=start)
    expected = newest_first(mine)
    assert seen[: len(expected)] == expected
    assert len(set(seen)) == len(seen)


async def test_public_timeline_without_cursor_starts_at_the_newest_tweet(
    tweet_store: TweetStoreStorage, names: Names, clock: Clock
) -> None:
    # Newer than anything else in the module, and in the future: a timeline
    # read without a cursor must still start there.
    base = clock.future()
    author = names.user()
    mine = [tweet(author, base + offset) for offset in PUBLIC_OFFSETS[:10]]
    for t in mine:
        await create(tweet_store, t)
    newest = newest_first(mine)
    assert await tweet_store.tweets.public(4, None) == newest[:4]
    seen = await page_all(tweet_store.tweets.public, 3, stop_after=len(mine))
    assert seen[: len(mine)] == newest


async def test_public_timeline_includes_tweets_of_now(tweet_store: TweetStoreStorage, names: Names) -> None:
    t = tweet(names.user())
    await create(tweet_store, t)
    assert await tweet_store.tweets.public(1, new_timeuuid(utcnow() + timedelta(seconds=1))) == [t.id]
    assert t.id not in await tweet_store.tweets.public(5, t.id)


async def test_public_before_is_exclusive_within_one_minute(tweet_store: TweetStoreStorage, names: Names, clock: Clock) -> None:
    base = clock.past()
    author = names.user()
    mine = [tweet(author, base + timedelta(milliseconds=10 * i)) for i in range(20)]
    for t in mine:
        await create(tweet_store, t)
    ordered = newest_first(mine)
    for i in (0, 5, 19):
        page = await tweet_store.tweets.public(3, ordered[i])
        assert page[: min(3, 19 - i)] == ordered[i + 1 : i + 4]
        assert ordered[i] not in page


async def test_idempotency_key_concurrent_reservations_agree(tweet_store: TweetStoreStorage, names: Names) -> None:
    author = names.user("Idem")
    candidates = [tweet(author, body=f"candidate {i}") for i in range(6)]
    bound = await asyncio.gather(*(tweet_store.tweets.reserve_idempotency_key(author, "key-1", c, 3600) for c in candidates))
    assert len({b.id for b in bound}) == 1
    winner = bound[0]
    assert winner in candidates
    assert all(b == winner for b in bound)
    # later requests (any case of the name) get the same tweet
    late = tweet(author, body="late")
    assert await tweet_store.tweets.reserve_idempotency_key(author.upper(), "key-1", late, 3600) == Tweet(
        id=winner.id, username=late.username, body=winner.body
    )


async def test_idempotency_keys_are_per_user_and_per_key(tweet_store: TweetStoreStorage, names: Names) -> None:
    a, b = names.user(), names.user()
    ta, tb, tc = tweet(a), tweet(b), tweet(a)
    assert await tweet_store.tweets.reserve_idempotency_key(a, "k", ta, 3600) == ta
    assert await tweet_store.tweets.reserve_idempotency_key(b, "k", tb, 3600) == tb
    assert await tweet_store.tweets.reserve_idempotency_key(a, "other", tc, 3600) == tc


async def test_idempotency_key_expires(tweet_store: TweetStoreStorage, names: Names) -> None:
    author = names.user()
    first, second = tweet(author), tweet(author)
    assert await tweet_store.tweets.reserve_idempotency_key(author, "short", first, 1) == first
    assert await tweet_store.tweets.reserve_idempotency_key(author, "short", second, 1) == first
    await asyncio.sleep(2.1)
    assert await tweet_store.tweets.reserve_idempotency_key(author, "short", second, 1) == second


async def test_create_and_delete_append_events(tweet_store: TweetStoreStorage, names: Names) -> None:
    t = tweet(names.user())
    created = events.tweet_created(t.id, t.username, t.created_at)
    deleted = events.tweet_deleted(t.id, t.username)
    await tweet_store.tweets.create(t, created)
    await tweet_store.tweets.delete(t, deleted)
    pending = await tweet_store.outbox.pending(utcnow() + timedelta(seconds=1), 10_000)
    assert [e for e in pending if e.id in {created.id, deleted.id}] == [created, deleted]
    await tweet_store.outbox.ack([created.id, deleted.id])


async def test_tweet_ids_keep_their_time(make_tweet_store: TweetStoreFactory, names: Names) -> None:
    store = await make_tweet_store()
    when = utcnow() - timedelta(days=2)
    t = tweet(names.user(), when)
    await create(store, t)
    got = await store.tweets.get(t.id)
    assert got is not None and abs(timeuuid_time(got.id) - when) < timedelta(milliseconds=1)
