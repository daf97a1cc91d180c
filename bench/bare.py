"""The opponents with nothing of Fanline in between, on the same node: the bare driver (the
fan-out's fair write ceiling, the raw read path) and cassandra-stress (docs/benchmark-methods.md)."""

from __future__ import annotations

import asyncio
import itertools
import re
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cachetools import TTLCache
from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent

from deploy.local.infra import InfraUnavailable, LocalInfra
from fanline_shared import cassandra as cql
from fanline_shared.domain import canonical

Row = tuple[str, uuid.UUID, str, int]
PATHS = ("driver", "bridge")
STRESS = "4.0-alpha2"
HOME_PROFILE = Path(__file__).with_name("stress_home_profile.yaml")


class StressUnavailable(RuntimeError):
    pass


def fan_out_batches(session: Session, stmt: Any, rows: Sequence[Row], batch_rows: int) -> list[Any]:
    """``rows`` in tweet-store's batches: each tweet's rows (consecutive, sharing every value but
    the owner) through ``cql.keyed_batches``, as ``CassandraHomeTimeline.add`` builds them."""
    out: list[Any] = []
    for shared, group in itertools.groupby(rows, key=lambda r: r[1:]):
        out += cql.keyed_batches(session, stmt, [r[0] for r in group], shared, rows=batch_rows)
    return out


async def write_rows(session: Session, keyspace: str, rows: Sequence[Row], path: str, window: int, batch_rows: int) -> float:
    """``rows`` into ``keyspace.home_timeline`` with ``path`` (one of ``PATHS``), ``window`` requests in flight: rows/s."""
    text = f"INSERT INTO {keyspace}.home_timeline (owner_lc, tweet_id, author_lc) VALUES (?, ?, ?) USING TTL ?"
    stmt, started = await asyncio.to_thread(cql.prepare, session, text, write=True), time.perf_counter()
    if path == "driver":
        batches = fan_out_batches(session, stmt, rows, batch_rows) if batch_rows > 1 else []
        statements = [(b, None) for b in batches] if batch_rows > 1 else [(stmt, r) for r in rows]
        await asyncio.to_thread(
            execute_concurrent, session, statements, concurrency=window, raise_on_first_error=True, results_generator=False
        )
    else:
        for chunk in (rows[i : i + 20_000] for i in range(0, len(rows), 20_000)):  # bounded memory for the results
            if batch_rows <= 1:
                await cql.execute_concurrent(session, stmt, chunk, name="bench_ceiling", concurrency=window)
            else:
                batches = fan_out_batches(session, stmt, chunk, batch_rows)
                await cql.execute_each(session, batches, name="bench_ceiling", concurrency=window)
    return len(rows) / (time.perf_counter() - started)


class FollowerReader:
    """A tweet's recipients read as the fan-out worker reads them, through the bare driver: the
    author's active followers from social-graph's ``followers_active``, ``page_size`` a page (the
    worker's ``FANLINE_FANOUT_PAGE_SIZE``), each page after the last name of the one before, one
    row more than a page asked for to learn whether another follows (as social-graph does)."""

    def __init__(self, session: Session, social_ks: str, page_size: int) -> None:
        self._session, self._page_size = session, page_size
        text = f"SELECT follower FROM {social_ks}.followers_active WHERE followee_lc = ? AND follower_lc > ? LIMIT ?"
        self._page = cql.prepare(session, text)

    async def followers(self, author: str) -> list[str]:
        names, after = list[str](), ""
        while True:
            bound = (canonical(author), after, self._page_size + 1)
            rows = [r.follower for r in await cql.execute(self._session, self._page, bound, name="bench_ceiling_read")]
            names += rows[: self._page_size]
            if len(rows) <= self._page_size:
                return names
            after = canonical(rows[self._page_size - 1])


