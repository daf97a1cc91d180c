"""Abuse limits of the public API and web pages (api.md, "Rate limits").

On by default. Built on the ``limits`` library (sliding-window counters: a
fixed window's double burst at the window edge without a moving window's
per-request memory). Every response of a limited route carries
``RateLimit-Limit``, ``RateLimit-Remaining`` and ``RateLimit-Reset``
(seconds); over the limit: ``429 rate_limited`` with ``Retry-After`` too.

Who is counted:

* an authenticated request (a bearer token, or the web pages' session
  cookie) per **user** — the token is verified with social-graph once and the
  answer cached for a minute, so a forged token never charges someone else's
  budget, and an unverified one counts against its address;
* any other request per **client address** (``client_address.py``): the socket's peer, or — only when
  that peer is listed in ``FANLINE_TRUSTED_PROXIES`` — the nearest address in
  ``X-Forwarded-For`` that is not itself a trusted proxy. IPv6 clients are
  counted per /64 (one subscriber's usual allocation);
* failed log-ins, in addition, per username and per address
  (``LoginGuard``): once either is spent, log-ins for that name or from that
  address are refused with 429 before any password is hashed.

Counters live in memory by default, so with several gateway replicas each
replica counts separately (a client spread over N replicas by the load
balancer gets up to N times the limit). ``FANLINE_RATE_LIMIT_STORAGE`` points
every replica at one shared backend instead, e.g. ``redis://redis:6379``
(needs ``pip install "limits[async-redis]"`` in the image).
Operations routes, ``/openapi.json`` and ``/static`` are never limited.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cachetools import TTLCache
from limits import RateLimitItem, parse
from limits.aio.storage import MemoryStorage, Storage
from limits.aio.strategies import SlidingWindowCounterRateLimiter
from limits.errors import ConfigurationError
from limits.storage import storage_from_string
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fanline_shared import metrics
from fanline_shared.config import ConfigError, Env
from fanline_shared.domain import canonical, is_valid_username
from fanline_shared.errors import DomainError, RateLimited, Unauthorized
from fanline_shared.http_routes import error_body, json_response

from .client_address import Network, client_address, trusted_networks

_EXEMPT = ("/healthz", "/readyz", "/metrics", "/openapi.json")
_EXEMPT_PREFIXES = ("/static/", "/avatars/", "/headers/")
# The Mastodon-compatible API: Mastodon's header names (beside the IETF ones)
# and error body (mastodon/errors.py).
_MASTODON_PREFIXES = ("/api/", "/oauth/", "/.well-known/")
# The client address, as this module decided it, for the handlers.
ADDRESS_STATE = "client_address"

# Mastodon's defaults for a public server: 300 requests per 5 minutes per
# account and per address, 25 failed log-ins per 5 minutes per address.
DEFAULT_PER_USER = "300 per 5 minutes"
DEFAULT_PER_ADDRESS = "300 per 5 minutes"
DEFAULT_FAILED_LOGINS_PER_ADDRESS = "25 per 5 minutes"
DEFAULT_FAILED_LOGINS_PER_USERNAME = "25 per 5 minutes"


def _item(env: Env, name: str, default: str) -> RateLimitItem:
    raw = env.string(name, default)
    try:
        return parse(raw)
    except ValueError:
        raise ConfigError(f"{name} must look like '300 per 5 minutes', got {raw!r}") from None


@dataclass(frozen=True)
class RateLimitSettings:
    enabled: bool
    per_user: RateLimitItem
    per_address: RateLimitItem
    failed_logins_per_address: RateLimitItem
    failed_logins_per_username: RateLimitItem
    storage_uri: str
    trusted_proxies: tuple[Network, ...]

    @classmethod
    def from_env(cls, env: Env) -> RateLimitSettings:
        return cls(
            enabled=env.boolean("FANLINE_RATE_LIMITS", True),
            per_user=_item(env, "FANLINE_RATE_LIMIT_PER_USER", DEFAULT_PER_USER),
            per_address=_item(env, "FANLINE_RATE_LIMIT_PER_ADDRESS", DEFAULT_PER_ADDRESS),
            failed_logins_per_address=_item(
                env, "FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_ADDRESS", DEFAULT_FAILED_LOGINS_PER_ADDRESS
            ),
            failed_logins_per_username=_item(
                env, "FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_USERNAME", DEFAULT_FAILED_LOGINS_PER_USERNAME
            ),
            storage_uri=env.string("FANLINE_RATE_LIMIT_STORAGE", "memory://"),
            trusted_proxies=trusted_networks(env.string("FANLINE_TRUSTED_PROXIES", "")),
        )


# --- the limiter ------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    reset_s: int

    def headers(self, *, mastodon: bool = False) -> dict[str, str]:
        out = {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(self.reset_s),
        }
        if mastodon:
            # Always the three together (Mastodon.py reads Limit whenever
            # Remaining is there); Reset as a time, like Mastodon's.
            reset_at = datetime.now(UTC) + timedelta(seconds=self.reset_s)
            out.update(
                {
                    "X-RateLimit-Limit": str(self.limit),
                    "X-RateLimit-Remaining": str(self.remaining),
                    "X-RateLimit-Reset": reset_at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{reset_at.microsecond // 1000:03d}Z",
                }
            )
        if not self.allowed:
            out["Retry-After"] = str(max(1, self.reset_s))
        return out


class MemoryCounters(MemoryStorage):
    """``limits``' in-process counters, with its expired-key sweep run at most
    once per ``sweep_s`` instead of after every hit.

    The library's ``incr`` starts a task that visits *every* key it holds
    each time the previous sweep is done, which under load is once per
    request, and linear in the number of clients: 46 µs of CPU per hit with
    the standard mix's 300 users, 18 µs with this class (measured in one
    process, one hit per turn of the loop, as requests come). Counts
    do not depend on the sweep (``get`` drops an expired key when it is
    read); the sweep only gives the memory of keys nobody asks about back, so
    doing it once in a while changes no decision. The per-key
    ``asyncio.Lock`` is left out too: no ``await`` separates the read and the
    write of a counter, so nothing can interleave there."""

    def __init__(self, *, sweep_s: float = 10.0) -> None:
        super().__init__()
        self._sweep_s = sweep_s
        self._swept_at = time.time()

    def _sweep_now_and_then(self) -> None:
        now = time.time()
        if now - self._swept_at < self._sweep_s:
            return
        self._swept_at = now
        expired = [key for key, at in self.expirations.items() if at <= now]
        for key in expired:
            self.storage.pop(key, None)
            self.expirations.pop(key, None)
            self.locks.pop(key, None)

    async def incr(self, key: str, expiry: float, amount: int = 1) -> int:
        await self.get(key)  # drops the key if it has expired
        self._sweep_now_and_then()
        self.storage[key] += amount
        if self.storage[key] == amount:
            self.expirations[key] = time.time() + expiry
        return self.storage[key]

    async def decr(self, key: str, amount: int = 1) -> int:
        await self.get(key)
        self._sweep_now_and_then()
        self.storage[key] = max(self.storage[key] - amount, 0)
        return self.storage[key]

    def _count(self, key: str, now: float) -> int:
        """``get`` without its coroutine: the counter, dropped if expired."""
        if self.expirations.get(key, 0) <= now:
            self.storage.pop(key, None)
            self.expirations.pop(key, None)
            self.locks.pop(key, None)
        return self.storage.get(key, 0)

    def hit_now(self, item: RateLimitItem, key: str) -> Decision:
        """One hit of ``item`` for ``key`` and the window's figures after it, in one
        call and one reading of the clock: what the library's sliding-window
        strategy decides with ``hit`` and then reports with ``get_window_stats``
        (the same keys, counters and arithmetic, which
        ``tests/unit/test_ratelimit.py`` checks against it), without the seven
        coroutines those two make per request (15 µs of the gateway's CPU per
        request, back to back; 2 µs this way)."""
        limit, expiry = item.amount, item.get_expiry()
        now = time.time()
        previous_key, current_key = f"{key}/{int((now - expiry) / expiry)}", f"{key}/{int(now / expiry)}"
        previous = self._count(previous_key, now)
        current = self._count(current_key, now)
        previous_ttl = 0.0 if previous == 0 else (1 - (((now - expiry) / expiry) % 1)) * expiry
        current_ttl = (1 - ((now / expiry) % 1)) * expiry + expiry
        carried = previous * previous_ttl / expiry  # the previous window's weighted share
        allowed = math.floor(carried + current) + 1 <= limit
        if allowed:
            self._sweep_now_and_then()
            current += 1
            self.storage[current_key] = current
            if current == 1:
                self.expirations[current_key] = now + 2 * expiry
        remaining = max(0, limit - math.floor(carried + current))
        if not (previous or current):
            return Decision(allowed, limit, remaining, 0)
        reset_in = min(
            previous_ttl % (expiry / previous) if previous else math.inf, current_ttl % expiry if current else math.inf
        )
        # As the library reports it: a time (now + reset_in), then the seconds to it;
        # the rounding of a ~1.8e9 s time keeps whole seconds whole.
        reset_at = now + reset_in
        return Decision(allowed, limit, remaining, max(0, math.ceil(reset_at - now)))


class Limiter:
    """The counters (``limits`` storage + strategy) and the decisions."""

    def __init__(self, settings: RateLimitSettings) -> None:
        self.settings = settings
        uri = settings.storage_uri
        try:
            if uri in ("memory://", "async+memory://"):
                storage: Storage = MemoryCounters()
            else:
                found = storage_from_string(uri if uri.startswith("async+") else f"async+{uri}")
                assert isinstance(found, Storage)  # an async+ scheme names an async storage
                storage = found
        except ConfigurationError as exc:
            raise ConfigError(f"FANLINE_RATE_LIMIT_STORAGE {uri!r}: {exc}") from None
        self._strategy = SlidingWindowCounterRateLimiter(storage)
        # The default in-process counters decide a hit in one synchronous call (``hit_now``).
        self._memory = storage if isinstance(storage, MemoryCounters) else None

    async def hit(self, item: RateLimitItem, *key: str) -> Decision:
        if self._memory is not None:
            return self._memory.hit_now(item, item.key_for(*key))
        allowed = await self._strategy.hit(item, *key)
        return await self._decision(allowed, item, *key)

    async def test(self, item: RateLimitItem, *key: str) -> Decision:
        allowed = await self._strategy.test(item, *key)
        return await self._decision(allowed, item, *key)

    async def _decision(self, allowed: bool, item: RateLimitItem, *key: str) -> Decision:
        stats = await self._strategy.get_window_stats(item, *key)
        reset = max(0, math.ceil(stats.reset_time - time.time()))
        return Decision(allowed, item.amount, max(0, stats.remaining), reset)


class LoginGuard:
    """Failed log-ins per username and per address (used by ``Gateway.login``)."""

    def __init__(self, limiter: Limiter) -> None:
        self._limiter = limiter
        s = limiter.settings
        self._per_address = s.failed_logins_per_address
        self._per_username = s.failed_logins_per_username

    def _keys(self, username: object, address: str) -> list[tuple[RateLimitItem, str, str]]:
        keys = [(self._per_address, "failed-login-address", address)]
        if isinstance(username, str) and is_valid_username(username):
            keys.append((self._per_username, "failed-login-username", canonical(username)))
        return keys

    async def check(self, username: object, address: str) -> None:
        """``RateLimited`` if this name or address has no failed log-in left."""
        for item, kind, key in self._keys(username, address):
            decision = await self._limiter.test(item, kind, key)
            if not decision.allowed:
                metrics.RATE_LIMITED.labels(kind).inc()
                error = RateLimited(
                    "too many failed log-ins; try again later", retry_after=max(1, decision.reset_s), code="rate_limited"
                )
                error.headers = decision.headers()
                raise error

    async def failed(self, username: object, address: str) -> None:
        for item, kind, key in self._keys(username, address):
            await self._limiter.hit(item, kind, key)


# --- the middleware ------------------------------------------------------------------

Verify = Callable[[str], Awaitable[str]]


def _credential(scope: Scope, session_cookie: str) -> str | None:
    headers = Headers(scope=scope)
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    cookie = headers.get("cookie")
    if cookie:
        return cookie_parser(cookie).get(session_cookie) or None
    return None


class RateLimitMiddleware:
    """Counts each limited request, refuses it with 429 over the limit, and
    adds the ``RateLimit-*`` headers to every response it lets through. It
    also records the client address (``scope["state"]["client_address"]``)
    for the failed-log-in limits, whether or not limits are on."""

    def __init__(self, app: ASGIApp, *, limiter: Limiter, session_cookie: str) -> None:
        self.app = app
        self._session_cookie = session_cookie  # the web pages' credential
        self.limiter = limiter
        self.settings = limiter.settings
        # token -> username, verified; a minute is long enough to save the
        # lookups and short enough that a revoked token soon counts as anonymous.
        self._users: TTLCache[str, str] = TTLCache(maxsize=100_000, ttl=60)
        self._bad: TTLCache[str, bool] = TTLCache(maxsize=100_000, ttl=60)

    async def _user(self, scope: Scope, token: str) -> str | None:
        user = self._users.get(token)
        if user is not None or token in self._bad or len(token) > 200 or not token.isascii():
            return user
        # One social-graph lookup per token not seen in the last minute (the
        # same lookup the handler makes anyway). It happens even when the
        # address is spent: a signed-in user behind a busy address (a NAT, a
        # campus) must not be refused for others' requests.
        gateway = getattr(scope["app"].state, "gateway", None)
        if gateway is None:  # not started (no lifespan): count by address
            return None
        verify: Verify = gateway.authenticate
        try:
            user = await verify(f"Bearer {token}")
        except Unauthorized:
            self._bad[token] = True
            return None
        except DomainError:
            return None  # social-graph unavailable: by address for now, no verdict kept
        self._users[token] = user
        return user

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        address = client_address(scope, self.settings.trusted_proxies)
        scope.setdefault("state", {})[ADDRESS_STATE] = address
        path: str = scope["path"]
        if not self.settings.enabled or path in _EXEMPT or path.startswith(_EXEMPT_PREFIXES):
            await self.app(scope, receive, send)
            return
        token = _credential(scope, self._session_cookie)
        user = await self._user(scope, token) if token else None
        if user is not None:
            decision = await self.limiter.hit(self.settings.per_user, "user", canonical(user))
        else:
            decision = await self.limiter.hit(self.settings.per_address, "address", address)
        mastodon = path.startswith(_MASTODON_PREFIXES)
        headers = decision.headers(mastodon=mastodon)
        if not decision.allowed:
            metrics.RATE_LIMITED.labels("user" if user is not None else "address").inc()
            body = {"error": "Too many requests"} if mastodon else error_body("rate_limited", "too many requests; slow down")
            response = json_response(body, 429, headers)
            await response(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw: list[Any] = list(message.get("headers", []))
                present = {name.lower() for name, _ in raw}
                for name, value in headers.items():
                    if name.lower().encode() not in present:
                        raw.append((name.lower().encode(), value.encode()))
                message = {**message, "headers": raw}
            await send(message)

        await self.app(scope, receive, send_with_headers)
