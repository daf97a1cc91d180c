"""The gateway's token bucket (services/api/ratelimit.py)."""

from __future__ import annotations

from fanline_api.ratelimit import RateLimitMiddleware


async def _app(scope, receive, send):  # type: ignore[no-untyped-def]  # pragma: no cover
    pass


def test_burst_then_refill() -> None:
    limiter = RateLimitMiddleware(_app, rate_per_s=2.0, burst=3)
    assert [limiter.take("a", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.take("a", 0.0)
    assert 0.4 < wait <= 0.5
    assert limiter.take("b", 0.0) == 0.0  # buckets are per client
    assert limiter.take("a", 0.6) == 0.0  # refilled
