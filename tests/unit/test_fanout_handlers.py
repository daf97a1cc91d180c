"""The fan-out worker's event handling with in-memory peers (fast, no Kafka).

The same behaviour is proven against real Kafka + Cassandra in
tests/e2e/test_faults.py; these pin down paging, state checks and the
retry/dead-letter decisions.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fanline_fanout.handlers import FanoutHandlers
from fanline_fanout.processor import Processor
from fanline_shared import events
from fanline_shared.domain import new_timeuuid, utcnow
from fanline_shared.errors import Conflict, InvalidInput, NotFound, Unavailable


class FakeSocial:
    def __init__(self, followers: dict[str, list[str]]) -> None:
        self.followers = followers
        self.following: set[tuple[str, str]] = set()
        self.pages_served = 0

    async def edges(
        self, username: str, direction: str, limit: int, after: str | None, *, counts: bool = False
    ) -> dict[str, Any]:
        names = sorted(self.followers.get(username, []))
        start = names.index(after) + 1 if after else 0
        page = names[start : start + limit]
        self.pages_served += 1
        nxt = page[-1] if start + limit < len(names) else None
        return {"items": [{"username": n, "since": "x"} for n in page], "next": nxt, **self._counts(username, counts)}

    def _counts(self, username: str, asked: bool) -> dict[str, int]:
        """social-graph's counts beside a page, when asked."""
        return {"followers_count": len(self.followers.get(username, [])), "following_count": 0} if asked else {}

    async def is_following(self, follower: str, followee: str) -> bool:
        return (follower, followee) in self.following

    async def reconcile_follow(self, follower: str, followee: str) -> bool:
        self.reconciled = getattr(self, "reconciled", 0) + 1
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
        self.checks = 0  # home_add calls that asked for the tweet check

    async def check_tweet(self, tweet_id: str) -> dict[str, Any]:
        if tweet_id not in self.tweets:
            raise NotFound("gone", code="tweet_not_found")
        return {"id": tweet_id, "username": self.authors.get(tweet_id, "star")}

    async def home_add(self, tweet_id: str, author: str, owners: list[str], *, bulk: bool = False, check: bool = False) -> None:
        self.checks += check
        if check:  # as tweet-store does: nothing is written for a gone or foreign tweet
            stored = await self.check_tweet(tweet_id)
            if stored["username"].lower() != author.lower():  # canonical names, as tweet-store compares them
                raise Conflict(
                    f"event author {author!r} differs from the stored author {stored['username']!r}", code="author_mismatch"
                )
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

        async def counting(tweet_id: str, author: str, owners: list[str], add=add, calls=calls, **kw) -> None:  # type: ignore[no-untyped-def]
            calls.append(owners)
            await add(tweet_id, author, owners, **kw)

        tweets.home_add = counting  # type: ignore[method-assign]
        checked = tweets.check_tweet
        separate: list[str] = []

        async def spy(tweet_id: str, checked=checked, separate=separate) -> dict[str, Any]:  # type: ignore[no-untyped-def]
            separate.append(tweet_id)
            return await checked(tweet_id)

        tweets.check_tweet = spy  # type: ignore[method-assign]
        tweet_id = new_timeuuid()
        tweets.tweets.add(str(tweet_id))
        await handlers.apply(created(tweet_id))  # type: ignore[arg-type]
        assert len(calls) == 1 and calls[0][0] == "star" and len(calls[0]) == followers + 1
        # The tweet was checked by that write itself, not by a call of its own.
        assert tweets.checks == 1 and len(separate) == 1  # the fake's check inside home_add


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
    import fanline_fanout.processor as worker_app
    from fanline_shared.policies import RetryPolicy

    monkeypatch.setattr(worker_app, "FANOUT_TRANSIENT", RetryPolicy("fast", attempts=None, base_delay_s=0.001, max_delay_s=0.002))
    handlers, _, _ = make(0)
    dlq = FlakyTopic(failures=3)
    await Processor(handlers, dlq, max_attempts=1).process(b"k", b"garbage", {})
    assert len(dlq.sent) == 1 and dlq.failures == 0


# --- large accounts (merged at read time) -------------------------------------------


