"""Regenerating the home timeline of a user who comes back after being inactive.

While a user is inactive the fan-out skips them (social-graph's active-followers
index), so their stored rows miss what was posted meanwhile. When they come
back, social-graph puts them back in the index *first* (every later tweet
reaches them) and reports ``returned_at``; their next home read asks
``Regenerator.status``, which starts one regeneration — once per user at a
time across replicas (``claim_regeneration``: an LWT with a TTL) — and says
"running" (the gateway answers ``206`` + ``Retry-After``) until it is done.

The regeneration rebuilds the newest part of the timeline from the userlines
of everyone the user follows (and their own), with **bounded work**: each
author's newest ``per_author`` ids, where ``per_author`` shrinks as the number
of authors grows (at least ``MIN_PER_AUTHOR``), so the reads stay near
``max(max_rows, MIN_PER_AUTHOR * authors)``. What those reads prove complete
is everything newer than the *newest* "oldest id read" of an author whose
line was cut: those rows are written (at most ``max_rows``), and the horizon
is raised to the oldest of them, so everything older is read from the
userlines at read time (``hybrid.py``). The regenerated timeline is therefore
the timeline the user would have had — the same rows above the horizon, the
same userline merge below it, large accounts merged as always.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from cachetools import TTLCache

from fanline_shared import metrics
from fanline_shared.domain import canonical, timeuuid_sort_key, timeuuid_time, utcnow
from fanline_shared.errors import DomainError

from .ports import HomeTimelineRepository, TweetRepository

log = logging.getLogger(__name__)

MIN_PER_AUTHOR = 20
CLAIM_TTL_S = 120  # a replica that dies mid-regeneration frees the claim after this
READ_CONCURRENCY = 16

FollowingLookup = Callable[[str], Awaitable[set[str]]]


class Regenerator:
    def __init__(
        self,
        home: HomeTimelineRepository,
        tweets: TweetRepository,
        following: FollowingLookup,
        *,
        retention_s: int,
        max_rows: int,
        on_done: Callable[[str], None] | None = None,
    ) -> None:
        self._home = home
        self._tweets = tweets
        self._following = following
        self._retention = timedelta(seconds=retention_s)
        self._max_rows = max_rows
        self._on_done = on_done
        self._done: TTLCache[str, datetime] = TTLCache(maxsize=100_000, ttl=3600)
        self._running: dict[str, asyncio.Task[None]] = {}

    async def status(self, owner: str, returned_at: datetime) -> bool:
        """True once ``owner``'s timeline was regenerated after ``returned_at``;
        otherwise make sure a regeneration runs (here or on another replica)
        and return False."""
        name = canonical(owner)
        done_at = self._done.get(name) or await self._home.regenerated_at(name)
        if done_at is not None and done_at >= returned_at:
            self._done[name] = done_at
            return True
        if name in self._running:
            return False
        if await self._home.claim_regeneration(name, CLAIM_TTL_S):
            self._running[name] = asyncio.create_task(self._run(name, returned_at))
        return False

    async def _run(self, owner: str, returned_at: datetime) -> None:
        try:
            started = asyncio.get_running_loop().time()
            await self.regenerate(owner)
            # Never earlier than the return it answers (social-graph's clock
            # may run ahead of ours).
            finished = max(utcnow(), returned_at)
            await self._home.mark_regenerated(owner, finished)
            self._done[owner] = finished
            metrics.HOME_REGENERATIONS.labels(outcome="done").inc()
            metrics.HOME_REGENERATION_DURATION.observe(asyncio.get_running_loop().time() - started)
        except Exception as exc:  # noqa: BLE001 - a background task: log, and the next read retries
            metrics.HOME_REGENERATIONS.labels(outcome="failed").inc()
            log.warning("regeneration of %s failed (the next home read starts it again): %s", owner, exc)
        finally:
            self._running.pop(owner, None)
            try:
                await self._home.release_regeneration(owner)
            except DomainError as exc:
                log.warning("could not release the regeneration claim of %s (it expires): %s", owner, exc)

    async def regenerate(self, owner: str) -> int:
        """Rebuild ``owner``'s stored rows from the userlines; returns rows written."""
        authors = sorted(await self._following(owner) | {canonical(owner)})
        per_author = max(MIN_PER_AUTHOR, math.ceil(self._max_rows / len(authors)))
        gate = asyncio.Semaphore(READ_CONCURRENCY)

        async def read(author: str) -> list[uuid.UUID]:
            async with gate:
                return await self._tweets.userline(author, per_author, None)

        lines = await asyncio.gather(*(read(a) for a in authors))
        # Complete above the newest "last id read" of any line that was cut.
        cut = [line[-1] for line in lines if len(line) == per_author]
        floor = max((timeuuid_sort_key(i) for i in cut), default="")
        oldest = utcnow() - self._retention
        entries = sorted(
            (
                (i, a)
                for a, line in zip(authors, lines, strict=True)
                for i in line
                if timeuuid_sort_key(i) >= floor and timeuuid_time(i) > oldest
            ),
            key=lambda e: timeuuid_sort_key(e[0]),
            reverse=True,
        )
        keep = entries[: self._max_rows]
        if keep:
            await self._home.add_many(owner, keep)
        if cut or len(entries) > len(keep):
            # Everything below the rows written is read from the userlines.
            horizon = keep[-1][0] if keep else max(cut, key=timeuuid_sort_key)
            await self._home.raise_horizon(owner, horizon)
        if self._on_done is not None:
            self._on_done(owner)
        return len(keep)

    async def wait(self, owner: str) -> None:
        """Wait for a regeneration of ``owner`` running here (tests)."""
        task = self._running.get(canonical(owner))
        if task is not None:
            await asyncio.shield(task)

    async def close(self) -> None:
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
