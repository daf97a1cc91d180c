"""The gateway's live-stream hub (stream_hub.py) and timeline cursors with a
``since`` bound (cursors.py), with fake peers: routing by follow list,
limits, resume order and back-pressure. The real thing, on both backends and
across two gateway processes, is tests/e2e/test_streaming.py."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import pytest

from fanline_api.config import LiveSettings
from fanline_api.cursors import CursorCodec, decode_timeline, encode_timeline, validate_since_id
from fanline_api.stream_hub import CLOSE, HEARTBEAT, HEARTBEAT_SLOTS, QUEUE_MAX, Hub, Item, Stream
from fanline_shared import events
from fanline_shared.domain import new_timeuuid, to_rfc3339, utcnow
from fanline_shared.errors import BadRequest, InvalidInput, NotFound, RateLimited

SETTINGS = LiveSettings(enabled=True, heartbeat_s=1.0, max_streams_per_user=4, follow_refresh_s=300.0)


class FakeSocial:
    def __init__(self, following: dict[str, list[str]]) -> None:
        self.following = following

    async def following_all(self, username: str) -> list[str]:
        return list(self.following.get(username, []))


class FakeTweets:
    def __init__(self) -> None:
        self.tweets: dict[str, dict[str, Any]] = {}
        self.pages: list[dict[str, Any]] = []
        self.calls: list[tuple[Any, ...]] = []

    def add(self, author: str) -> tuple[dict[str, Any], events.Event]:
        tid = new_timeuuid()
        tweet = {"id": str(tid), "username": author, "body": "hi", "created_at": to_rfc3339(utcnow())}
        self.tweets[str(tid)] = tweet
        return tweet, events.decode(events.tweet_created(tid, author, utcnow()).payload)

    async def get_tweet(self, tweet_id: str) -> dict[str, Any]:
        if tweet_id not in self.tweets:
            raise NotFound("no such tweet")
        return self.tweets[tweet_id]

    async def timeline(
        self, kind: str, owner: str | None, limit: int, before: str | None, since: str | None = None, sids: Any = None
    ) -> dict[str, Any]:
        self.calls.append((kind, owner, limit, before, since))
        return self.pages.pop(0)


def make_hub(following: dict[str, list[str]]) -> tuple[Hub, FakeTweets]:
    tweets = FakeTweets()
    return Hub(SETTINGS, FakeSocial(following), tweets), tweets  # type: ignore[arg-type]


def drain(stream: Stream) -> list[Item]:
    items = []
    while (item := stream.take_nowait()) is not None:
        items.append(item)
    return items


def follow_event(kind: str, follower: str, followee: str) -> events.Event:
    make = events.followed if kind == "Followed" else events.unfollowed
    return events.decode(make(follower, followee).payload)


async def test_updates_reach_the_owner_followers_and_public_only() -> None:
    hub, tweets = make_hub({"fan": ["Author"], "other": ["someone"]})
    fan, other, author, public = (
        await hub.open_home("Fan"),
        await hub.open_home("other"),
        await hub.open_home("author"),
        hub.open_public(),
    )
    tweet, created = tweets.add("Author")
    await hub.dispatch([created])
    for stream in (fan, author, public):
        [item] = drain(stream)
        assert (item.event, item.id) == ("update", tweet["id"])
        assert item.created_at is not None
    assert drain(other) == []
    deleted = events.decode(events.tweet_deleted(uuid.UUID(tweet["id"]), "Author").payload)
    await hub.dispatch([deleted])
    assert [i.event for i in drain(fan)] == ["delete"]
    assert [i.event for i in drain(public)] == ["delete"]
    assert drain(other) == []


async def test_a_follow_earlier_in_the_same_batch_counts() -> None:
    hub, tweets = make_hub({})
    fan = await hub.open_home("fan")
    tweet, created = tweets.add("author")
    await hub.dispatch([follow_event("Followed", "fan", "author"), created])
    assert [i.id for i in drain(fan)] == [tweet["id"]]


async def test_unfollow_stops_updates_and_deletes_the_authors_recent_tweets() -> None:
    hub, tweets = make_hub({"fan": ["author"]})
    fan = await hub.open_home("fan")
    old, _ = tweets.add("author")
    tweets.pages.append({"items": [old], "next": None})
    await hub.dispatch([follow_event("Unfollowed", "fan", "author")])
    await asyncio.sleep(0.01)  # the deletes are sent by a task
    assert [(i.event, i.data) for i in drain(fan)] == [("delete", f'{{"id":"{old["id"]}"}}')]
    assert tweets.calls == [("user", "author", 100, None, None)]
    _, created = tweets.add("author")
    await hub.dispatch([created])
    assert drain(fan) == []


async def test_a_fifth_stream_of_one_user_is_refused_until_one_closes() -> None:
    hub, _ = make_hub({})
    streams = [await hub.open_home("meg") for _ in range(4)]
    with pytest.raises(RateLimited) as info:
        await hub.open_home("MEG")
    assert info.value.code == "too_many_streams"
    hub.close(streams[0])
    hub.close(streams[0])  # idempotent
    await hub.open_home("meg")
    assert hub.streams_of("meg") == 4 and hub.open_streams == 4


async def test_closing_a_stream_forgets_it_everywhere() -> None:
    hub, tweets = make_hub({"fan": ["author"]})
    fan = await hub.open_home("fan")
    hub.close(fan)
    _, created = tweets.add("author")
    await hub.dispatch([created])
    assert drain(fan) == [] and hub.open_streams == 0
    assert hub._audience == {}  # no index entry left behind


async def test_a_slow_client_is_disconnected_not_buffered_without_bound() -> None:
    hub, tweets = make_hub({})
    public = hub.open_public()
    for _ in range(QUEUE_MAX + 1):
        _, created = tweets.add("someone")
        await hub.dispatch([created])
    assert drain(public) == [CLOSE]
    assert public.closed


async def test_a_waiting_reader_wakes_on_offer_and_reads_in_order() -> None:
    stream = Stream("public", None)
    reader = asyncio.ensure_future(stream.next())
    await asyncio.sleep(0)
    assert not reader.done()
    first, second = Item("delete", "1"), Item("delete", "2")
    stream.offer(first)
    stream.offer(second)
    assert await asyncio.wait_for(reader, 1) is first
    assert await stream.next() is second


async def test_one_timer_heartbeats_every_stream_once_a_period_staggered() -> None:
    period = 0.3
    hub = Hub(
        LiveSettings(enabled=True, heartbeat_s=period, max_streams_per_user=4, follow_refresh_s=300.0),
        FakeSocial({}),
        FakeTweets(),
    )  # type: ignore[arg-type]
    streams = [hub.open_public() for _ in range(3)]
    assert len({s.slot for s in streams}) == 3  # spread over the slots
    beats: dict[int, list[float]] = {i: [] for i in range(3)}

    async def read(i: int) -> None:
        while True:
            item = await streams[i].next()
            if item is CLOSE:
                return
            assert item is HEARTBEAT
            beats[i].append(asyncio.get_running_loop().time())

    readers = [asyncio.create_task(read(i)) for i in range(3)]
    hub.start()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while min(len(b) for b in beats.values()) < 3 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
    finally:
        await hub.close_all()
        for r in readers:
            r.cancel()
    for times in beats.values():
        assert len(times) >= 3
        gaps = [b - a for a, b in itertools.pairwise(times)]
        # once a period, not once a tick (the mean: a late tick is followed by an early one, on a grid)
        assert period * 0.7 <= sum(gaps) / len(gaps) <= period * 1.5, gaps
    firsts = sorted(b[0] for b in beats.values())
    assert firsts[-1] - firsts[0] >= period / HEARTBEAT_SLOTS  # not all in the same instant


async def test_backlog_is_read_with_since_and_replayed_oldest_first() -> None:
    hub, tweets = make_hub({})
    fan = await hub.open_home("fan")
    a, b, c = ({"id": str(new_timeuuid())} for _ in range(3))
    tweets.pages += [{"items": [c, b], "next": b["id"]}, {"items": [a], "next": None}]
    since = str(new_timeuuid())
    assert await hub.backlog(fan, since) == [a, b, c]
    assert tweets.calls == [("home", "fan", 100, None, since), ("home", "fan", 100, b["id"], since)]


def test_timeline_cursors_carry_the_since_bound_and_stay_signed() -> None:
    codec = CursorCodec(b"secret")
    before, since = str(new_timeuuid()), str(new_timeuuid())
    cursor = encode_timeline(codec, "tl:home", before, since)
    assert decode_timeline(codec, "tl:home", cursor) == (before, since)
    assert decode_timeline(codec, "tl:home", encode_timeline(codec, "tl:home", before, None)) == (before, None)
    assert decode_timeline(codec, "tl:home", codec.encode("tl:home", before)) == (before, None)  # older cursors
    assert decode_timeline(codec, "tl:home", None) == (None, None)
    with pytest.raises(BadRequest):
        decode_timeline(codec, "tl:public", cursor)
    with pytest.raises(BadRequest):
        decode_timeline(CursorCodec(b"other"), "tl:home", cursor)


@pytest.mark.parametrize("bad", ["", "nope", str(uuid.uuid4()), "x" * 300, str(new_timeuuid()).upper() + " "])
def test_a_malformed_since_id_is_invalid_since_id(bad: str) -> None:
    with pytest.raises(InvalidInput) as info:
        validate_since_id(bad)
    assert info.value.code == "invalid_since_id"


def test_since_id_is_optional_and_canonical() -> None:
    tid = str(new_timeuuid())
    assert validate_since_id(None) is None
    assert validate_since_id(tid) == tid


async def test_a_resumed_stream_does_not_send_the_tweet_it_resumed_from_again() -> None:
    """The client sent the id, so it has the tweet; the tweet's live update
    can still arrive after the reconnect when it was posted just before (a
    fresh-clone CI run saw the public stream send it after the backfill)."""
    from fanline_api.stream_routes import relay

    hub, tweets = make_hub({})
    public = hub.open_public()
    first, created_first = tweets.add("author")
    second, created_second = tweets.add("author")
    await hub.dispatch([created_second, created_first])  # the older one's update arrives last
    public.offer(CLOSE)  # ends the relay once what is queued is read
    sent = [e async for e in relay(hub, public, [second], resumed_from=first["id"])]
    ids = [getattr(e, "id", None) for e in sent]
    assert ids.count(second["id"]) == 1 and first["id"] not in ids
