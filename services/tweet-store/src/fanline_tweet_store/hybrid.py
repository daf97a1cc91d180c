"""The hybrid home-timeline read: stored rows, large accounts merged at read
time, and the userlines below the stored horizon.

A home timeline is, by definition (api.md), the owner's own tweets and the
tweets of everyone they follow, newest first, back to the retention horizon.
Fan-out on write stores most of it as rows; this module reads the rest:

1. **Stored rows** — one slice of ``home_timeline``, which also returns the
   owner's *horizon*: the oldest id the rows are trusted down to once the
   cap has trimmed older rows (``home_cap.py``). Rows below it are ignored.
2. **Large accounts** — authors the fan-out worker registered as large
   (``LargeAccountRegistry``) are not fanned out on write; for those the
   reader follows, the head of their userline is merged in (from
   ``RecentLines``: read by many readers, written by one author, so it is
   cached for a fraction of a second). The registry is a *superset* of the
   authors whose tweets skipped the fan-out — an author stays registered for
   the retention period after their last skipped tweet — so crossing the
   threshold in either direction loses nothing; a tweet that is both stored
   and merged is one id, so nothing is duplicated.
3. **Below the horizon** — the userlines of everyone the owner follows (and
   the owner's own), merged: paging past the stored cap goes on, with the
   same guarantees, back to the retention horizon.

Every source answers "newest ids strictly older than ``before``", so the
union of their first ``limit + 1`` ids, sorted, gives exactly the page and the
next cursor: paging never skips or repeats, whichever source an item came
from. Ids are ordered like Cassandra's timeuuid clustering
(``domain.timeuuid_sort_key``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from itertools import takewhile
from typing import Generic, TypeVar

from cachetools import LRUCache

from fanline_shared import metrics
from fanline_shared.domain import canonical, min_timeuuid, timeuuid_sort_key, timeuuid_time, utcnow

from .ports import HomeTimelineRepository, LargeAccountRegistry, TweetRepository

T = TypeVar("T")
V = TypeVar("V")
FollowingLookup = Callable[[str], Awaitable[list[str]]]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HybridPolicy:
    """How stale each cached input of a home read may be, and how much is cached.

    Each staleness is a delay before a change shows, never a wrong page: a new
    large account shows within ``registry_ttl_s``, a large account's new tweet
    within ``recent_ttl_s``, a follow or unfollow's effect on merged authors
    within ``following_ttl_s``."""

    registry_ttl_s: float = 0.5
    recent_ttl_s: float = 0.5
    recent_depth: int = 200
    following_ttl_s: float = 2.0
    cache_size: int = 10_000
    # Userline reads in flight for one page below the horizon.
    fallback_concurrency: int = 32


class SingleFlightCache(Generic[V]):
    """A TTL cache whose misses are computed once however many callers wait,
    and whose busy entries are refreshed ahead of their expiry.

    A value is never served older than ``ttl_s`` (counted from when its load
    began). Once ``refresh_ahead * ttl_s`` has passed, a read still gets
    the cached value at once and starts one refresh in the background — so an
    entry read steadily is reloaded before it expires and no reader waits for
    it (a home read merging 100 large accounts would otherwise wait for 100
    userline reads once every ``ttl_s``). Only a
    read after the full ``ttl_s`` waits, as with a plain TTL cache; an entry
    nobody reads costs nothing. At most ``size`` entries are kept (LRU)."""

    def __init__(
        self, ttl_s: float, size: int, *, refresh_ahead: float = 0.5, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl_s
        self._refresh_after = ttl_s * refresh_ahead if 0 < refresh_ahead < 1 else ttl_s
        self._clock = clock
        self._values: LRUCache[str, tuple[float, V]] = LRUCache(maxsize=size)
        self._pending: dict[str, asyncio.Future[V]] = {}
        self._refreshing: set[asyncio.Task[V]] = set()

    async def get(self, key: str, load: Callable[[], Awaitable[V]]) -> V:
        entry = self._values.get(key)
        if entry is not None:
            loaded_at, value = entry
            age = self._clock() - loaded_at
            if age < self._ttl:
                if age >= self._refresh_after and key not in self._pending:
                    task = asyncio.get_running_loop().create_task(self._load(key, load))
                    self._refreshing.add(task)
                    task.add_done_callback(self._refreshed)
                return value
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        return await self._load(key, load)

    async def _load(self, key: str, load: Callable[[], Awaitable[V]]) -> V:
        fut: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        started = self._clock()
        try:
            value = await load()
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: nobody else may be waiting
            raise
        else:
            self._values[key] = (started, value)
            fut.set_result(value)
            return value
        finally:
            del self._pending[key]

    def _refreshed(self, task: asyncio.Task[V]) -> None:
        self._refreshing.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # The cached value is still served until it expires; the next
            # read past that loads it in the open, and its caller sees errors.
            log.debug("background cache refresh failed: %r", exc)

    def clear(self) -> None:
        self._values.clear()


class RecentLines:
    """The newest ``depth`` ids of an author's userline, cached for ``ttl_s``.

    Serves "``limit`` newest ids older than ``before``" from memory when the
    cached head holds them (or holds the whole userline), else reads the store."""

    def __init__(self, tweets: TweetRepository, policy: HybridPolicy) -> None:
        self._tweets = tweets
        self._depth = policy.recent_depth
        self._heads: SingleFlightCache[list[uuid.UUID]] = SingleFlightCache(policy.recent_ttl_s, policy.cache_size)

    async def newest(self, author: str, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        head = await self._heads.get(author, lambda: self._tweets.userline(author, self._depth, None))
        if before is None:
            start = 0
        else:
            bound = timeuuid_sort_key(before)
            start = next((n for n, i in enumerate(head) if timeuuid_sort_key(i) < bound), len(head))
        found = head[start : start + limit]
        if len(found) == limit or len(head) < self._depth:
            metrics.HOME_MERGE_LOOKUPS.labels(result="hit").inc()
            return found
        metrics.HOME_MERGE_LOOKUPS.labels(result="miss").inc()
        return await self._tweets.userline(author, limit, before)

    async def oldest_after(self, author: str, limit: int, after: uuid.UUID | None) -> list[uuid.UUID]:
        """The ``limit`` oldest ids newer than ``after``, oldest first: from
        the cached head when it reaches down to ``after`` (or holds the whole
        userline), else from the store."""
        head = await self._heads.get(author, lambda: self._tweets.userline(author, self._depth, None))
        bound = timeuuid_sort_key(after) if after is not None else ""
        newer = list(takewhile(lambda i: timeuuid_sort_key(i) > bound, head))
        if len(newer) < len(head) or len(head) < self._depth:
            metrics.HOME_MERGE_LOOKUPS.labels(result="hit").inc()
            return newer[::-1][:limit]
        metrics.HOME_MERGE_LOOKUPS.labels(result="miss").inc()
        return await self._tweets.userline_after(author, limit, after)


class HybridHome:
    """Reads the ids of one home-timeline page (see the module docstring)."""

    def __init__(
        self,
        home: HomeTimelineRepository,
        tweets: TweetRepository,
        large: LargeAccountRegistry,
        following: FollowingLookup,
        *,
        retention_s: int,
        policy: HybridPolicy,
    ) -> None:
        self._home = home
        self._tweets = tweets
        self._large = large
        self._following_lookup = following
        self._retention = timedelta(seconds=retention_s)
        self._policy = policy
        self._registry: SingleFlightCache[set[str]] = SingleFlightCache(policy.registry_ttl_s, 1)
        self._following: SingleFlightCache[list[str]] = SingleFlightCache(policy.following_ttl_s, policy.cache_size)
        self._recent = RecentLines(tweets, policy)

    async def large_accounts(self) -> set[str]:
        """The registered large accounts (cached for ``registry_ttl_s``)."""
        return await self._registry.get("members", self._large.members)

    async def following(self, owner: str) -> set[str]:
        """Canonical names ``owner`` follows (cached for ``following_ttl_s``)."""
        names = await self._following.get(canonical(owner), lambda: self._following_lookup(owner))
        return {canonical(n) for n in names}

    async def ids(self, owner: str, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        """Up to ``limit`` ids of ``owner``'s home timeline strictly older
        than ``before``, newest first."""
        owner_lc = canonical(owner)
        window, large = await asyncio.gather(self._home.window(owner_lc, limit, before), self.large_accounts())
        horizon = window.horizon
        floor = timeuuid_sort_key(horizon) if horizon is not None else ""

        def above(ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
            return {i for i in ids if timeuuid_sort_key(i) >= floor}

        merged = above(window.ids)
        candidates = large - {owner_lc}
        if candidates:
            followed = sorted(candidates & await self.following(owner_lc))
            metrics.HOME_MERGED_ACCOUNTS.observe(len(followed))
            heads = await asyncio.gather(*(self._recent.newest(a, limit, before) for a in followed))
            for head in heads:
                merged |= above(head)
        page = sorted(merged, key=timeuuid_sort_key, reverse=True)[:limit]
        if horizon is None or len(page) >= limit:
            return page
        # Below the stored horizon: everyone followed, from their userlines.
        metrics.HOME_FALLBACK_READS.inc()
        bound = horizon if before is None or timeuuid_sort_key(before) > floor else before
        authors = sorted(await self.following(owner_lc) | {owner_lc})
        need = limit - len(page)
        lines = await _bounded(
            self._policy.fallback_concurrency, [partial(self._tweets.userline, a, need, bound) for a in authors]
        )
        oldest = utcnow() - self._retention
        below = {i for line in lines for i in line if timeuuid_time(i) > oldest}
        return page + sorted(below, key=timeuuid_sort_key, reverse=True)[:need]

    async def ids_after(self, owner: str, limit: int, after: uuid.UUID | None) -> list[uuid.UUID]:
        """Up to ``limit`` ids of ``owner``'s home timeline strictly newer than
        ``after``, *oldest* first (``min_id`` pages): the same three sources as
        ``ids``, each read oldest first from ``after``, so the union's first
        ``limit`` ids are exactly the page. Stored rows and large accounts'
        heads give everything at or above the horizon; below it (only when
        ``after`` is) the userlines, which then come first. In the common case
        (``after`` above the horizon, no large accounts) one query."""
        owner_lc = canonical(owner)
        window, large = await asyncio.gather(self._home.window_after(owner_lc, limit, after), self.large_accounts())
        horizon = window.horizon
        floor = timeuuid_sort_key(horizon) if horizon is not None else ""
        ids = window.ids
        if horizon is not None and len(ids) == limit and any(timeuuid_sort_key(i) < floor for i in ids):
            # Untrusted rows below the horizon took part of the slice: read the trusted ones.
            ids = (await self._home.window_after(owner_lc, limit, _just_below(horizon))).ids
        above = {i for i in ids if timeuuid_sort_key(i) >= floor}
        candidates = large - {owner_lc}
        if candidates:
            followed = sorted(candidates & await self.following(owner_lc))
            metrics.HOME_MERGED_ACCOUNTS.observe(len(followed))
            heads = await asyncio.gather(*(self._recent.oldest_after(a, limit, after) for a in followed))
            above |= {i for head in heads for i in head if timeuuid_sort_key(i) >= floor}
        page = sorted(above, key=timeuuid_sort_key)[:limit]
        if horizon is None or (after is not None and timeuuid_sort_key(after) >= floor):
            return page
        # Below the stored horizon: everyone followed, from their userlines,
        # back to the retention horizon (and never older: the floor moves up to it).
        metrics.HOME_FALLBACK_READS.inc()
        oldest = _just_below_time(utcnow() - self._retention)
        start = after if after is not None and timeuuid_sort_key(after) > timeuuid_sort_key(oldest) else oldest
        authors = sorted(await self.following(owner_lc) | {owner_lc})
        lines = await _bounded(
            self._policy.fallback_concurrency, [partial(self._tweets.userline_after, a, limit, start) for a in authors]
        )
        below = {i for line in lines for i in line if timeuuid_sort_key(i) < floor}
        return (sorted(below, key=timeuuid_sort_key) + page)[:limit]


def _just_below(value: uuid.UUID) -> uuid.UUID:
    """The largest timeuuid of the tick before ``value``'s: "newer than it"
    starts at ``value``'s tick (in both backends' orders)."""
    return _largest_at(value.time - 1)


def _just_below_time(when: datetime) -> uuid.UUID:
    """The largest timeuuid of ``when``'s tick: "newer than it" is after ``when``."""
    return _largest_at(min_timeuuid(when).time)


def _largest_at(ticks: int) -> uuid.UUID:
    ticks = max(ticks, 0)
    fields = (ticks & 0xFFFFFFFF, (ticks >> 32) & 0xFFFF, ((ticks >> 48) & 0x0FFF) | 0x1000, 0xBF, 0xFF, 0xFFFFFFFFFFFF)
    return uuid.UUID(fields=fields)


async def _bounded(limit: int, calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run ``calls`` with at most ``limit`` in flight; results in call order."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls)))