class RawReader:
    """The CQL of one home page as tweet-store runs it: a slice of ``limit + 1`` ids and the
    multi-get of the tweets (concurrent single-partition reads, as ``CassandraTweets.get_many``);
    optionally the session lookup the gateway pays too; optionally (``cached``) through a cache
    with tweet-store's rules (a ``TTLCache``, read-through, unknown ids never cached)."""

    def __init__(self, session: Session, tweet_ks: str, social_ks: str, cache_size: int = 1, cache_ttl_s: float = 60.0) -> None:
        self._session, self._cache = session, TTLCache[uuid.UUID, Any](maxsize=cache_size, ttl=cache_ttl_s)  # type: ignore[var-annotated]
        self._slice = cql.prepare(session, f"SELECT tweet_id FROM {tweet_ks}.home_timeline WHERE owner_lc = ? LIMIT ?")
        self._get = cql.prepare(session, f"SELECT tweet_id, username, body FROM {tweet_ks}.tweets WHERE tweet_id = ?")
        self._token = cql.prepare(session, f"SELECT username, expires_at FROM {social_ks}.sessions WHERE token_hash = ?")
        self.hits = self.misses = 0

    async def page(self, owner: str, token_hash: str | None = None, *, hydrate: bool = True, cached: bool = False) -> int:
        """Tweets found for one page of 20 (ids only without ``hydrate``)."""
        if token_hash is not None:
            await cql.execute(self._session, self._token, (token_hash,), name="bench_raw_session")
        ids = [r.tweet_id for r in await cql.execute(self._session, self._slice, (owner, 21), name="bench_raw_slice")][:20]
        if not hydrate:
            return len(ids)
        missing = [i for i in dict.fromkeys(ids) if not cached or self._cache.get(i) is None]
        if cached:
            self.hits, self.misses = self.hits + len(ids) - len(missing), self.misses + len(missing)
        keys = [(i,) for i in missing]
        found = await cql.execute_concurrent(self._session, self._get, keys, name="bench_raw_get", concurrency=64)
        for tid, rows in zip(missing, found, strict=True) if cached else ():
            if rows:  # unknown ids are not cached, as tweet-store's cache does
                self._cache[tid] = rows[0]
        return len(ids) - len(missing) + sum(1 for r in found if r)


def stress(infra: LocalInfra, args: list[str], timeout_s: float = 900) -> dict[str, Any]:
    """Run cassandra-stress (``FANLINE_CASSANDRA_STRESS_JAR``'s, else the 4.0-alpha2 tarball's that
    ``make bench-tools`` fetched): {"ops_per_s", "rows_per_s", "tool"}; StressUnavailable if it cannot."""
    try:
        argv, tool = infra.stress_command(*args), "cassandra-stress from FANLINE_CASSANDRA_STRESS_JAR"
    except InfraUnavailable:
        if not (home := Path(__file__).with_name(".tools") / f"apache-cassandra-{STRESS}").is_dir():
            raise StressUnavailable(f"no {home}: run `make bench-tools` (needs mvn)") from None
        host, port = infra.cassandra_contact.rsplit(":", 1)
        flags = [f for f in infra._tool_jvm_flags() if not f.startswith("-Dlogback")]
        flags.append(f"-Dlogback.configurationFile=file://{home}/conf/logback-tools.xml")
        classpath = f"{home}/tools/lib/stress.jar:{home}/lib/*:{home}/conf"
        argv = [infra.config.java, "-Xmx512M", *flags, f"-Dcassandra.storagedir={home}/data", "-cp", classpath]
        argv += ["org.apache.cassandra.stress.Stress", *args, "-node", host, "-port", f"native={port}"]
        tool = f"cassandra-stress {STRESS} (the apache-cassandra {STRESS} tarball on Maven Central)"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise StressUnavailable(f"timed out after {timeout_s:.0f}s") from exc
    ops, rows = (re.search(rf"^{w.capitalize()} rate\s*:\s*([\d,]+) {w}/s", done.stdout, re.M) for w in ("op", "row"))
    if ops is None:
        raise StressUnavailable(f"failed (exit {done.returncode}): {(done.stdout + done.stderr)[-600:]}")
    return {"ops_per_s": float(ops[1].replace(",", "")), "rows_per_s": rows and float(rows[1].replace(",", "")), "tool": tool}


def stress_args(profile: str, keyspace: str, ops: int, threads: int, workdir: Path, batch_rows: int = 10) -> list[str]:
    """cassandra-stress's arguments: ``write`` (single rows) or ``home_timeline`` (``HOME_PROFILE``, written to ``workdir``)."""
    common = ["cl=LOCAL_QUORUM", "-rate", f"threads={threads}"]
    if profile == "write":
        schema = f"-col n=FIXED(1) size=FIXED(32) -schema keyspace={keyspace} replication(factor=1)"
        return ["write", f"n={ops}", *common, *schema.split()]
    (path := workdir / "stress-profile.yaml").parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HOME_PROFILE.read_text().format(keyspace=keyspace, batch_rows=batch_rows))
    return ["user", f"profile={path}", "ops(insert=1)", f"n={ops // batch_rows}", *common]