class CountingSocial(FakeSocial):
    user_lookups = 0

    async def get_user(self, username: str) -> dict[str, Any]:
        self.user_lookups += 1
        if username not in self.followers:
            raise NotFound("no such user", code="user_not_found")
        return {"username": username, "followers_count": len(self.followers[username])}


class LegacyCountingSocial(CountingSocial):
    """A social-graph that predates the counts beside a page: asked apart."""

    def _counts(self, username: str, asked: bool) -> dict[str, int]:
        return {}


class RegisteringTweets(FakeTweets):
    def __init__(self) -> None:
        super().__init__()
        self.registered: list[str] = []

    async def register_large_account(self, author: str) -> None:
        self.registered.append(author)


def make_hybrid(
    followers: int, threshold: int, social_kind: type[CountingSocial] = CountingSocial
) -> tuple[FanoutHandlers, CountingSocial, RegisteringTweets]:
    social = social_kind({"star": [f"f{i:05d}" for i in range(followers)]})
    tweets = RegisteringTweets()
    handlers = FanoutHandlers(
        social,
        tweets,
        page_size=100,
        pages_in_flight=2,  # type: ignore[arg-type]
        large_account_followers=threshold,
    )
    return handlers, social, tweets


@pytest.mark.parametrize("social_kind", [CountingSocial, LegacyCountingSocial], ids=["count-with-page", "count-apart"])
@pytest.mark.parametrize(("followers", "large"), [(9, False), (10, True), (500, True)])
async def test_authors_at_the_threshold_are_registered_not_fanned_out(
    followers: int, large: bool, social_kind: type[CountingSocial]
) -> None:
    handlers, social, tweets = make_hybrid(followers, threshold=10, social_kind=social_kind)
    tid = new_timeuuid()
    tweets.tweets.add(str(tid))
    await handlers.apply(events.decode(events.tweet_created(tid, "star", utcnow()).payload))
    # The count comes with the first page; only an older social-graph is asked apart.
    assert social.user_lookups == (1 if social_kind is LegacyCountingSocial else 0)
    owners_with_row = {o for o, ids in tweets.rows.items() if str(tid) in ids}
    if large:
        assert tweets.registered == ["star"]
        assert owners_with_row == {"star"}  # only the author's own row
    else:
        assert tweets.registered == []
        assert len(owners_with_row) == followers + 1


async def test_a_large_account_is_registered_once_per_refresh_interval() -> None:
    handlers, _social, tweets = make_hybrid(20, threshold=10)
    for _ in range(3):
        tid = new_timeuuid()
        tweets.tweets.add(str(tid))
        await handlers.apply(events.decode(events.tweet_created(tid, "star", utcnow()).payload))
    assert tweets.registered == ["star"]


async def test_a_deleted_large_account_tweet_removes_only_the_authors_row() -> None:
    handlers, social, tweets = make_hybrid(20, threshold=10)
    tid = new_timeuuid()
    tweets.rows["star"] = {str(tid)}
    served = social.pages_served
    await handlers.apply(events.decode(events.tweet_deleted(tid, "star").payload))
    assert tweets.rows["star"] == set()
    assert social.pages_served == served  # no follower was paged: no tombstones for rows never written


# --- large fan-outs in independently scheduled slices ---------------------------------


class ActiveSocial(FakeSocial):
    """Pages ``followers-active`` like social-graph: by name, strictly after ``after``."""

    async def get_user(self, username: str) -> dict[str, Any]:
        return {"username": username, "followers_count": len(self.followers.get(username, []))}

    async def edges(
        self, username: str, direction: str, limit: int, after: str | None, *, counts: bool = False
    ) -> dict[str, Any]:
        names = sorted(self.followers.get(username, []))
        rest = [n for n in names if after is None or n > after]
        page = rest[:limit]
        self.pages_served += 1
        nxt = page[-1] if len(rest) > limit else None
        return {"items": [{"username": n, "since": "x"} for n in page], "next": nxt, **self._counts(username, counts)}


