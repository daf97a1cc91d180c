"""Contract of ``ActivityRepository`` (social-graph) and of the regeneration
bookkeeping of ``HomeTimelineRepository`` (tweet-store), on every adapter."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from fanline_shared.domain import utcnow
from fanline_social_graph.adapters import SocialGraphStorage
from fanline_tweet_store.adapters import TweetStoreStorage

from .support import Names
from .test_home_timeline import newest_first, recent_ids


async def test_activity_is_recorded_and_read_back(social_graph: SocialGraphStorage, names: Names) -> None:
    user = names.user("Ac")
    assert await social_graph.activity.get(user) == (None, None)
    seen = utcnow().replace(microsecond=123000)
    await social_graph.activity.record(user, seen, None)
    assert await social_graph.activity.get(user.upper()) == (seen, None)
    back = seen + timedelta(seconds=5)
    await social_graph.activity.record(user, back, back)
    assert await social_graph.activity.get(user) == (back, back)


async def test_active_followers_are_paged_by_name_and_expire(social_graph: SocialGraphStorage, names: Names) -> None:
    star = names.user("St")
    fans = sorted(names.user("Fa") for _ in range(5))
    for fan in fans[:4]:
        await social_graph.activity.activate(fan, [star, star.upper()], 3600)
    await social_graph.activity.activate(fans[4], [star], 1)
    page = await social_graph.activity.active_followers(star, 3, None)
    assert [e.username for e in page] == fans[:3]
    rest = await social_graph.activity.active_followers(star, 10, fans[2].upper())
    assert [e.username for e in rest] == fans[3:]
    await social_graph.activity.deactivate(fans[0], star.upper())
    await asyncio.sleep(2.2)  # fans[4]'s row expires: inactive users drop out by themselves
    assert [e.username for e in await social_graph.activity.active_followers(star, 10, None)] == fans[1:4]
    await social_graph.activity.activate(fans[4], [star], 3600)  # back
    assert fans[4] in [e.username for e in await social_graph.activity.active_followers(star, 10, None)]


async def test_regeneration_claims_are_exclusive_until_released_or_expired(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner = names.user()
    claims = await asyncio.gather(*(tweet_store.home.claim_regeneration(owner, 60) for _ in range(5)))
    assert sorted(claims) == [False, False, False, False, True]
    assert await tweet_store.home.claim_regeneration(owner.upper(), 60) is False
    await tweet_store.home.release_regeneration(owner)
    assert await tweet_store.home.claim_regeneration(owner, 1) is True
    await asyncio.sleep(2.2)
    assert await tweet_store.home.claim_regeneration(owner, 60) is True


async def test_regenerated_at_only_rises(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner = names.user()
    assert await tweet_store.home.regenerated_at(owner) is None
    later = utcnow().replace(microsecond=0)
    await tweet_store.home.mark_regenerated(owner, later)
    await tweet_store.home.mark_regenerated(owner, later - timedelta(minutes=5))
    assert await tweet_store.home.regenerated_at(owner.upper()) == later


async def test_raise_horizon_only_rises_and_keeps_rows(tweet_store: TweetStoreStorage, names: Names) -> None:
    owner, author = names.user(), names.user()
    ids = newest_first(recent_ids(6))
    await tweet_store.home.add_many(owner, [(i, author) for i in ids])
    await tweet_store.home.raise_horizon(owner, ids[3])
    await tweet_store.home.raise_horizon(owner, ids[5])
    assert await tweet_store.home.window(owner, 10, None) == (ids, ids[3])
    await tweet_store.home.raise_horizon(owner, ids[1])
    assert (await tweet_store.home.window(owner, 10, None)).horizon == ids[1]
