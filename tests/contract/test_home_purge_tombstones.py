"""An unfollow's purge deletes only the author's rows that are actually in
the owner's home timeline (issue 14). Before the fix it deleted every tweet of
the author back to the retention horizon — in Cassandra one tombstone per row
that never existed (e.g. an author with 500 tweets whose follower saw 1), which
every later home read must skip. And its reads stay bounded (issue 31): for an
author with more tweets than one userline page it reads the owner's capped home
timeline instead of every tweet of theirs. tweet-store's service over every
adapter, with the home repository spied on to see what is read and deleted."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any

from fanline_shared import events
from fanline_shared.domain import Tweet, new_timeuuid
from fanline_tweet_store import service
from fanline_tweet_store.adapters import TweetStoreStorage

from .support import Names, tweet_store_service


class Spy:
    def __init__(self, home: Any) -> None:
        self._home = home
        self.deleted: list[uuid.UUID] = []
        self.checked: list[uuid.UUID] = []  # ids asked about one by one (present)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._home, name)

    async def remove_many(self, owner: str, tweet_ids: Sequence[uuid.UUID]) -> None:
        self.deleted.extend(tweet_ids)
        await self._home.remove_many(owner, tweet_ids)

    async def present(self, owner: str, tweet_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        self.checked.extend(tweet_ids)
        return list(await self._home.present(owner, tweet_ids))


async def test_purge_deletes_only_rows_that_exist(tweet_store: TweetStoreStorage, names: Names) -> None:
    author, owner = names.user("Pa"), names.user("Po")
    tweets = [Tweet(id=new_timeuuid(), username=author, body=f"t{i}") for i in range(30)]
    for t in tweets:
        await tweet_store.tweets.create(t, events.tweet_created(t.id, author, t.created_at), fresh=True)
    seen = [tweets[3].id, tweets[17].id]  # the owner followed only briefly
    await tweet_store.home.add_many(owner, [(i, author) for i in seen])
    spy = Spy(tweet_store.home)
    storage = dataclasses.replace(tweet_store, home=spy)
    store = tweet_store_service(storage, retention_s=7 * 86400)
    assert await store.home_purge(owner, author) == 2
    assert sorted(spy.deleted) == sorted(seen), f"{len(spy.deleted)} deletes for 2 rows"
    assert await tweet_store.home.slice(owner, 10, None) == []


async def test_a_prolific_authors_purge_reads_the_capped_home_timeline_not_their_userline(
    tweet_store: TweetStoreStorage, names: Names, monkeypatch: Any
) -> None:
    monkeypatch.setattr(service, "PURGE_PAGE", 10)  # 30 tweets: three pages' worth
    author, other, owner = names.user("Pa"), names.user("Px"), names.user("Po")
    tweets = [Tweet(id=new_timeuuid(), username=author, body=f"t{i}") for i in range(30)]
    for t in tweets:
        await tweet_store.tweets.create(t, events.tweet_created(t.id, author, t.created_at), fresh=True)
    others = Tweet(id=new_timeuuid(), username=other, body="stays")
    await tweet_store.tweets.create(others, events.tweet_created(others.id, other, others.created_at), fresh=True)
    seen = [tweets[2].id, tweets[11].id, tweets[29].id]  # the oldest, one in the middle, the newest
    await tweet_store.home.add_many(owner, [(i, author) for i in seen] + [(others.id, other)])
    spy = Spy(tweet_store.home)
    store = tweet_store_service(dataclasses.replace(tweet_store, home=spy), retention_s=7 * 86400)
    assert await store.home_purge(owner, author) == 3
    assert sorted(spy.deleted) == sorted(seen) and spy.checked == []  # found in the home partition, none asked one by one
    assert await tweet_store.home.slice(owner, 10, None) == [others.id]
    assert await tweet_store.home.by_author(owner, author.upper()) == []  # names in any case
    assert await tweet_store.home.by_author(owner, other) == [others.id]
