"""A keyed post repeated after its tweet was deleted creates nothing and
answers ``404 tweet_not_found`` (../shared/api.md, issue 14) — tweet-store's
service over every adapter, since the rule spans the idempotency key, the
tweet and its deletion.

Before the fix the repeat rewrote the bound tweet ("an earlier request may
have crashed after reserving"), so the deleted tweet came back."""

from __future__ import annotations

import pytest

from fanline_shared.errors import NotFound
from fanline_tweet_store.adapters import TweetStoreStorage
from fanline_tweet_store.service import TweetStore

from .support import Names, tweet_store_service


def service(storage: TweetStoreStorage) -> TweetStore:
    return tweet_store_service(storage, retention_s=7 * 86400)


async def test_repeat_after_delete_is_not_found_and_creates_nothing(tweet_store: TweetStoreStorage, names: Names) -> None:
    store = service(tweet_store)
    author = names.user("Id")
    first, created, _ = await store.post(author, "hello once", "key-del")
    assert created
    await store.delete(first.id, author)
    with pytest.raises(NotFound) as err:
        await store.post(author, "hello once", "key-del")
    assert err.value.code == "tweet_not_found"
    assert await tweet_store.tweets.get(first.id) is None
    assert await tweet_store.tweets.userline(author, 10, None) == []
    assert (await tweet_store.tweets.counts([author]))[author.lower()] == 0
    with pytest.raises(NotFound):  # and again: still nothing
        await store.post(author, "hello once", "key-del")


async def test_repeat_of_a_reservation_whose_request_crashed_still_completes(
    tweet_store: TweetStoreStorage, names: Names
) -> None:
    """The reason repeats rewrite: a request that reserved its key and died
    before storing the tweet is completed by the client's retry."""
    store = service(tweet_store)
    author = names.user("Cr")
    from fanline_shared.domain import Tweet, new_timeuuid

    orphan = Tweet(id=new_timeuuid(), username=author, body="reserved, then the process died")
    assert await tweet_store.tweets.reserve_idempotency_key(author, "key-crash", orphan, 3600) == orphan
    tweet, created, _ = await store.post(author, "ignored: the key is bound", "key-crash")
    assert tweet.id == orphan.id and not created
    assert await tweet_store.tweets.get(orphan.id) == orphan
