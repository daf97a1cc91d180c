"""The gateway's fast-path publish does not hold the response (gateway.py).

A post is acknowledged once tweet-store stored the tweet and its outbox
event together; the broker's acknowledgement arrives later and only then is
the event handed to the relay as published. Collaborators are fakes: what
matters here is the order of effects, which a real broker cannot be paused
to show. tests/e2e/test_faults.py proves delivery with real Kafka down and a
gateway killed after a post.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from fanline_api.cursors import CursorCodec
from fanline_api.gateway import Gateway
from fanline_shared import events
from fanline_shared.domain import OutboxEvent, new_timeuuid, utcnow
from fanline_shared.outbox.wire import event_to_json


class HeldPublisher:
    def __init__(self, succeeds: bool = True) -> None:
        self.release = asyncio.Event()
        self.sent: list[uuid.UUID] = []
        self.succeeds = succeeds

    async def publish(self, event: OutboxEvent) -> bool:
        self.sent.append(event.id)
        await self.release.wait()
        return self.succeeds


class Relay:
    def __init__(self) -> None:
        self.acked: list[tuple[str, uuid.UUID]] = []

    def published(self, source: str, event_id: uuid.UUID) -> None:
        self.acked.append((source, event_id))


class TweetStore:
    async def create_tweet(self, actor: str, text: str, key: str | None) -> dict[str, Any]:
        tid = new_timeuuid()
        tweet = {"id": str(tid), "username": actor, "body": text}
        return {"tweet": tweet, "created": True, "event": event_to_json(events.tweet_created(tid, actor, utcnow()))}


def gateway(publisher: HeldPublisher, relay: Relay) -> Gateway:
    return Gateway(None, TweetStore(), publisher, relay, CursorCodec(b"s" * 32))  # type: ignore[arg-type]


async def test_a_post_returns_before_the_broker_acknowledges_and_is_acked_after() -> None:
    publisher, relay = HeldPublisher(), Relay()
    g = gateway(publisher, relay)
    # Both answer while the broker holds the first send.
    await asyncio.wait_for(g.post("alice", {"body": "one"}, None), 1)
    await asyncio.wait_for(g.post("alice", {"body": "two"}, None), 1)
    await asyncio.sleep(0)
    assert len(publisher.sent) == 2  # handed to the producer, in request order
    assert relay.acked == []  # not acknowledged before the broker has it
    publisher.release.set()
    await g.drain(1)
    assert [source for source, _ in relay.acked] == ["tweet-store", "tweet-store"]
    assert [i for _, i in relay.acked] == publisher.sent


async def test_a_failed_send_is_left_to_the_relay() -> None:
    publisher, relay = HeldPublisher(succeeds=False), Relay()
    g = gateway(publisher, relay)
    await g.post("alice", {"body": "one"}, None)
    publisher.release.set()
    await g.drain(1)
    assert len(publisher.sent) == 1 and relay.acked == []


async def test_drain_gives_up_after_its_timeout() -> None:
    publisher, relay = HeldPublisher(), Relay()
    g = gateway(publisher, relay)
    await g.post("alice", {"body": "one"}, None)
    await asyncio.wait_for(g.drain(0.05), 1)  # the broker does not answer: shutdown still proceeds
    assert relay.acked == []
    publisher.release.set()
    await g.drain(1)
