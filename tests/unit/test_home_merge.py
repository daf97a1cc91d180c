"""A follow's merge (tweet-store ``TweetStore.home_merge``): an author with
no tweet in retention adds no row and queues no trim of the follower's home
timeline (a trim reads the partition: a follow of a quiet author cost one)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from fanline_shared.domain import new_timeuuid, utcnow
from fanline_tweet_store.service import TweetStore


class Spy:
    def __init__(self, userline: list[uuid.UUID]) -> None:
        self.userline_ids, self.added, self.scheduled = userline, list[Any](), list[list[str]]()

    async def userline(self, author: str, limit: int, before: Any) -> list[uuid.UUID]:
        return self.userline_ids[:limit]

    async def add_many(self, owner: str, entries: list[Any]) -> None:
        self.added.append((owner, entries))

    def schedule(self, owners: list[str]) -> None:
        self.scheduled.append(list(owners))


def store(spy: Spy, retention_s: int = 3600) -> TweetStore:
    storage = SimpleNamespace(tweets=spy, home=spy)
    return TweetStore(
        storage,  # type: ignore[arg-type]
        retention_s=retention_s,
        idempotency_ttl_s=60,
        merge_count=50,
        hybrid=None,  # type: ignore[arg-type]
        cap=spy,  # type: ignore[arg-type]
        regenerator=None,  # type: ignore[arg-type]
    )


async def test_recent_tweets_are_added_and_a_trim_queued() -> None:
    spy = Spy([new_timeuuid(), new_timeuuid()])
    assert await store(spy).home_merge("reader", "author") == 2
    assert len(spy.added) == 1 and len(spy.added[0][1]) == 2
    assert spy.scheduled == [["reader"]]


async def test_an_author_with_nothing_in_retention_adds_nothing_and_queues_no_trim() -> None:
    for ids in ([], [new_timeuuid(utcnow() - timedelta(hours=2))]):
        spy = Spy(ids)
        assert await store(spy, retention_s=3600).home_merge("reader", "author") == 0
        assert spy.added == [] and spy.scheduled == []
