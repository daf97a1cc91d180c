"""Per-client token-bucket rate limiting (off unless FANLINE_RATE_LIMIT_PER_S > 0).

One bucket per client address, kept in memory per gateway process; behind a
load balancer, set the limit per replica. Over the limit: ``429 rate_limited``
with ``Retry-After``. Operations endpoints are never limited.
"""

from __future__ import annotations

import math
import time

from starlette.types import ASGIApp, Receive, Scope, Send

from fanline_shared.web import error_body, json_response

_EXEMPT = ("/healthz", "/readyz", "/metrics")
_MAX_CLIENTS = 100_000


class RateLimitMiddleware:
    def __init__(self, app: ASGIApp, *, rate_per_s: float, burst: int) -> None:
        self.app = app
        self.rate = rate_per_s
        self.burst = float(burst)
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, client: str, now: float) -> float:
        """Take one token; return 0 if allowed, else seconds until allowed."""
        tokens, last = self._buckets.get(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens >= 1.0:
            if len(self._buckets) >= _MAX_CLIENTS and client not in self._buckets:
                self._buckets.clear()  # crude bound on memory; limits restart
            self._buckets[client] = (tokens - 1.0, now)
            return 0.0
        self._buckets[client] = (tokens, now)
        return (1.0 - tokens) / self.rate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in _EXEMPT:
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("unknown", 0))[0]
        wait = self.take(client, time.monotonic())
        if wait > 0:
            response = json_response(
                error_body("rate_limited", "too many requests, slow down"),
                429,
                {"Retry-After": str(max(1, math.ceil(wait)))},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
