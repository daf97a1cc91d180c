"""A keyed repeat racing the delete of its tweet (tweet-store service.py
``_repeat``): whichever way they interleave, the tweet ends deleted and the
repeat answers ``tweet_not_found``. A fake repository lets the test put the
delete exactly between the repeat's rewrite and its second look; the
contract tests (tests/contract/test_idempotency_after_delete.py) cover the
sequential case on SQLite and Cassandra."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from fanline_shared.domain import OutboxEvent, Tweet
from fanline_shared.errors import NotFound
from fanline_tweet_store.service import TweetStore


class Tweets:
    def __init__(self) -> None:
        self.rows: dict[uuid.UUID, Tweet] = {}
        self.deleted: set[uuid.UUID] = set()
        self.bound: Tweet | None = None
        self.before_write: Any = None

    async def reserve_idempotency_key(self, username: str, key: str, candidate: Tweet, ttl_s: int) -> Tweet:
        self.bound = self.bound or candidate
        return self.bound

    async def create(self, tweet: Tweet, event: OutboxEvent, *, fresh: bool = False) -> bool:
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            await hook()
        new = tweet.id not in self.rows
        self.rows[tweet.id] = tweet
        return new

    async def delete(self, tweet: Tweet, event: OutboxEvent, *, remember_s: int = 0) -> bool:
        if remember_s:
            self.deleted.add(tweet.id)
        return self.rows.pop(tweet.id, None) is not None

    async def was_deleted(self, tweet_id: uuid.UUID) -> bool:
        return tweet_id in self.deleted

    async def get(self, tweet_id: uuid.UUID) -> Tweet | None:
        return self.rows.get(tweet_id)


class Storage:
    def __init__(self) -> None:
        self.tweets = Tweets()


async def test_a_delete_landing_between_the_rewrite_and_the_second_look_wins() -> None:
    storage = Storage()
    store = TweetStore(
        storage,
        retention_s=3600,
        idempotency_ttl_s=3600,
        merge_count=10,  # type: ignore[arg-type]
        hybrid=None,
        cap=None,
        regenerator=None,
    )  # type: ignore[arg-type]  # posting uses neither
    first, _, _ = await store.post("alice", "hi", "k")
    # The delete (marker, then removal) lands after the repeat's first look,
    # just before its rewrite reaches the store, e.g. through another
    # tweet-store replica: the rewrite alone would restore the tweet.

    async def delete_now() -> None:
        storage.tweets.deleted.add(first.id)
        storage.tweets.rows.pop(first.id, None)

    storage.tweets.before_write = delete_now
    with pytest.raises(NotFound) as err:
        await store.post("alice", "hi", "k")
    assert err.value.code == "tweet_not_found"
    assert first.id not in storage.tweets.rows  # the rewrite was undone
    assert storage.tweets.before_write is None  # the race really happened


async def test_a_plain_repeat_returns_the_first_tweet() -> None:
    storage = Storage()
    store = TweetStore(
        storage,
        retention_s=3600,
        idempotency_ttl_s=3600,
        merge_count=10,  # type: ignore[arg-type]
        hybrid=None,
        cap=None,
        regenerator=None,
    )  # type: ignore[arg-type]  # posting uses neither
    first, created, _ = await store.post("alice", "hi", "k")
    again, created_again, _ = await store.post("alice", "hi", "k")
    assert created and not created_again and again == first
