"""Bare-driver measurements: the write ceiling and the raw read path.

Both use the statements the product uses (tweet-store's TTL'd home-timeline
INSERT; its slice and tweet lookups), prepared the same way
(``fanline_shared.cassandra.prepare``), from a plain driver session in the
harness process — no HTTP, no JSON, no services.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import PreparedStatement

from fanline_shared import cassandra as cql

Row = tuple[str, uuid.UUID, str, int]


def home_insert(session: Session, keyspace: str) -> PreparedStatement:
    return cql.prepare(session, f"INSERT INTO {keyspace}.home_timeline (owner_lc, tweet_id, author_lc) "
                                "VALUES (?, ?, ?) USING TTL ?", write=True)


def driver_loop(session: Session, stmt: PreparedStatement, rows: Sequence[Row], concurrency: int) -> float:
    """The driver's own ``execute_concurrent`` (blocking): returns seconds."""
    started = time.perf_counter()
    for ok, result in execute_concurrent_with_args(session, stmt, rows, concurrency=concurrency,
                                                   raise_on_first_error=True, results_generator=True):
        if not ok:  # pragma: no cover
            raise RuntimeError(str(result))
    return time.perf_counter() - started


async def bridge_loop(session: Session, stmt: PreparedStatement, rows: Sequence[Row], concurrency: int) -> float:
    """``fanline_shared.cassandra.execute_concurrent`` (the product's bounded
    window, driven from driver callbacks): returns seconds."""
    started = time.perf_counter()
    chunk = 20_000  # bounded memory for the per-row result lists
    for i in range(0, len(rows), chunk):
        await cql.execute_concurrent(session, stmt, rows[i:i + chunk], name="bench_ceiling", concurrency=concurrency)
    return time.perf_counter() - started


async def tune(session: Session, stmt: PreparedStatement, sample: Callable[[], list[Row]],
               concurrencies: Sequence[int], say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Rows/s for each (path, concurrency) on a fresh sample of rows each time."""
    results = []
    for path in ("driver execute_concurrent", "fanline_shared execute_concurrent"):
        for c in concurrencies:
            rows = sample()
            if path.startswith("driver"):
                seconds = await asyncio.to_thread(driver_loop, session, stmt, rows, c)
            else:
                seconds = await bridge_loop(session, stmt, rows, c)
            rate = len(rows) / seconds
            say(f"  {path}, concurrency {c}: {rate:,.0f} rows/s")
            results.append({"path": path, "concurrency": c, "rows": len(rows), "rows_per_s": round(rate, 1)})
    return results


async def run_best(session: Session, stmt: PreparedStatement, rows: Sequence[Row], best: dict[str, Any]) -> float:
    """Write ``rows`` with the winning path and concurrency; rows/s."""
    if str(best["path"]).startswith("driver"):
        seconds = await asyncio.to_thread(driver_loop, session, stmt, rows, int(best["concurrency"]))
    else:
        seconds = await bridge_loop(session, stmt, rows, int(best["concurrency"]))
    return len(rows) / seconds


class RawReader:
    """The CQL of one home-timeline page, exactly as tweet-store runs it: one
    slice (``limit + 1`` ids) and one multi-get of the tweets (concurrent
    single-partition reads through ``execute_concurrent``, as
    ``CassandraTweets.get_many`` does); optionally the session lookup the
    gateway's authentication also costs."""

    def __init__(self, session: Session, tweet_keyspace: str, social_keyspace: str) -> None:
        self._session = session
        self._slice = cql.prepare(session, f"SELECT tweet_id FROM {tweet_keyspace}.home_timeline "
                                           "WHERE owner_lc = ? LIMIT ?")
        self._get = cql.prepare(session, f"SELECT tweet_id, username, body FROM {tweet_keyspace}.tweets "
                                         "WHERE tweet_id = ?")
        self._session_get = cql.prepare(session, f"SELECT username, expires_at FROM {social_keyspace}.sessions "
                                                 "WHERE token_hash = ?")

    async def page(self, owner: str, limit: int = 20, token_hash: str | None = None, *, hydrate: bool = True) -> int:
        """Tweets found for one page (ids only, without ``hydrate``)."""
        if token_hash is not None:
            await cql.execute(self._session, self._session_get, (token_hash,), name="bench_raw_session")
        rows = await cql.execute(self._session, self._slice, (owner, limit + 1), name="bench_raw_slice")
        ids = [r.tweet_id for r in rows][:limit]
        if not hydrate:
            return len(ids)
        found = await cql.execute_concurrent(self._session, self._get, [(i,) for i in ids],
                                             name="bench_raw_get_many", concurrency=64)
        return sum(1 for r in found if r)
