"""Contract of ``FollowRepository`` (social-graph), run against every adapter."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

import pytest

from fanline_shared import events
from fanline_shared.domain import Edge, utcnow
from fanline_social_graph.adapters import SocialGraphStorage

from .support import Names


def ms(value: datetime) -> datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


async def follow(sg: SocialGraphStorage, a: str, b: str, since: datetime | None = None) -> bool:
    return await sg.follows.follow(a, b, since or utcnow(), events.followed(a, b))


async def unfollow(sg: SocialGraphStorage, a: str, b: str) -> bool:
    return await sg.follows.unfollow(a, b, events.unfollowed(a, b))


async def test_follow_is_idempotent_and_counts_move_once(social_graph: SocialGraphStorage, names: Names) -> None:
    a, b = names.user("Fa"), names.user("Fb")
    assert await follow(social_graph, a, b) is True
    assert await follow(social_graph, a, b) is False
    assert await follow(social_graph, a.upper(), b.lower()) is False  # case-insensitive
    assert await social_graph.follows.is_following(a, b) is True
    assert await social_graph.follows.is_following(a.lower(), b.upper()) is True
    assert await social_graph.follows.is_following(b, a) is False
    counts = await social_graph.follows.counts([a, b])
    assert counts == {a.lower(): (0, 1), b.lower(): (1, 0)}


async def test_unfollow_is_idempotent_and_counts_return_to_zero(social_graph: SocialGraphStorage, names: Names) -> None:
    a, b = names.user("Ua"), names.user("Ub")
    await follow(social_graph, a, b)
    assert await unfollow(social_graph, a, b) is True
    assert await unfollow(social_graph, a, b) is False
    assert await social_graph.follows.is_following(a, b) is False
    assert await social_graph.follows.counts([a, b]) == {a.lower(): (0, 0), b.lower(): (0, 0)}
    assert await social_graph.follows.following(a, 10, None) == []
    assert await social_graph.follows.followers(b, 10, None) == []


async def test_unfollow_never_followed_is_false_and_counts_never_negative(social_graph: SocialGraphStorage, names: Names) -> None:
    a, b = names.user(), names.user()
    assert await unfollow(social_graph, a, b) is False
    assert await social_graph.follows.counts([a, b]) == {a.lower(): (0, 0), b.lower(): (0, 0)}


async def test_follow_again_after_unfollow(social_graph: SocialGraphStorage, names: Names) -> None:
    a, b = names.user(), names.user()
    await follow(social_graph, a, b)
    await unfollow(social_graph, a, b)
    assert await follow(social_graph, a, b) is True
    assert await social_graph.follows.counts([b]) == {b.lower(): (1, 0)}


async def test_concurrent_follows_of_one_edge_count_once(social_graph: SocialGraphStorage, names: Names) -> None:
    a, b = names.user(), names.user()
    results = await asyncio.gather(*(follow(social_graph, a, b) for _ in range(6)))
    assert sorted(results) == [False] * 5 + [True]
    assert await social_graph.follows.counts([a, b]) == {a.lower(): (0, 1), b.lower(): (1, 0)}


async def test_counts_of_unknown_names_are_zero(social_graph: SocialGraphStorage, names: Names) -> None:
    x = names.user("Xx")
    assert await social_graph.follows.counts([x, x.upper()]) == {x.lower(): (0, 0)}
    assert await social_graph.follows.counts([]) == {}


async def test_edges_carry_display_name_and_since(social_graph: SocialGraphStorage, names: Names) -> None:
    a, b = names.user("DisA"), names.user("DisB")
    since = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    await follow(social_graph, a, b, since)
    assert await social_graph.follows.following(a.lower(), 10, None) == [Edge(username=b, since=ms(since))]
    assert await social_graph.follows.followers(b.upper(), 10, None) == [Edge(username=a, since=ms(since))]
    # a repeated follow keeps the original edge
    await follow(social_graph, a, b, since + timedelta(days=1))
    assert await social_graph.follows.following(a, 10, None) == [Edge(username=b, since=ms(since))]
    assert await social_graph.follows.followers(b, 10, None) == [Edge(username=a, since=ms(since))]


@pytest.mark.parametrize("page_size", [1, 7, 25, 100], ids=lambda n: f"page-{n}")
@pytest.mark.parametrize("direction", ["following", "followers"])
async def test_paging_by_name_has_no_gaps_or_repeats(
    social_graph: SocialGraphStorage, names: Names, direction: str, page_size: int
) -> None:
    hub = names.user("Hub")
    others = [names.user(random.choice(["A", "b", "C", "d"])) for _ in range(25)]
    random.shuffle(others)
    for other in others:
        if direction == "following":
            await follow(social_graph, hub, other)
        else:
            await follow(social_graph, other, hub)
    fetch = getattr(social_graph.follows, direction)
    seen: list[str] = []
    after: str | None = None
    while True:
        page = await fetch(hub, page_size, after)
        assert len(page) <= page_size
        if not page:
            break
        seen.extend(e.username for e in page)
        after = page[-1].username.lower()
        if len(page) < page_size:
            break
    assert seen == sorted(others, key=str.lower)
    counts = await social_graph.follows.counts([hub])
    assert counts[hub.lower()] == ((0, 25) if direction == "following" else (25, 0))


async def test_follow_and_unfollow_append_their_events(social_graph: SocialGraphStorage, names: Names) -> None:
    a, b = names.user(), names.user()
    followed, unfollowed = events.followed(a, b), events.unfollowed(a, b)
    await social_graph.follows.follow(a, b, utcnow(), followed)
    await social_graph.follows.unfollow(a, b, unfollowed)
    pending = await social_graph.outbox.pending(utcnow() + timedelta(seconds=1), 10_000)
    mine = [e for e in pending if e.id in {followed.id, unfollowed.id}]
    assert mine == [followed, unfollowed]
    await social_graph.outbox.ack([followed.id, unfollowed.id])
