"""Contract of ``RelayLease`` (fanline_shared.outbox.ports) — the outbox relay's lease, of both
owning services, against every adapter: one holder at a time, renewable by
its holder, free again once expired or released (issue 14, 3(e))."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from fanline_shared.outbox.ports import Outbox
from fanline_social_graph.adapters import SocialGraphStorage
from fanline_tweet_store.adapters import TweetStoreStorage


@pytest.fixture(params=["social_graph", "tweet_store"])
def outbox(request: pytest.FixtureRequest, social_graph: SocialGraphStorage, tweet_store: TweetStoreStorage) -> Outbox:
    return social_graph.outbox if request.param == "social_graph" else tweet_store.outbox


def holder() -> str:
    return f"gw-{uuid.uuid4().hex[:8]}"


async def free(outbox: Outbox) -> None:
    """Start from a free lease: an earlier test of the module (Cassandra
    shares one keyspace per module) may have left one; wait until a lease of
    our own can be taken, then release it."""
    me = holder()
    for _ in range(40):
        if await outbox.acquire_lease(me, 1):
            await outbox.release_lease(me)
            return
        await asyncio.sleep(0.25)
    raise AssertionError("lease never became free")


async def test_one_holder_at_a_time_and_the_holder_renews(outbox: Outbox) -> None:
    await free(outbox)
    a, b = holder(), holder()
    assert await outbox.acquire_lease(a, 30)
    assert not await outbox.acquire_lease(b, 30)
    assert await outbox.acquire_lease(a, 30)  # renewal
    assert not await outbox.acquire_lease(b, 30)
    await outbox.release_lease(b)  # not b's: changes nothing
    assert not await outbox.acquire_lease(b, 30)
    await outbox.release_lease(a)
    assert await outbox.acquire_lease(b, 30)
    await outbox.release_lease(b)


async def test_concurrent_takers_get_one_lease(outbox: Outbox) -> None:
    await free(outbox)
    names = [holder() for _ in range(5)]
    held = await asyncio.gather(*(outbox.acquire_lease(n, 30) for n in names))
    assert held.count(True) == 1
    await outbox.release_lease(names[held.index(True)])


async def test_an_expired_lease_can_be_taken(outbox: Outbox) -> None:
    await free(outbox)
    dead, standby = holder(), holder()
    assert await outbox.acquire_lease(dead, 1)
    assert not await outbox.acquire_lease(standby, 1)
    await asyncio.sleep(2.1)  # Cassandra TTLs are in whole seconds
    assert await outbox.acquire_lease(standby, 5)
    assert not await outbox.acquire_lease(dead, 5)  # the old holder cannot renew a lost lease
    await outbox.release_lease(standby)