def make_chunked(followers: int, chunk: int) -> tuple[FanoutHandlers, ActiveSocial, FakeTweets, list[Any]]:
    social = ActiveSocial({"star": [f"f{i:05d}" for i in range(followers)]})
    tweets = FakeTweets()
    handed_on: list[Any] = []

    async def publish(event: Any) -> None:
        handed_on.append(events.decode(event.payload))

    handlers = FanoutHandlers(
        social,
        tweets,
        page_size=100,
        pages_in_flight=2,  # type: ignore[arg-type]
        chunk_size=chunk,
        publish_chunk=publish,
    )
    return handlers, social, tweets, handed_on


async def run_all(handlers: FanoutHandlers, first: Any, handed_on: list[Any]) -> int:
    """Apply ``first`` and every slice it hands on (as the chunk agent would); returns slices."""
    await handlers.apply(first)
    slices = 0
    while handed_on:
        await handlers.apply(handed_on.pop(0))
        slices += 1
    return slices


async def test_a_large_fan_out_is_written_in_slices_and_reaches_everyone_once() -> None:
    handlers, _social, tweets, handed_on = make_chunked(1_050, chunk=300)
    tid = new_timeuuid()
    tweets.tweets.add(str(tid))
    first = events.decode(events.tweet_created(tid, "star", utcnow()).payload)
    await handlers.apply(first)
    # Only the author's row was written on the event's partition; every
    # follower waits on the chunks topic, in bulk slices.
    assert [o for o, ids in tweets.rows.items() if str(tid) in ids] == ["star"]
    assert len(handed_on) == 1 and isinstance(handed_on[0], events.FanoutChunk)
    bulk_pages: list[bool] = []
    original_add = tweets.home_add

    async def recording_add(tweet_id: str, author: str, owners: list[str], *, bulk: bool = False) -> None:
        bulk_pages.append(bulk)
        await original_add(tweet_id, author, owners)

    tweets.home_add = recording_add  # type: ignore[method-assign]
    slices = 0
    while handed_on:
        chunk = handed_on.pop(0)
        await handlers.apply(chunk)
        slices += 1
    assert slices == 4  # 300 + 300 + 300 + 150
    assert bulk_pages and all(bulk_pages)
    delivered = sorted(o for o, ids in tweets.rows.items() if str(tid) in ids)
    assert delivered == sorted(["star", *(f"f{i:05d}" for i in range(1_050))])


async def test_a_slice_removes_the_row_of_a_follower_who_left_while_it_was_written() -> None:
    handlers, social, tweets, handed_on = make_chunked(500, chunk=200)
    tid = new_timeuuid()
    tweets.tweets.add(str(tid))
    await handlers.apply(events.decode(events.tweet_created(tid, "star", utcnow()).payload))
    leaver = "f00250"  # in the second slice (slices: f00000-f00199, f00200-f00399, ...)
    original_add = tweets.home_add

    async def add_then_unfollow(tweet_id: str, author: str, owners: list[str], *, bulk: bool = False) -> None:
        await original_add(tweet_id, author, owners)
        if leaver in owners and leaver in social.followers["star"]:
            social.followers["star"].remove(leaver)  # the unfollow lands mid-slice; its purge ran already

    tweets.home_add = add_then_unfollow  # type: ignore[method-assign]
    while handed_on:
        await handlers.apply(handed_on.pop(0))
    assert str(tid) not in tweets.rows.get(leaver, set())
    assert str(tid) in tweets.rows["f00249"] and str(tid) in tweets.rows["f00499"]


async def test_a_slice_of_a_deleted_tweet_writes_nothing() -> None:
    handlers, _social, tweets, handed_on = make_chunked(500, chunk=200)
    tid = new_timeuuid()
    tweets.tweets.add(str(tid))
    await handlers.apply(events.decode(events.tweet_created(tid, "star", utcnow()).payload))
    tweets.tweets.discard(str(tid))
    rows_before = sum(len(v) for v in tweets.rows.values())
    await run_all(handlers, handed_on.pop(0), handed_on)
    assert sum(len(v) for v in tweets.rows.values()) == rows_before


