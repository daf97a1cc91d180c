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

A trim's scan reads up to ``max_rows + 1`` rows, about one scan per
``sample_every`` rows written: ~8 rows read per row written at the default
cap, which cost Cassandra about a fifth of its CPU per fanned-out row in
the benchmark's drains (docs/benchmarks.md, 2026-12-07). So each process
remembers, for a while (``remember_s``), how many rows it counted for an
owner and the newest of them; while that leaves room for at least a
sample's worth more, a sampled write's check reads only the rows newer than
that (``count_newer``), and scans and trims only once they no longer fit.
What the shortcut can miss: rows written meanwhile with *older* ids (a
lagging fan-out of an earlier tweet), for at most ``remember_s`` until the
next full count. A follow merge or a regeneration writes older rows on
purpose and always counts in full; caps under ``COUNT_NEWER_FROM_ROWS``
always scan (their scans are small).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Iterable
from typing import NamedTuple

from fanline_shared import metrics
from fanline_shared.domain import canonical
from fanline_shared.errors import Unavailable

from .ports import HomeTimelineRepository

log = logging.getLogger(__name__)


REMEMBER_S = 60.0  # how long a full count stands in for a scan (see the module's docstring)
REMEMBER_OWNERS = 10_000  # owners remembered per process (~3 MB), least recently counted forgotten first
# Below this cap a scan is small and a missed late row would matter more (the
# tests' and small deployments' caps of 10 trim on every write): always scan.
COUNT_NEWER_FROM_ROWS = 200


class _Counted(NamedTuple):
    rows: int  # the owner's rows when last counted (at most max_rows)
    newest: uuid.UUID  # the newest of them
    full_at: float  # monotonic time of the full count behind it


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
        remember_s: float = REMEMBER_S,
        remember_owners: int = REMEMBER_OWNERS,
    ) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be positive")
        self._home = home
        self.max_rows = max_rows
        # About one trim per eighth of the cap written: at most ~12 % over it.
        self.sample_every = sample_every or max(1, max_rows // 8)
        self._queue_size = queue_size
        self._pending: dict[str, bool] = {}  # insertion-ordered: owner -> a full count is due
        self._counted: OrderedDict[str, _Counted] = OrderedDict()
        self._remember_s, self._remember_owners = remember_s, remember_owners
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
        self.schedule(self.sampled((canonical(o) for o in owners), tweet_id), full=False)

    def schedule(self, owners: Iterable[str], *, full: bool = True) -> None:
        """Queue these owners for a trim (dropped if the queue is full).
        ``full``: count every row, not only those newer than the last count
        (rows older than it were written: a follow merge, a regeneration)."""
        for owner in owners:
            key = canonical(owner)
            if key in self._pending:
                self._pending[key] |= full
                continue
            if len(self._pending) >= self._queue_size:
                metrics.HOME_TRIMS.labels(outcome="dropped").inc()
                continue
            self._pending[key] = full
        if self._pending:
            self._wake.set()

    async def trim_now(self, owner: str) -> uuid.UUID | None:
        """Trim one owner at once, counting every row (tests, tools)."""
        return await self._trim(canonical(owner), full=True)

    async def _trim(self, owner: str, full: bool) -> uuid.UUID | None:
        seen = None if full or self.max_rows < COUNT_NEWER_FROM_ROWS else self._counted.get(owner)
        if seen is not None and time.monotonic() - seen.full_at <= self._remember_s:
            room = self.max_rows - seen.rows
            if room >= self.sample_every:  # else a trim is about due: straight to the scan
                added, newest = await self._home.count_newer(owner, seen.newest, room + 1)
                if added <= room:
                    self._remember(owner, seen._replace(rows=seen.rows + added, newest=newest or seen.newest))
                    metrics.HOME_TRIMS.labels(outcome="under_cap").inc()
                    return None
        started = time.monotonic()
        outcome = await self._home.trim_counted(owner, self.max_rows)
        if outcome.newest is None:
            self._counted.pop(owner, None)
        else:
            self._remember(owner, _Counted(min(outcome.rows, self.max_rows), outcome.newest, started))
        metrics.HOME_TRIMS.labels(outcome="trimmed" if outcome.horizon is not None else "under_cap").inc()
        return outcome.horizon

    def _remember(self, owner: str, counted: _Counted) -> None:
        self._counted[owner] = counted
        self._counted.move_to_end(owner)
        while len(self._counted) > self._remember_owners:
            self._counted.popitem(last=False)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()  # before draining: a schedule() meanwhile wakes us again
            while self._pending:
                owner, full = next(iter(self._pending.items()))
                del self._pending[owner]
                try:
                    await self._trim(owner, full)
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
            owner, full = next(iter(self._pending.items()))
            del self._pending[owner]
            await self._trim(owner, full)
