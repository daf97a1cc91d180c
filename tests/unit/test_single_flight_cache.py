"""The hybrid read's cache (``SingleFlightCache``): single flight, the TTL
bound, and refresh-ahead — with a hand-driven clock and loads that can be
held, so every interleaving is pinned (the contract suite runs the hybrid
read over the real stores with the default policy)."""

from __future__ import annotations

import asyncio

import pytest

from fanline_tweet_store.hybrid import SingleFlightCache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Loader:
    """Counts loads; each returns the next number, after ``gate`` opens."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False

    async def __call__(self) -> int:
        self.calls += 1
        n = self.calls
        await self.gate.wait()
        if self.fail:
            raise RuntimeError("store down")
        return n


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_concurrent_misses_load_once() -> None:
    clock, load = Clock(), Loader()
    cache: SingleFlightCache[int] = SingleFlightCache(1.0, 10, clock=clock)
    load.gate.clear()
    readers = [asyncio.create_task(cache.get("k", load)) for _ in range(5)]
    await settle()
    load.gate.set()
    assert await asyncio.gather(*readers) == [1] * 5
    assert load.calls == 1


async def test_fresh_value_is_served_without_a_load() -> None:
    clock, load = Clock(), Loader()
    cache: SingleFlightCache[int] = SingleFlightCache(1.0, 10, clock=clock)
    assert await cache.get("k", load) == 1
    clock.now += 0.49
    assert await cache.get("k", load) == 1
    await settle()
    assert load.calls == 1


async def test_past_half_the_ttl_a_read_is_answered_at_once_and_refreshes_in_the_background() -> None:
    clock, load = Clock(), Loader()
    cache: SingleFlightCache[int] = SingleFlightCache(1.0, 10, clock=clock)
    await cache.get("k", load)
    clock.now += 0.6
    load.gate.clear()  # the refresh is slow: nobody may wait for it
    assert await asyncio.wait_for(cache.get("k", load), 0.5) == 1
    assert await asyncio.wait_for(cache.get("k", load), 0.5) == 1
    await settle()
    assert load.calls == 2  # one refresh, however many reads meanwhile
    load.gate.set()
    await settle()
    assert await cache.get("k", load) == 2
    # Its age counts from the refresh: fresh again for the whole TTL.
    clock.now += 0.4
    assert await cache.get("k", load) == 2
    await settle()
    assert load.calls == 2


async def test_never_served_older_than_the_ttl() -> None:
    clock, load = Clock(), Loader()
    cache: SingleFlightCache[int] = SingleFlightCache(1.0, 10, clock=clock)
    await cache.get("k", load)
    clock.now += 1.0
    load.gate.clear()
    reader = asyncio.create_task(cache.get("k", load))
    await settle()
    assert not reader.done()  # expired: it waits for the load
    load.gate.set()
    assert await reader == 2


async def test_a_failed_background_refresh_keeps_the_value_until_it_expires() -> None:
    clock, load = Clock(), Loader()
    cache: SingleFlightCache[int] = SingleFlightCache(1.0, 10, clock=clock)
    await cache.get("k", load)
    load.fail = True
    clock.now += 0.7
    assert await cache.get("k", load) == 1
    await settle()
    assert load.calls == 2
    assert await cache.get("k", load) == 1  # still within the TTL; tries again
    await settle()
    clock.now += 0.3
    with pytest.raises(RuntimeError, match="store down"):
        await cache.get("k", load)  # expired: the caller sees the error
    load.fail = False
    assert await cache.get("k", load) == load.calls


async def test_refresh_ahead_off_is_a_plain_ttl_cache() -> None:
    clock, load = Clock(), Loader()
    cache: SingleFlightCache[int] = SingleFlightCache(1.0, 10, refresh_ahead=0, clock=clock)
    await cache.get("k", load)
    clock.now += 0.9
    assert await cache.get("k", load) == 1
    await settle()
    assert load.calls == 1


async def test_size_bounds_the_entries() -> None:
    clock, load = Clock(), Loader()
    cache: SingleFlightCache[int] = SingleFlightCache(60.0, 2, clock=clock)
    for key in ("a", "b", "c"):
        await cache.get(key, load)
    assert await cache.get("a", load) == 4  # "a" was evicted, loaded again
