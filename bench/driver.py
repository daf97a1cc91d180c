"""Bare-driver measurements: the write ceiling and the raw read path.

Both use the statements the product uses (tweet-store's TTL'd home-timeline
INSERT; its slice and tweet lookups), prepared the same way
(``fanline_shared.cassandra.prepare``), from a plain driver session in the
harness process — no HTTP, no JSON, no services.

The fair ceiling (issue 18) writes the rows as tweet-store does: unlogged
batches of ``batch_rows`` rows grouped by replica (``replica_batches``), one
request per batch; ``batch_rows`` 1 is the old single-row ceiling. The raw
read path can keep tweets in the same cache tweet-store keeps (same
``cachetools.TTLCache``, size and TTL, read-through, unknown ids not cached).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from cachetools import TTLCache
from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent, execute_concurrent_with_args
from cassandra.query import PreparedStatement

from fanline_shared import cassandra as cql
from fanline_shared import policies

Row = tuple[str, uuid.UUID, str, int]


def home_insert(session: Session, keyspace: str) -> PreparedStatement:
    return cql.prepare(
        session, f"INSERT INTO {keyspace}.home_timeline (owner_lc, tweet_id, author_lc) VALUES (?, ?, ?) USING TTL ?", write=True
    )


def driver_loop(session: Session, stmt: PreparedStatement, rows: Sequence[Row], concurrency: int) -> float:
    """The driver's own ``execute_concurrent`` (blocking): returns seconds."""
    started = time.perf_counter()
    for ok, result in execute_concurrent_with_args(
        session, stmt, rows, concurrency=concurrency, raise_on_first_error=True, results_generator=True
    ):
        if not ok:  # pragma: no cover
            raise RuntimeError(str(result))
    return time.perf_counter() - started


async def bridge_loop(session: Session, stmt: PreparedStatement, rows: Sequence[Row], concurrency: int) -> float:
    """``fanline_shared.cassandra.execute_concurrent`` (the product's bounded
    window, driven from driver callbacks): returns seconds."""
    started = time.perf_counter()
    chunk = 20_000  # bounded memory for the per-row result lists
    for i in range(0, len(rows), chunk):
        await cql.execute_concurrent(session, stmt, rows[i : i + chunk], name="bench_ceiling", concurrency=concurrency)
    return time.perf_counter() - started


PATHS = ("driver execute_concurrent", "fanline_shared bridge (execute_concurrent, or execute_each for batches)")


def driver_batches(session: Session, stmt: PreparedStatement, rows: Sequence[Row], concurrency: int, batch_rows: int) -> float:
    """Replica-grouped unlogged batches through the driver's own
    ``execute_concurrent`` (blocking): seconds, batching included."""
    started = time.perf_counter()
    batches = cql.replica_batches(session, stmt, rows, rows=batch_rows)
    for ok, result in execute_concurrent(
        session, [(b, None) for b in batches], concurrency=concurrency, raise_on_first_error=True, results_generator=True
    ):
        if not ok:  # pragma: no cover
            raise RuntimeError(str(result))
    return time.perf_counter() - started


async def bridge_batches(
    session: Session, stmt: PreparedStatement, rows: Sequence[Row], concurrency: int, batch_rows: int
) -> float:
    """Replica-grouped unlogged batches through the product's bridge
    (``fanline_shared.cassandra.execute_each``, as tweet-store writes a page):
    seconds, batching included."""
    started = time.perf_counter()
    chunk = 20_000
    for i in range(0, len(rows), chunk):
        batches = cql.replica_batches(session, stmt, rows[i : i + chunk], rows=batch_rows)
        await cql.execute_each(session, batches, name="bench_ceiling", concurrency=concurrency)
    return time.perf_counter() - started


def home_batch_rows(env: dict[str, str] | None = None) -> int:
    """Rows per batch tweet-store uses: ``FANLINE_HOME_WRITE_BATCH_ROWS`` of
    the bench system's environment, else the product default."""
    value = (env or {}).get("FANLINE_HOME_WRITE_BATCH_ROWS")
    return int(value) if value else policies.DEFAULT_HOME_WRITE_BATCH_ROWS


async def write_rows(
    session: Session, stmt: PreparedStatement, rows: Sequence[Row], path: str, concurrency: int, batch_rows: int
) -> float:
    """Write ``rows`` with ``path`` (one of ``PATHS``): seconds."""
    if batch_rows <= 1:
        if path.startswith("driver"):
            return await asyncio.to_thread(driver_loop, session, stmt, rows, concurrency)
        return await bridge_loop(session, stmt, rows, concurrency)
    if path.startswith("driver"):
        return await asyncio.to_thread(driver_batches, session, stmt, rows, concurrency, batch_rows)
    return await bridge_batches(session, stmt, rows, concurrency, batch_rows)


