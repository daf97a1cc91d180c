"""The fan-out worker's event handling with in-memory peers (fast, no Kafka).

The same behaviour is proven against real Kafka + Cassandra in
tests/e2e/test_faults.py; these pin down paging, state checks and the
retry/dead-letter decisions.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fanline_fanout.app import Processor
from fanline_fanout.handlers import FanoutHandlers
from fanline_shared import events
from fanline_shared.domain import new_timeuuid, utcnow
from fanline_shared.errors import InvalidInput, NotFound, Unavailable


class FakeSocial:
    def __init__(self, followers: dict[str, list[str]]) -> None:
        self.followers = followers
        self.following: set[tuple[str, str]] = set()
        self.pages_served = 0

    async def edges(self, username: str, direction: str, limit: int, after: str | None) -> dict[str, Any]:
        names = sorted(self.followers.get(username, []))
        start = names.index(after) + 1 if after else 0
        page = names[start:start + limit]
        self.pages_served += 1
        nxt = page[-1] if start + limit < len(names) else None
        return {"items": [{"username": n, "since": "x"} for n in page], "next": nxt}

    async def is_following(self, follower: str, followee: str) -> bool:
        return (follower, followee) in self.following


class FakeTweets:
    def __init__(self) -> None:
        self.rows: dict[str, set[str]] = {}
        self.tweets: set[str] = set()
        self.authors: dict[str, str] = {}  # tweet id -> stored author (default "star")
        self.in_flight = 0
        self.max_in_flight = 0
        self.fail_next = 0
        self.merged: list[tuple[str, str]] = []
        self.purged: list[tuple[str, str]] = []

    async def check_tweet(self, tweet_id: str) -> dict[str, Any]:
        if tweet_id not in self.tweets:
            raise NotFound("gone", code="tweet_not_found")
        return {"id": tweet_id, "username": self.authors.get(tweet_id, "star")}

    async def home_add(self, tweet_id: str, author: str, owners: list[str]) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise Unavailable("tweet-store down")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0)
        for owner in owners:
            self.rows.setdefault(owner, set()).add(tweet_id)
        self.in_flight -= 1

    async def home_remove(self, tweet_id: str, owners: list[str]) -> None:
        for owner in owners:
            self.rows.get(owner, set()).discard(tweet_id)

    async def home_merge(self, owner: str, author: str) -> int:
        self.merged.append((owner, author))
        return 1

    async def home_purge(self, owner: str, author: str) -> int:
        self.purged.append((owner, author))
        return 1


def make(followers: int, page_size: int = 1000, in_flight: int = 4) -> tuple[FanoutHandlers, FakeSocial, FakeTweets]:
    social = FakeSocial({"star": [f"f{i:05d}" for i in range(followers)]})
    tweets = FakeTweets()
    handlers = FanoutHandlers(social, tweets, page_size=page_size, pages_in_flight=in_flight)  # type: ignore[arg-type]
    return handlers, social, tweets


def created(tweet_id: str, author: str = "star") -> events.TweetCreated:
    event = events.decode(events.tweet_created(new_timeuuid(), author, utcnow()).payload)
    assert isinstance(event, events.TweetCreated)
    return event.model_copy(update={"data": event.data.model_copy(update={"tweet_id": tweet_id})})


async def test_pages_through_all_followers_beyond_twissandras_5000() -> None:
    handlers, social, tweets = make(12_345, page_size=1000, in_flight=3)
    tweet_id = new_timeuuid()
    tweets.tweets.add(str(tweet_id))
    await handlers.apply(created(tweet_id))  # type: ignore[arg-type]
    delivered = [o for o, ids in tweets.rows.items() if str(tweet_id) in ids]
    assert len(delivered) == 12_345 + 1  # every follower and the author
    assert social.pages_served == 13
    assert 1 < tweets.max_in_flight <= 3


async def test_the_author_row_travels_with_the_first_page() -> None:
    """One tweet-store call for an author whose followers fit in one page,
    and the author's row is written even with no followers at all."""
    for followers in (0, 40):
        handlers, _, tweets = make(followers, page_size=1000)
        calls: list[list[str]] = []
        add = tweets.home_add

        async def counting(tweet_id: str, author: str, owners: list[str], add=add, calls=calls) -> None:  # type: ignore[no-untyped-def]
            calls.append(owners)
            await add(tweet_id, author, owners)

        tweets.home_add = counting  # type: ignore[method-assign]
        tweet_id = new_timeuuid()
        tweets.tweets.add(str(tweet_id))
        await handlers.apply(created(tweet_id))  # type: ignore[arg-type]
        assert len(calls) == 1 and calls[0][0] == "star" and len(calls[0]) == followers + 1


