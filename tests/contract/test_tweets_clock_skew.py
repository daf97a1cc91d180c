"""A tweet written without a lightweight transaction (the unkeyed, ``fresh``
path: a plain INSERT stamped with tweet-store's clock) must still be deleted
by ``delete``, whose LWT is stamped by Cassandra's Paxos ballot (the
coordinator's clock). Mixing the two on one row lets the later delete lose to
the earlier insert whenever tweet-store's clock runs ahead of Cassandra's
(issue 14): ``delete`` answered True, the count went down, the TweetDeleted
event went out, and the tweet stayed readable. Cassandra only (SQLite has no
write timestamps)."""

from __future__ import annotations

import time

import pytest

from fanline_shared import events
from fanline_shared.domain import Tweet, new_timeuuid
from fanline_tweet_store.adapters import TweetStoreStorage

from .conftest import Backend
from .support import Names


@pytest.mark.parametrize("ahead_s", [5, 600])
async def test_delete_wins_over_a_plain_insert_stamped_by_a_clock_ahead(
    backend: Backend, tweet_store: TweetStoreStorage, names: Names, ahead_s: int
) -> None:
    if backend.name != "cassandra":
        pytest.skip("write timestamps are Cassandra's")
    cluster = tweet_store.tweets._session.cluster  # type: ignore[attr-defined]
    author = names.user("Sk")
    tweet = Tweet(id=new_timeuuid(), username=author, body="written by a fast clock")
    real_clock = cluster.timestamp_generator
    # The tweet-store replica that wrote the tweet runs ahead of Cassandra.
    cluster.timestamp_generator = lambda: int((time.time() + ahead_s) * 1_000_000)
    try:
        assert await tweet_store.tweets.create(tweet, events.tweet_created(tweet.id, author, tweet.created_at), fresh=True)
    finally:
        cluster.timestamp_generator = real_clock
    assert await tweet_store.tweets.get(tweet.id) == tweet
    assert await tweet_store.tweets.delete(tweet, events.tweet_deleted(tweet.id, author)) is True
    assert await tweet_store.tweets.get(tweet.id) is None
    assert await tweet_store.tweets.get_many([tweet.id]) == {}
