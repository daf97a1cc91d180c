"""Events written by the previous release are read by this one's worker.

During a rolling upgrade old and new gateways and storage services publish
side by side, and events written before it wait in the topics and outboxes:
a worker of version N must read events of schema versions N-1 and N
(``events.READABLE_VERSIONS``). The fixtures are real messages of Fanline
0.1.0 (commit 5e0d410), made by its own code (tests/unit/data/events-0.1.0,
with the command); each goes through this worker's whole path, decoding
included, against in-memory peers.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from fanline_fanout.handlers import FanoutHandlers
from fanline_fanout.processor import Processor
from fanline_shared import events, logs

from .test_fanout_handlers import FakeSocial, FakeTopic, FakeTweets

FIXTURES = Path(__file__).parent / "data" / "events-0.1.0" / "events.jsonl"
TWEET = "6c4f2a1e-cb5a-11f1-8000-0242ac120002"


class Social(FakeSocial):
    """Names as social-graph treats them (case-insensitive), with profiles."""

    async def edges(
        self, username: str, direction: str, limit: int, after: str | None, *, counts: bool = False
    ) -> dict[str, Any]:
        lower = after.lower() if after else None
        return await super().edges(username.lower(), direction, limit, lower, counts=counts)

    async def is_following(self, follower: str, followee: str) -> bool:
        return await super().is_following(follower.lower(), followee.lower())

    async def reconcile_follow(self, follower: str, followee: str) -> bool:
        return await super().reconcile_follow(follower.lower(), followee.lower())

    async def get_user(self, username: str) -> dict[str, Any]:
        return {"username": username, "followers_count": len(self.followers.get(username.lower(), []))}


def messages() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURES.read_text().splitlines()]


def test_the_fixtures_hold_one_event_of_each_type_of_0_1_0() -> None:
    found = {json.loads(m["value"])["type"]: json.loads(m["value"])["version"] for m in messages()}
    assert found == dict.fromkeys(("TweetCreated", "TweetDeleted", "Followed", "Unfollowed", "FanoutChunk"), 1)


def test_this_release_reads_the_previous_schema_version_and_its_own() -> None:
    assert events.SCHEMA_VERSION in events.READABLE_VERSIONS
    assert events.SCHEMA_VERSION == 1 or events.SCHEMA_VERSION - 1 in events.READABLE_VERSIONS
    for message in messages():
        decoded = events.decode(message["value"].encode())
        assert decoded.version in events.READABLE_VERSIONS
    newer = json.loads(messages()[0]["value"]) | {"version": max(events.READABLE_VERSIONS) + 1}
    with pytest.raises(events.InvalidEvent):  # to the dead-letter topic, replayable after the upgrade
        events.decode(json.dumps(newer).encode())


async def test_the_worker_applies_every_event_the_previous_release_wrote() -> None:
    social = Social({"ada": ["bob", "carol", "dave"]})
    tweets = FakeTweets()
    tweets.tweets.add(TWEET)
    tweets.authors[TWEET] = "Ada"
    dlq = FakeTopic()
    handlers = FanoutHandlers(social, tweets, page_size=2, pages_in_flight=2)  # type: ignore[arg-type]
    processor = Processor(handlers, dlq, max_attempts=2)
    by_type = {json.loads(m["value"])["type"]: m for m in messages()}

    async def feed(kind: str) -> None:
        message = by_type[kind]
        headers = [(k, base64.b64decode(v)) for k, v in message["headers"]]
        assert logs.request_id_from_kafka(headers) == "req-0.1.0-fixture"
        origin = {"topic": message["topic"], "partition": "0", "offset": "1"}
        settled = await processor.process(message["key"].encode(), message["value"].encode(), origin)
        assert settled is not None and settled.type == kind

    def delivered() -> set[str]:
        return {owner.lower() for owner, ids in tweets.rows.items() if TWEET in ids}

    await feed("TweetCreated")
    assert delivered() == {"ada", "bob", "carol", "dave"}
    for ids in tweets.rows.values():
        ids.discard(TWEET)
    await feed("FanoutChunk")  # a slice of a large fan-out: the followers after "carol"
    assert delivered() == {"dave"}
    social.following.add(("bob", "ada"))
    await feed("Followed")
    assert [(a.lower(), b.lower()) for a, b in tweets.merged] == [("bob", "ada")]
    social.following.clear()
    await feed("Unfollowed")
    assert [(a.lower(), b.lower()) for a, b in tweets.purged] == [("bob", "ada")]
    tweets.tweets.discard(TWEET)
    await feed("TweetDeleted")
    assert not any(TWEET in ids for ids in tweets.rows.values())
    assert dlq.sent == [], "nothing of 0.1.0 may be dead-lettered"
