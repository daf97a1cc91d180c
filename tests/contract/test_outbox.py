"""Contract of ``Outbox`` — of both owning services, against every adapter.

Events get into an outbox only with the state change that causes them (a
follow, a tweet), so each case appends through its service's repository.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from fanline_shared.cassandra import outbox_partition
from fanline_shared.domain import OutboxEvent, Tweet, new_timeuuid, timeuuid_time, utcnow
from fanline_shared.outbox.ports import Outbox
from fanline_social_graph.adapters import SocialGraphStorage
from fanline_tweet_store.adapters import TweetStoreStorage

from .support import Clock, Names


@dataclass
class Owner:
    outbox: Outbox
    append: Callable[[OutboxEvent], Awaitable[object]]


@pytest.fixture(params=["social_graph", "tweet_store", "tweet_store_fresh"])
async def owner(
    request: pytest.FixtureRequest, names: Names, social_graph: SocialGraphStorage, tweet_store: TweetStoreStorage
) -> Owner:
    if request.param == "social_graph":

        async def follow(event: OutboxEvent) -> object:
            return await social_graph.follows.follow(names.user(), names.user(), utcnow(), event)

        return Owner(social_graph.outbox, follow)

    fresh = request.param == "tweet_store_fresh"  # the one-batch path of unkeyed posts

    async def post(event: OutboxEvent) -> object:
        author = names.user()
        return await tweet_store.tweets.create(Tweet(new_timeuuid(), author, "body"), event, fresh=fresh)

    return Owner(tweet_store.outbox, post)


def event_at(when: datetime, n: int) -> OutboxEvent:
    return OutboxEvent(id=new_timeuuid(when), key=f"key-{n}", payload=b'{"n": %d, "raw": "\xff\x00"}' % n)


def window(clock: Clock, n: int) -> list[OutboxEvent]:
    """``n`` events older than every event written before in this module,
    spread over seconds, minutes and days (several outbox buckets)."""
    base = clock.past()
    offsets = [timedelta(seconds=0.001 * i + 97 * i * i) for i in range(n)]
    return [event_at(base + offset, i) for i, offset in enumerate(offsets)]


async def test_pending_returns_oldest_first_and_respects_limit(owner: Owner, clock: Clock) -> None:
    events = window(clock, 12)
    for event in random.sample(events, len(events)):
        await owner.append(event)
    # These are the oldest events in the store: the first page is exactly them.
    assert await owner.outbox.pending(utcnow(), 5) == events[:5]
    everything = await owner.outbox.pending(utcnow(), 10_000)
    assert everything[:12] == events
    await owner.outbox.ack([e.id for e in events])


async def test_pending_only_returns_events_older_than_the_bound(owner: Owner, clock: Clock) -> None:
    events = window(clock, 8)
    for event in events:
        await owner.append(event)
    # Between the 5th and the 6th event (they are minutes apart).
    older_than = timeuuid_time(events[5].id) - timedelta(seconds=1)
    pending = await owner.outbox.pending(older_than, 10_000)
    mine = [e for e in pending if e in events]
    assert mine == events[:5]
    assert events[5] not in pending
    await owner.outbox.ack([e.id for e in events])


async def test_ack_forgets_events(owner: Owner, clock: Clock) -> None:
    events = window(clock, 6)
    for event in events:
        await owner.append(event)
    await owner.outbox.ack([events[1].id, events[4].id, uuid.uuid1(), events[1].id])
    pending = await owner.outbox.pending(utcnow(), 10_000)
    assert [e for e in pending if e in events] == [events[0], events[2], events[3], events[5]]
    await owner.outbox.ack([e.id for e in events])
    await owner.outbox.ack([e.id for e in events])  # twice: fine
    await owner.outbox.ack([])
    pending = await owner.outbox.pending(utcnow(), 10_000)
    assert not [e for e in pending if e in events]


async def test_same_event_twice_is_stored_once(owner: Owner, clock: Clock) -> None:
    [event] = window(clock, 1)
    await owner.append(event)
    await owner.append(event)
    pending = await owner.outbox.pending(utcnow(), 10_000)
    assert [e for e in pending if e.id == event.id] == [event]
    await owner.outbox.ack([event.id])


async def test_fresh_events_are_pending_once_old_enough(owner: Owner) -> None:
    event = OutboxEvent(id=new_timeuuid(), key="k", payload=b"{}")
    await owner.append(event)
    assert event not in await owner.outbox.pending(utcnow() - timedelta(minutes=1), 10_000)
    assert event in await owner.outbox.pending(utcnow() + timedelta(seconds=1), 10_000)
    await owner.outbox.ack([event.id])
    assert event not in await owner.outbox.pending(utcnow() + timedelta(seconds=1), 10_000)


async def test_a_late_event_in_an_old_partition_read_empty_is_found_at_the_recheck(owner: Owner, backend: Any) -> None:
    """An event written minutes after its id's minute, into a partition a
    sweep already read empty, is pending again (issue 31). Cassandra's sweep
    leaves such a partition (past its hot minutes) unread for
    ``recheck_empty_s`` and then finds the event; SQLite finds it at once."""
    cassandra = backend.name == "cassandra"
    if cassandra:
        outbox: Any = owner.outbox
        outbox.recheck_empty_s = 1.0
    old = utcnow() - timedelta(minutes=5)  # open (10 minutes), but cold (2)
    first = event_at(old, 1)
    late = next(e for e in (event_at(old + timedelta(microseconds=i), 2) for i in range(1, 1000)) if same_partition(e, first))
    await owner.append(first)
    assert first in await owner.outbox.pending(utcnow(), 10_000)
    await owner.outbox.ack([first.id])
    assert first not in await owner.outbox.pending(utcnow(), 10_000)  # read empty
    await owner.append(late)
    if cassandra:
        assert late not in await owner.outbox.pending(utcnow(), 10_000)  # not re-read yet
        await asyncio.sleep(1.1)
    assert late in await owner.outbox.pending(utcnow(), 10_000)
    await owner.outbox.ack([late.id])


def same_partition(a: OutboxEvent, b: OutboxEvent) -> bool:
    return outbox_partition(a.id) == outbox_partition(b.id)


async def test_pending_with_nothing_to_do(owner: Owner) -> None:
    assert await owner.outbox.pending(utcnow(), 0) == []


# --- FANLINE_OUTBOX_ACK=applied (the embedded default; SQLite only) ------------------


async def test_applied_mode_keeps_published_events_until_acked_and_replays_them(owner: Owner, clock: Clock) -> None:
    """A published row leaves ``pending`` but stays until the worker's ack;
    ``replay`` (at start: the embedded broker may have lost it) makes it
    pending again. The Cassandra outbox deletes on the broker's ack instead."""
    if not hasattr(owner.outbox, "mark_published"):
        pytest.skip("only the embedded (SQLite) outbox offers the applied mode")
    outbox: Any = owner.outbox
    events = window(clock, 4)
    for event in events:
        await owner.append(event)
    await outbox.mark_published([events[0].id, events[2].id, uuid.uuid1()])
    mine = [e for e in await outbox.pending(utcnow(), 10_000) if e in events]
    assert mine == [events[1], events[3]]
    await outbox.ack([events[2].id])  # applied by the worker: gone for good
    assert await outbox.replay() >= 1
    mine = [e for e in await outbox.pending(utcnow(), 10_000) if e in events]
    assert mine == [events[0], events[1], events[3]]
    await outbox.ack([e.id for e in events])
    assert not [e for e in await outbox.pending(utcnow(), 10_000) if e in events]