async def test_a_peers_deterministic_5xx_is_dead_lettered_not_retried_forever(monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer answering 500 (a bug, an event it can never handle) used to come
    back from ``PeerClient`` as ``Unavailable`` and be retried forever, the
    partition stalled behind it (issue 14). ``from_status`` is exactly what
    ``PeerClient.call`` raises for a peer's error response."""
    import fanline_fanout.processor as worker_app
    from fanline_shared.errors import from_status
    from fanline_shared.policies import RetryPolicy

    fast = RetryPolicy("fast", attempts=None, base_delay_s=0.001, max_delay_s=0.002)
    monkeypatch.setattr(worker_app, "FANOUT_TRANSIENT", fast)
    handlers, _, _ = make(0)
    calls = 0

    async def broken(event: Any) -> None:
        nonlocal calls
        calls += 1
        raise from_status(500, "error", "tweet-store: internal error")

    monkeypatch.setattr(handlers, "apply", broken)
    dlq = FakeTopic()
    processor = Processor(handlers, dlq, max_attempts=3)
    monkeypatch.setattr(processor, "_unexpected", RetryPolicy("fast", attempts=3, base_delay_s=0.001, max_delay_s=0.002))
    payload = events.tweet_deleted(new_timeuuid(), "star").payload
    await asyncio.wait_for(processor.process(b"star", payload, {}), 5)
    assert calls == 3
    assert [m["headers"]["error.reason"] for m in dlq.sent] == [b"peer_failed"]


async def test_a_peers_503_is_still_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    import fanline_fanout.processor as worker_app
    from fanline_shared.errors import from_status
    from fanline_shared.policies import RetryPolicy

    monkeypatch.setattr(worker_app, "FANOUT_TRANSIENT", RetryPolicy("fast", attempts=None, base_delay_s=0.001, max_delay_s=0.002))
    handlers, _, _ = make(0)
    calls = 0

    async def overloaded_then_fine(event: Any) -> None:
        nonlocal calls
        calls += 1
        if calls <= 10:  # more than the unexpected-error budget
            raise from_status(503, "unavailable", "tweet-store: cassandra timeout")

    monkeypatch.setattr(handlers, "apply", overloaded_then_fine)
    dlq = FakeTopic()
    payload = events.tweet_deleted(new_timeuuid(), "star").payload
    await asyncio.wait_for(Processor(handlers, dlq, max_attempts=2).process(b"star", payload, {}), 5)
    assert calls == 11 and dlq.sent == []


async def test_a_page_tweet_store_refused_is_sent_again_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """tweet-store refuses a page when more is queued than its budget allows
    (503 Overloaded): that page waits and goes again, the event's other pages
    are not written twice and its followers are not read again."""
    from fanline_shared import policies
    from fanline_shared.errors import Overloaded

    monkeypatch.setattr(policies.RetryPolicy, "delay", lambda self, attempt: 0.0)
    handlers, social, tweets = make(2_500, page_size=1000, in_flight=3)
    add = tweets.home_add
    calls: list[int] = []
    refusals = [2]

    async def refusing(tweet_id: str, author: str, owners: list[str], *, bulk: bool = False, check: bool = False) -> None:
        calls.append(len(owners))
        if len(owners) == 500 and refusals[0]:  # the last page, refused twice
            refusals[0] -= 1
            raise Overloaded("too much queued", shed_by="tweet-store")
        await add(tweet_id, author, owners, bulk=bulk, check=check)

    tweets.home_add = refusing  # type: ignore[method-assign]
    tweet_id = new_timeuuid()
    tweets.tweets.add(str(tweet_id))
    await handlers.apply(created(tweet_id))  # type: ignore[arg-type]
    assert sorted(calls) == [500, 500, 500, 1000, 1001]  # three tries of the refused page, one of each other
    assert social.pages_served == 3
    assert sum(str(tweet_id) in ids for ids in tweets.rows.values()) == 2_501


async def test_a_deleted_tweet_with_many_pages_writes_no_row_at_all() -> None:
    """The first page's write carries the tweet check and completes before any
    other page starts: a tweet deleted before its fan-out gets no row, not
    even on the pages that would otherwise be in flight beside the first."""
    handlers, social, tweets = make(5_000, page_size=1000, in_flight=4)
    tweet_id = new_timeuuid()  # never stored (or deleted since)
    await handlers.apply(created(tweet_id))  # type: ignore[arg-type]
    assert not any(tweets.rows.values())
    assert tweets.checks == 1 and social.pages_served <= 2  # the first page, perhaps the next being read
