"""Verified sessions, reused for a while instead of asked for on every request.

A signed-in request used to cost a synchronous call to social-graph (and a
Cassandra read there) even when the same token had been verified a moment
before. ``SessionCache`` keeps social-graph's answer to the session lookup —
whatever it holds: the username, ``returned_at``, and anything later versions
add — and reuses it:

* for at most ``max_age_s`` (``FANLINE_SESSION_CACHE_S``), at most the
  answer's own ``cache_s`` (social-graph's activity refresh period: a user
  who keeps making requests is still seen often enough to stay active), and
  never past the session's ``expires_at``;
* **only while revocations reach this gateway**: a log-out stores a
  ``SessionRevoked`` event in social-graph's outbox with the revocation, and
  every gateway's event tap (``stream_events.py``) evicts that user's tokens
  when it arrives (``revoked``). While the tap is not connected nothing is
  served from the cache, and every (re)connection empties it, since the tap
  starts at the end of the topic and would not see what it missed;
* a lookup during which a revocation arrived is not kept (its answer may
  predate the revocation); the gateway that serves a log-out evicts the
  token itself before answering, so api.md's "the token is refused from then
  on" holds at once on that replica, and on the others as soon as the event
  reaches them (the fast path: milliseconds; the outbox relay's sweep if the
  broker was down) — or after ``max_age_s`` at the latest, however the
  event was lost.

Answers that are not live (``Unauthorized``) are never kept.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from fanline_shared import metrics
from fanline_shared.domain import canonical, parse_rfc3339

Lookup = Callable[[str], Awaitable[dict[str, Any]]]
DEFAULT_MAX_AGE_S = 60.0
DEFAULT_SIZE = 100_000


class SessionCache:
    """Token -> social-graph's session answer. ``lookup`` asks social-graph
    (raising ``Unauthorized`` for a token that is not live); ``max_age_s`` 0
    turns the cache off (every request asks)."""

    def __init__(
        self,
        lookup: Lookup,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        *,
        size: int = DEFAULT_SIZE,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._lookup = lookup
        self._max_age = max(0.0, max_age_s)
        self._size = size
        self._clock = clock
        self._wall = wall
        self._entries: dict[str, tuple[float, dict[str, Any]]] = {}  # token -> (monotonic deadline, answer)
        self._tokens_of: dict[str, set[str]] = {}  # canonical username -> its cached tokens
        self._live = False  # revocations reach this gateway (the event tap is connected)
        self._revocations = 0  # revocations seen so far (a lookup racing one is not kept)
        self._hit, self._miss, self._off = (metrics.SESSION_CACHE_LOOKUPS.labels(r) for r in ("hit", "miss", "off"))

    @property
    def enabled(self) -> bool:
        return self._max_age > 0

    @property
    def serving(self) -> bool:
        """Whether answers are reused now (enabled, and the tap is connected)."""
        return self._live and self.enabled

    def __len__(self) -> int:
        return len(self._entries)

    def has(self, token: str) -> bool:
        """Whether ``lookup(token)`` would be answered from memory now."""
        entry = self._entries.get(token) if self.serving else None
        return entry is not None and self._clock() < entry[0]

    async def lookup(self, token: str) -> dict[str, Any]:
        """The session answer for ``token``: reused if fresh, else asked for."""
        if self.serving:
            entry = self._entries.get(token)
            if entry is not None:
                if self._clock() < entry[0]:
                    self._hit.inc()
                    return entry[1]
                self._drop(token)
            self._miss.inc()
        else:
            self._off.inc()
        revocations = self._revocations
        answer = await self._lookup(token)
        if self.serving and revocations == self._revocations:
            self._keep(token, answer)
        return answer

    def _keep(self, token: str, answer: dict[str, Any]) -> None:
        if answer.get("kind") == "app":
            return  # an app's own token names no user a SessionRevoked event could name
        ttl = self._max_age
        cache_s = answer.get("cache_s")
        if isinstance(cache_s, int | float):
            ttl = min(ttl, float(cache_s))
        expires_at = answer.get("expires_at")
        if isinstance(expires_at, str):
            try:
                ttl = min(ttl, parse_rfc3339(expires_at).timestamp() - self._wall())
            except ValueError:
                return
        if ttl <= 0:
            return
        if len(self._entries) >= self._size:
            self.clear()  # bounded: at worst every token is verified once more
        user = canonical(str(answer.get("username", "")))
        self._entries[token] = (self._clock() + ttl, answer)
        self._tokens_of.setdefault(user, set()).add(token)

    def _drop(self, token: str) -> None:
        entry = self._entries.pop(token, None)
        if entry is not None:
            user = canonical(str(entry[1].get("username", "")))
            tokens = self._tokens_of.get(user)
            if tokens is not None:
                tokens.discard(token)
                if not tokens:
                    del self._tokens_of[user]

    def forget(self, token: str) -> None:
        """This token was revoked here (a log-out through this gateway)."""
        self._revocations += 1
        self._drop(token)

    def revoked(self, username: str) -> None:
        """A session of ``username`` was revoked (a ``SessionRevoked`` event):
        every cached token of theirs is asked for again."""
        self._revocations += 1
        for token in self._tokens_of.pop(canonical(username), set()):
            self._entries.pop(token, None)

    def connected(self) -> None:
        """The event tap is reading the topic (from its end): serve again,
        from an empty cache."""
        self.clear()
        self._live = True

    def disconnected(self) -> None:
        """The event tap stopped reading: revocations could be missed."""
        self._live = False
        self.clear()

    def clear(self) -> None:
        self._revocations += 1
        self._entries.clear()
        self._tokens_of.clear()