async def tune(
    session: Session,
    stmt: PreparedStatement,
    sample: Callable[[], list[Row]],
    concurrencies: Sequence[int],
    say: Callable[[str], None],
    batch_rows: int = 1,
) -> list[dict[str, Any]]:
    """Rows/s for each (path, in-flight requests) on a fresh sample of rows
    each time, written in batches of ``batch_rows`` (1: single rows)."""
    results = []
    for path in PATHS:
        for c in concurrencies:
            rows = sample()
            seconds = await write_rows(session, stmt, rows, path, c, batch_rows)
            rate = len(rows) / seconds
            say(f"  {path}, batches of {batch_rows}, {c} in flight: {rate:,.0f} rows/s")
            results.append(
                {"path": path, "concurrency": c, "batch_rows": batch_rows, "rows": len(rows), "rows_per_s": round(rate, 1)}
            )
    return results


async def run_best(session: Session, stmt: PreparedStatement, rows: Sequence[Row], best: dict[str, Any]) -> float:
    """Write ``rows`` with the winning path, window and batch size; rows/s."""
    seconds = await write_rows(session, stmt, rows, str(best["path"]), int(best["concurrency"]), int(best.get("batch_rows", 1)))
    return len(rows) / seconds


class RawReader:
    """The CQL of one home-timeline page, exactly as tweet-store runs it: one
    slice (``limit + 1`` ids) and one multi-get of the tweets (concurrent
    single-partition reads through ``execute_concurrent``, as
    ``CassandraTweets.get_many`` does); optionally the session lookup the
    gateway's authentication also costs.

    With ``cache_size`` > 0 the multi-get goes through a cache with tweet-store's
    rules (``fanline_tweet_store.cache``: a ``TTLCache`` of ``cache_size`` tweets
    kept ``cache_ttl_s``, read-through, unknown ids never cached): the fair
    baseline of a cached API. ``hits``/``misses`` count its lookups."""

    def __init__(
        self, session: Session, tweet_keyspace: str, social_keyspace: str, *, cache_size: int = 0, cache_ttl_s: float = 60.0
    ) -> None:
        self._session = session
        self._slice = cql.prepare(session, f"SELECT tweet_id FROM {tweet_keyspace}.home_timeline WHERE owner_lc = ? LIMIT ?")
        self._get = cql.prepare(session, f"SELECT tweet_id, username, body FROM {tweet_keyspace}.tweets WHERE tweet_id = ?")
        self._session_get = cql.prepare(
            session, f"SELECT username, expires_at FROM {social_keyspace}.sessions WHERE token_hash = ?"
        )
        self._cache: TTLCache[uuid.UUID, Any] | None = (
            TTLCache(maxsize=cache_size, ttl=cache_ttl_s) if cache_size > 0 and cache_ttl_s > 0 else None
        )
        self.hits = 0
        self.misses = 0

    async def page(
        self, owner: str, limit: int = 20, token_hash: str | None = None, *, hydrate: bool = True, cached: bool = False
    ) -> int:
        """Tweets found for one page (ids only, without ``hydrate``; through
        the cache with ``cached``, if this reader has one)."""
        if token_hash is not None:
            await cql.execute(self._session, self._session_get, (token_hash,), name="bench_raw_session")
        rows = await cql.execute(self._session, self._slice, (owner, limit + 1), name="bench_raw_slice")
        ids = [r.tweet_id for r in rows][:limit]
        if not hydrate:
            return len(ids)
        cache = self._cache if cached else None
        if cache is None:
            found = await cql.execute_concurrent(
                self._session, self._get, [(i,) for i in ids], name="bench_raw_get_many", concurrency=64
            )
            return sum(1 for r in found if r)
        have = [i for i in dict.fromkeys(ids) if cache.get(i) is not None]
        missing = [i for i in dict.fromkeys(ids) if i not in set(have)]
        self.hits += len(have)
        self.misses += len(missing)
        got = 0
        if missing:
            found = await cql.execute_concurrent(
                self._session, self._get, [(i,) for i in missing], name="bench_raw_get_many", concurrency=64
            )
            for tid, r in zip(missing, found, strict=True):
                if r:  # unknown ids are not cached, as tweet-store's cache does
                    cache[tid] = r[0]
                    got += 1
        return len(have) + got
