"""Contract of the home-timeline cap (``trim``/``window``) and of the large-account
registry (tweet-store), run against every adapter."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from fanline_tweet_store.adapters import TweetStoreStorage

from .support import Names
from .test_home_timeline import newest_first, recent_ids


async def _fill(store: TweetStoreStorage, owner: str, ids: list[uuid.UUID], author: str) -> None:
    await store.home.add_many(owner, [(i, author) for i in ids])


async def test_window_of_an_untrimmed_timeline_has_no_horizon(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner, author = names.user(), names.user()
    ids = recent_ids(5)
    await _fill(tweet_store, owner, ids, author)
    window = await tweet_store.home.window(owner, 3, None)
    assert window.ids == newest_first(ids)[:3]
    assert window.horizon is None
    assert (await tweet_store.home.window(names.user(), 3, None)) == ([], None)


async def test_trim_keeps_the_newest_rows_and_sets_the_horizon(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner, author = names.user(), names.user()
    ids = newest_first(recent_ids(25))
    await _fill(tweet_store, owner, ids, author)
    assert await tweet_store.home.trim(owner, 30) is None  # under the cap: nothing to do
    assert await tweet_store.home.trim(owner.upper(), 10) == ids[9]
    assert await tweet_store.home.slice(owner, 100, None) == ids[:10]
    window = await tweet_store.home.window(owner, 100, None)
    assert window == (ids[:10], ids[9])
    # Paging: the horizon comes back on every page, also past the last row.
    assert (await tweet_store.home.window(owner, 4, ids[5])) == (ids[6:10], ids[9])
    assert (await tweet_store.home.window(owner, 4, ids[9])) == ([], ids[9])
    assert await tweet_store.home.trim(owner, 10) is None  # already at the cap


async def test_trim_counted_says_what_its_scan_counted(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner, author = names.user(), names.user()
    assert await tweet_store.home.trim_counted(owner, 10) == (None, 0, None)  # no such timeline
    ids = newest_first(recent_ids(25))
    await _fill(tweet_store, owner, ids, author)
    assert await tweet_store.home.trim_counted(owner, 30) == (None, 25, ids[0])
    assert await tweet_store.home.trim_counted(owner.upper(), 10) == (ids[9], 11, ids[0])  # counts keep + 1 at most
    assert await tweet_store.home.trim_counted(owner, 10) == (None, 10, ids[0])


async def test_count_newer_counts_only_rows_newer_than_the_id_given(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner, author = names.user(), names.user()
    ids = newest_first(recent_ids(25))
    await _fill(tweet_store, owner, ids, author)
    assert await tweet_store.home.count_newer(owner, ids[10], 100) == (10, ids[0])
    assert await tweet_store.home.count_newer(owner.upper(), ids[10], 4) == (4, ids[0])  # at most the limit
    assert await tweet_store.home.count_newer(owner, ids[0], 100) == (0, None)
    assert await tweet_store.home.count_newer(owner, ids[10], 0) == (0, None)
    await tweet_store.home.trim(owner, 20)  # the horizon (a static column in Cassandra) is no row
    assert await tweet_store.home.count_newer(owner, ids[24], 100) == (20, ids[0])
    assert await tweet_store.home.count_newer(names.user(), ids[24], 100) == (0, None)


async def test_horizon_only_rises(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner, author = names.user(), names.user()
    ids = newest_first(recent_ids(30))
    await _fill(tweet_store, owner, ids, author)
    assert await tweet_store.home.trim(owner, 10) == ids[9]
    # A row below the horizon written back later (a late or replayed event)
    # and a trim to a deeper cap must not lower the horizon.
    await _fill(tweet_store, owner, ids[10:25], author)
    await tweet_store.home.trim(owner, 20)
    assert (await tweet_store.home.window(owner, 1, None)).horizon == ids[9]


async def test_concurrent_trims_leave_the_highest_horizon(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner, author = names.user(), names.user()
    ids = newest_first(recent_ids(40))
    await _fill(tweet_store, owner, ids, author)
    results = await asyncio.gather(*(tweet_store.home.trim(owner, keep) for keep in (30, 20, 10, 25)))
    assert ids[9] in results
    window = await tweet_store.home.window(owner, 100, None)
    assert window.horizon == ids[9]
    assert window.ids == ids[:10]


async def test_large_account_registry(tweet_store: TweetStoreStorage, names: Names) -> None:
    big, other = names.user(), names.user()
    before = await tweet_store.large.members()
    await tweet_store.large.register(big.upper(), 3600)
    await tweet_store.large.register(big, 3600)  # renewed, still one member
    members = await tweet_store.large.members()
    assert big.lower() in members
    assert other.lower() not in members
    assert members - before == {big.lower()}


async def test_large_account_registration_expires(tweet_store: TweetStoreStorage, names: Names) -> None:
    brief = names.user()
    await tweet_store.large.register(brief, 1)
    assert brief.lower() in await tweet_store.large.members()
    await asyncio.sleep(2.2)
    assert brief.lower() not in await tweet_store.large.members()


@pytest.mark.parametrize("backend", [pytest.param("cassandra", marks=pytest.mark.real_infra)], indirect=True)
async def test_trims_leave_at_most_one_range_tombstone_in_a_page(
    backend: object, tweet_store: TweetStoreStorage, names: Names
) -> None:
    """Cassandra only (SQLite deletes rows): after many trims, a page reads
    at most the two bounds of one range tombstone, not a tombstone per row —
    measured with query tracing, as an operator would."""
    import re
    from datetime import timedelta

    from fanline_shared.domain import new_timeuuid, utcnow

    owner, author = names.user(), names.user()
    start = utcnow() - timedelta(minutes=50)  # within the fixture's one-hour retention
    ids: list[uuid.UUID] = []
    trims = 0
    for n in range(0, 2000, 100):
        batch = [new_timeuuid(start + timedelta(seconds=n + k)) for k in range(100)]
        ids.extend(batch)
        await tweet_store.home.add_many(owner, [(t, author) for t in batch])
        trims += await tweet_store.home.trim(owner, 100) is not None
    assert trims >= 18
    session = tweet_store.engine.session  # type: ignore[attr-defined]
    statement = await asyncio.to_thread(
        session.prepare,
        f"SELECT tweet_id FROM {tweet_store.engine.name}.home_timeline "  # type: ignore[attr-defined]
        "WHERE owner_lc = ? AND tweet_id < ? LIMIT 21",
    )  # blocking: off the loop that serves the session's connections
    newest = newest_first(ids)

    def tombstones(before: uuid.UUID) -> int:
        result = session.execute(statement, (owner.lower(), before), trace=True)
        trace = result.get_query_trace(max_wait_sec=10)
        return sum(int(m.group(1)) for e in trace.events if (m := re.search(r"and (\d+) tombstone cells", e.description)))

    assert await asyncio.to_thread(tombstones, newest[0]) == 0  # a first page: none
    assert await asyncio.to_thread(tombstones, newest[90]) <= 2  # the last stored page: one range's bounds
