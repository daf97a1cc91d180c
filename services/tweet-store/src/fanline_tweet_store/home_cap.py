"""The stored-row cap of home timelines (``FANLINE_HOME_MAX_ROWS``).

Fan-out writes rows blindly (one write per follower, no read), so the cap is
enforced beside the writes, not in them: after a write, a *sample* of the
owners written — each ``(owner, tweet)`` pair with probability about
``1 / sample_every``, chosen by a hash so a redelivered page samples the same
owners — is queued for a trim, and a background task trims them a few at a
time (``HomeTimelineRepository.trim``: keep the newest ``max_rows``, one range
tombstone for the rest, raise the owner's horizon). An owner therefore holds
about ``max_rows + sample_every`` rows at most between two trims, and a
follow merge (many rows for one owner at once) always trims.

Why not a DELETE per row past the cap: that is one tombstone per row, read
back by every page that scans past them (Cassandra's tombstone warnings and
failures). A range tombstone is one marker per trim, and it sits below the
horizon, where reads never look (``hybrid.py`` reads userlines there).
The queue is bounded and deduplicated: under a burst, trims are dropped
rather than queued without end — the next sampled write queues the owner
again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import zlib
from collections.abc import Iterable

from fanline_shared import metrics
from fanline_shared.domain import canonical
from fanline_shared.errors import Unavailable

from .ports import HomeTimelineRepository

log = logging.getLogger(__name__)


class HomeCap:
    """Trims sampled owners' home timelines to ``max_rows`` in the background."""

    def __init__(
        self,
        home: HomeTimelineRepository,
        max_rows: int,
        *,
        sample_every: int | None = None,
        concurrency: int = 2,
        queue_size: int = 10_000,
    ) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be positive")
        self._home = home
        self.max_rows = max_rows
        # About one trim per eighth of the cap written: at most ~12 % over it.
        self.sample_every = sample_every or max(1, max_rows // 8)
        self._queue_size = queue_size
        self._pending: dict[str, None] = {}  # insertion-ordered set
        self._wake = asyncio.Event()
        self._concurrency = concurrency
        self._tasks: list[asyncio.Task[None]] = []

    def sampled(self, owners: Iterable[str], tweet_id: uuid.UUID) -> list[str]:
        """The owners of this write that are due a trim."""
        if self.sample_every == 1:
            return list(owners)
        salt = tweet_id.bytes
        return [o for o in owners if zlib.crc32(salt + o.encode()) % self.sample_every == 0]

    def wrote(self, owners: Iterable[str], tweet_id: uuid.UUID) -> None:
        """Rows of ``tweet_id`` were written for ``owners``."""
        self.schedule(self.sampled((canonical(o) for o in owners), tweet_id))

    def schedule(self, owners: Iterable[str]) -> None:
        """Queue these owners for a trim (dropped if the queue is full)."""
        for owner in owners:
            if len(self._pending) >= self._queue_size:
                metrics.HOME_TRIMS.labels(outcome="dropped").inc()
                continue
            self._pending[canonical(owner)] = None
        if self._pending:
            self._wake.set()

    async def trim_now(self, owner: str) -> uuid.UUID | None:
        """Trim one owner at once (tests, tools)."""
        return await self._trim(canonical(owner))

    async def _trim(self, owner: str) -> uuid.UUID | None:
        horizon = await self._home.trim(owner, self.max_rows)
        metrics.HOME_TRIMS.labels(outcome="trimmed" if horizon is not None else "under_cap").inc()
        return horizon

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()  # before draining: a schedule() meanwhile wakes us again
            while self._pending:
                owner = next(iter(self._pending))
                del self._pending[owner]
                try:
                    await self._trim(owner)
                except Unavailable as exc:
                    metrics.HOME_TRIMS.labels(outcome="failed").inc()
                    log.warning("home trim of %s failed (a later write queues it again): %s", owner, exc)

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._run()) for _ in range(self._concurrency)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def drain(self) -> None:
        """Trim every queued owner now (tests, shutdown)."""
        while self._pending:
            owner = next(iter(self._pending))
            del self._pending[owner]
            await self._trim(owner)