async def test_an_events_request_id_is_stored_with_it(owner: Owner, clock: Clock) -> None:
    """The request that caused an event travels with its outbox row, so the
    relay publishes it as the Kafka header too (docs/operations/monitor.md, "Follow
    one post"); an event without one stays without."""
    base = clock.past()
    traced = OutboxEvent(id=new_timeuuid(base), key="traced", payload=b"{}", request_id="req-1f2e")
    plain = OutboxEvent(id=new_timeuuid(base + timedelta(milliseconds=1)), key="plain", payload=b"{}")
    await owner.append(traced)
    await owner.append(plain)
    pending = {e.id: e for e in await owner.outbox.pending(utcnow(), 10_000)}
    assert pending[traced.id].request_id == "req-1f2e"
    assert pending[plain.id].request_id is None
    await owner.outbox.ack([traced.id, plain.id])


async def test_an_unpublished_event_never_expires(owner: Owner, backend: Any, clock: Clock) -> None:
    """Issue 14, 3(d): an unpublished outbox row is an acknowledged write and
    must outlive a broker outage of any length. Cassandra's outbox was
    created with a 7-day default TTL, so a longer outage silently dropped
    events: the row written now must carry no TTL, and the table no default.
    SQLite has no expiry at all; there the event, 8 days old, is still pending."""
    event = event_at(clock.past() - timedelta(days=8), 0)
    await owner.append(event)
    assert event in await owner.outbox.pending(utcnow(), 10_000)
    if backend.name == "cassandra":
        outbox: Any = owner.outbox
        session, ks = outbox.session, outbox.keyspace
        shard, minute = outbox_partition(event.id)
        row = (
            await asyncio.to_thread(
                session.execute,
                f"SELECT TTL(payload) AS ttl FROM {ks}.outbox WHERE shard = %s AND minute = %s AND event_id = %s",
                (shard, minute, event.id),
            )
        ).one()
        assert row.ttl is None, f"outbox row expires in {row.ttl} s"
        table = (
            await asyncio.to_thread(
                session.execute,
                "SELECT default_time_to_live FROM system_schema.tables WHERE keyspace_name = %s AND table_name = 'outbox'",
                (ks,),
            )
        ).one()
        assert table.default_time_to_live == 0
    await owner.outbox.ack([event.id])
