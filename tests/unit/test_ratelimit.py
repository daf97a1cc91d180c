"""The gateway's abuse limits (services/api/ratelimit.py): whom a request is
counted under, the settings, the headers, and the failed-log-in guard. The
HTTP behaviour is tested end to end in tests/e2e/test_abuse.py."""

from __future__ import annotations

import math
import time
from typing import Any

import limits
import limits.aio.storage.memory
import limits.aio.strategies
import pytest

from fanline_api import ratelimit
from fanline_api.client_address import client_address
from fanline_api.ratelimit import Limiter, LoginGuard, RateLimitSettings
from fanline_shared.config import ConfigError, Env
from fanline_shared.errors import RateLimited


def scope(peer: str, forwarded: str | None = None) -> dict[str, Any]:
    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded is not None else []
    return {"type": "http", "client": (peer, 5000), "headers": headers}


def settings(**env: str) -> RateLimitSettings:
    return RateLimitSettings.from_env(Env(env))


class Clock:
    """``time.time`` for the limiter and its ``limits`` storage, set by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock(1_800_000_030.0)  # half-way through an epoch minute
    for module in (limits.aio.storage.memory, limits.aio.strategies, ratelimit):
        monkeypatch.setattr(module, "time", c)
    return c


def test_defaults_are_on_and_suit_a_public_deployment() -> None:
    s = settings()
    assert s.enabled
    assert (s.per_user.amount, s.per_user.get_expiry()) == (300, 300)
    assert (s.per_address.amount, s.per_address.get_expiry()) == (300, 300)
    assert (s.failed_logins_per_address.amount, s.failed_logins_per_address.get_expiry()) == (25, 300)
    assert (s.failed_logins_per_username.amount, s.failed_logins_per_username.get_expiry()) == (25, 300)
    assert s.storage_uri == "memory://" and s.trusted_proxies == ()


def test_bad_settings_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="FANLINE_RATE_LIMIT_PER_USER"):
        settings(FANLINE_RATE_LIMIT_PER_USER="lots")
    with pytest.raises(ConfigError, match="FANLINE_TRUSTED_PROXIES"):
        settings(FANLINE_TRUSTED_PROXIES="10.0.0.0/8, not-an-ip")
    with pytest.raises(ConfigError, match="FANLINE_RATE_LIMIT_STORAGE"):
        Limiter(settings(FANLINE_RATE_LIMIT_STORAGE="nosuch://x"))


def test_forwarded_for_is_ignored_unless_the_peer_is_a_trusted_proxy() -> None:
    assert client_address(scope("203.0.113.9", "198.51.100.1"), ()) == "203.0.113.9"
    trusted = settings(FANLINE_TRUSTED_PROXIES="10.0.0.0/8").trusted_proxies
    assert client_address(scope("203.0.113.9", "198.51.100.1"), trusted) == "203.0.113.9"
    # From the proxy: the nearest hop that is not itself a trusted proxy;
    # whatever the client put further left is not believed.
    assert client_address(scope("10.1.2.3", "1.1.1.1, 198.51.100.1"), trusted) == "198.51.100.1"
    assert client_address(scope("10.1.2.3", "198.51.100.1, 10.9.9.9"), trusted) == "198.51.100.1"
    assert client_address(scope("10.1.2.3", "garbage, 198.51.100.1"), trusted) == "198.51.100.1"
    assert client_address(scope("10.1.2.3"), trusted) == "10.1.2.3"


def test_ipv6_clients_are_counted_per_64() -> None:
    a = client_address(scope("2001:db8:1:2::1"), ())
    b = client_address(scope("2001:db8:1:2:ffff::9"), ())
    assert a == b == "2001:db8:1:2::/64"
    assert client_address(scope("2001:db8:1:3::1"), ()) != a
    assert client_address(scope("::ffff:192.0.2.7"), ()) == "192.0.2.7"


async def test_failed_logins_are_limited_per_username_and_per_address(clock: Clock) -> None:
    guard = LoginGuard(
        Limiter(
            settings(
                FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_USERNAME="3 per minute",
                FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_ADDRESS="5 per minute",
            )
        )
    )
    for _ in range(3):
        await guard.check("Alice", "192.0.2.1")
        await guard.failed("Alice", "192.0.2.1")
    # The name is spent, from any address and in any case...
    with pytest.raises(RateLimited) as caught:
        await guard.check("alice", "192.0.2.99")
    assert caught.value.retry_after >= 1
    assert caught.value.headers["RateLimit-Limit"] == "3" and caught.value.headers["RateLimit-Remaining"] == "0"
    # ...the address has two failures left for other names, then is spent too.
    for name in ("bob", "carol"):
        await guard.check(name, "192.0.2.1")
        await guard.failed(name, "192.0.2.1")
    with pytest.raises(RateLimited):
        await guard.check("dave", "192.0.2.1")
    await guard.check("dave", "192.0.2.2")  # another address is not affected


async def test_failures_straddling_the_turn_of_a_window_are_weighed_not_counted(clock: Clock) -> None:
    """The sliding-window counter (``limits``) weighs the previous epoch-aligned
    window's hits by the share of it still inside the last minute. So four
    failures of a "4 per minute" limit, two just before the minute turns and
    two just after, weigh 3.98 and a fifth is let through; within one window
    the fifth is refused. This is the
    library's documented approximation, accepted as the price of O(1) memory
    per key; the end-to-end tests keep each sequence inside one window."""
    guard = LoginGuard(Limiter(settings(FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_ADDRESS="4 per minute")))
    clock.now = 1_800_000_059.5  # 0.5 s before the minute turns
    for name in ("a1", "a2"):
        await guard.failed(name, "192.0.2.1")
    clock.now = 1_800_000_060.5
    for name in ("a3", "a4"):
        await guard.failed(name, "192.0.2.1")
    await guard.check("a5", "192.0.2.1")  # weight 2 x 59.5/60 + 2 = 3.98: allowed
    # The same four failures inside one window spend the address.
    for name in ("b1", "b2", "b3", "b4"):
        await guard.failed(name, "192.0.2.2")
    with pytest.raises(RateLimited):
        await guard.check("b5", "192.0.2.2")


async def test_memory_counters_decide_as_the_library_storage_does(clock: Clock) -> None:
    """``MemoryCounters`` (the default ``memory://``) gives every hit the same
    verdict and window figures as ``limits``' own in-memory storage, across
    window turns and an expiry."""
    item = limits.parse("5 per 10 seconds")
    ours = limits.aio.strategies.SlidingWindowCounterRateLimiter(ratelimit.MemoryCounters())
    theirs = limits.aio.strategies.SlidingWindowCounterRateLimiter(limits.aio.storage.memory.MemoryStorage())
    steps = [0.0, 0.1, 0.2, 1.0, 2.5, 3.0, 9.9, 10.05, 10.1, 11.0, 14.0, 19.99, 20.5, 27.0, 60.0, 60.1]
    for at in steps:
        clock.now = 1_800_000_000.0 + at
        for key in ("a", "b", "a"):
            assert await ours.hit(item, key) == await theirs.hit(item, key), (at, key)
            assert await ours.get_window_stats(item, key) == await theirs.get_window_stats(item, key), (at, key)


async def test_the_memory_limiters_one_call_hit_decides_and_reports_as_the_library_does(clock: Clock) -> None:
    """``Limiter.hit`` on the default counters (``MemoryCounters.hit_now``, one
    synchronous call) gives the verdict, remaining and reset that the library's
    strategy gives with ``hit`` and then ``get_window_stats`` on its own storage,
    through window turns, a full window, an expiry, and limits of 1 and 0."""
    ours = Limiter(settings())
    assert ours._memory is not None  # the one-call path is the one taken
    theirs = limits.aio.strategies.SlidingWindowCounterRateLimiter(limits.aio.storage.memory.MemoryStorage())
    items = [limits.parse("5 per 10 seconds"), limits.parse("1 per 2 seconds"), limits.parse("0 per minute")]
    steps = [0.0, 0.1, 0.2, 1.0, 1.0, 2.5, 3.0, 9.9, 10.05, 10.1, 11.0, 14.0, 19.99, 20.5, 27.0, 60.0, 60.1, 60.1]
    for at in steps:
        clock.now = 1_800_000_000.0 + at
        for item in items:
            for key in ("user", "a", "user"):
                allowed = await theirs.hit(item, "user", key)
                stats = await theirs.get_window_stats(item, "user", key)
                expected = ratelimit.Decision(
                    allowed, item.amount, max(0, stats.remaining), max(0, math.ceil(stats.reset_time - clock.now))
                )
                assert await ours.hit(item, "user", key) == expected, (at, str(item), key)
    # The library's own reads of the counters hit_now wrote agree (``test``: the log-in guard's path).
    clock.now += 0.5
    for item in items:
        stats = await theirs.get_window_stats(item, "user", "a")
        reset = max(0, math.ceil(stats.reset_time - clock.now))
        expected = ratelimit.Decision(await theirs.test(item, "user", "a"), item.amount, max(0, stats.remaining), reset)
        assert await ours.test(item, "user", "a") == expected


async def test_memory_counters_sweep_expired_keys_now_and_then_not_per_hit(clock: Clock) -> None:
    """A hit neither starts a task nor visits other keys; keys nobody reads
    again are dropped by a sweep at most every ``sweep_s``, so the memory
    stays bounded by the clients of the last few windows."""
    storage = ratelimit.MemoryCounters(sweep_s=10.0)
    strategy = limits.aio.strategies.SlidingWindowCounterRateLimiter(storage)
    item = limits.parse("100 per second")
    for i in range(50):
        assert await strategy.hit(item, f"client-{i}")
    assert storage.timer is None  # the library's per-hit sweep task never ran
    held = len(storage.storage)
    assert held == 50
    clock.now += 5  # expired (2 x the window), but the last sweep is too recent
    assert await strategy.hit(item, "late")
    assert len(storage.storage) == held + 1
    clock.now += 6  # past sweep_s: the next hit sweeps the 50 expired keys
    assert await strategy.hit(item, "later")
    assert len(storage.storage) == len(storage.expirations) == 1
    assert "later" in next(iter(storage.storage))


def test_the_default_memory_storage_is_ours() -> None:
    for env in ({}, {"FANLINE_RATE_LIMIT_STORAGE": "memory://"}, {"FANLINE_RATE_LIMIT_STORAGE": "async+memory://"}):
        assert isinstance(Limiter(settings(**env))._strategy.storage, ratelimit.MemoryCounters)


def test_an_address_counts_the_same_when_its_parse_is_reused() -> None:
    """``_parse_ip`` and ``_counted_as`` are memoized: the second request from
    an address gets the same key as the first, v4, v6 /64 and mapped alike."""
    for peer, key in (("192.0.2.7", "192.0.2.7"), ("2001:db8::1", "2001:db8::/64"), ("::ffff:192.0.2.8", "192.0.2.8")):
        assert client_address(scope(peer), ()) == key
        assert client_address(scope(peer), ()) == key
    assert client_address(scope("not an address"), ()) == "not an address"