async def test_redelivery_is_idempotent() -> None:
    handlers, _, tweets = make(50, page_size=7)
    tweet_id = new_timeuuid()
    tweets.tweets.add(str(tweet_id))
    for _ in range(3):
        await handlers.apply(created(tweet_id))  # type: ignore[arg-type]
    assert all(ids == {str(tweet_id)} for ids in tweets.rows.values())


async def test_deleted_tweet_is_not_delivered() -> None:
    handlers, _, tweets = make(10)
    await handlers.apply(created(new_timeuuid()))  # type: ignore[arg-type]
    assert tweets.rows == {}


async def test_follow_and_unfollow_check_current_state() -> None:
    handlers, social, tweets = make(0)
    follow = events.decode(events.followed("bob", "star").payload)
    unfollow = events.decode(events.unfollowed("bob", "star").payload)
    await handlers.apply(follow)  # not following any more: no merge
    social.following.add(("bob", "star"))
    await handlers.apply(unfollow)  # following again: no purge
    assert tweets.merged == [] and tweets.purged == []
    await handlers.apply(follow)
    social.following.clear()
    await handlers.apply(unfollow)
    assert tweets.merged == [("bob", "star")] and tweets.purged == [("bob", "star")]


class FakeTopic:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, **kwargs: Any) -> asyncio.Future[None]:
        self.sent.append(kwargs)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


async def test_invalid_event_goes_to_dead_letter_with_the_error() -> None:
    handlers, _, _ = make(0)
    dlq = FakeTopic()
    await Processor(handlers, dlq, max_attempts=2).process(b"k", b"not json", {"topic": "t", "partition": "0", "offset": "5"})
    assert len(dlq.sent) == 1
    headers = dlq.sent[0]["headers"]
    assert headers["error.reason"] == b"invalid_event" and headers["origin.offset"] == b"5"
    assert dlq.sent[0]["value"] == b"not json"


async def test_transient_errors_are_retried_not_dead_lettered() -> None:
    handlers, _, tweets = make(30, page_size=10)
    tweet_id = new_timeuuid()
    tweets.tweets.add(str(tweet_id))
    tweets.fail_next = 3
    dlq = FakeTopic()
    payload = events.tweet_created(tweet_id, "star", utcnow()).payload
    await Processor(handlers, dlq, max_attempts=2).process(b"star", payload, {})
    assert dlq.sent == []
    assert len([o for o, ids in tweets.rows.items() if str(tweet_id) in ids]) == 31


async def test_permanent_errors_are_dead_lettered_and_the_partition_moves_on(monkeypatch: pytest.MonkeyPatch) -> None:
    handlers, _, _ = make(0)

    async def broken(event: Any) -> None:
        raise InvalidInput("bad owners", code="invalid_owners")

    monkeypatch.setattr(handlers, "apply", broken)
    dlq = FakeTopic()
    payload = events.tweet_deleted(new_timeuuid(), "star").payload
    await Processor(handlers, dlq, max_attempts=2).process(b"star", payload, {})
    assert [m["headers"]["error.reason"] for m in dlq.sent] == [b"invalid_owners"]


class FlakyTopic(FakeTopic):
    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def send(self, **kwargs: Any) -> asyncio.Future[None]:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker down")
        return await super().send(**kwargs)


async def test_a_dead_letter_that_cannot_be_written_is_retried_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    import fanline_fanout.app as worker_app
    from fanline_shared.policies import RetryPolicy

    monkeypatch.setattr(worker_app, "FANOUT_TRANSIENT", RetryPolicy("fast", attempts=None, base_delay_s=0.001, max_delay_s=0.002))
    handlers, _, _ = make(0)
    dlq = FlakyTopic(failures=3)
    await Processor(handlers, dlq, max_attempts=1).process(b"k", b"garbage", {})
    assert len(dlq.sent) == 1 and dlq.failures == 0
