"""Read path: ``GET /v1/timeline`` against the raw CQL of the same page,
in alternating blocks at a fixed rate (issue 18: fair baselines, repeated).

Readers have distinct follow sets (``Bench.seed_home_readers``): the phase
first posts ``plan.read_author_tweets`` tweets per read author and waits until
every reader's timeline holds a page. The raw baseline runs both **uncached**
(every tweet read from Cassandra) and **with tweet-store's cache rules**
(``driver.RawReader(cache_size=…)``); each block round (api, raw uncached,
raw cached, raw + session, session + slice) gives one api ÷ raw ratio per
baseline: ``plan.read_blocks`` rounds, median with min-max. Records
``timeline_read_ms`` (``raw`` is the uncached baseline, as before),
``fair.timeline_read_ms``, ``ratios.read_p50_vs_raw_cached`` /
``read_p50_vs_raw_uncached`` and ``details.timeline_read``."""

from __future__ import annotations

import asyncio
import hashlib
import time

from .. import driver, prometheus, stats
from ..common import BenchError, say
from ..harness import Bench

KINDS = ("api", "raw", "raw_cached", "raw+session", "slice+session")


async def fill_timelines(bench: Bench, page: int = 20, timeout_s: float = 300) -> int:
    """Post the read authors' tweets and wait until every reader's home
    timeline holds ``page`` ids; the tweets posted."""
    p = bench.plan

    async def one(i: int) -> None:
        author = bench.read_authors[i % len(bench.read_authors)]
        await bench.post_ours(author, f"read-path tweet {i} by {author}")

    total = p.read_author_tweets * len(bench.read_authors)
    await bench.gather_limited([one(i) for i in range(total)], 8)
    raw = await asyncio.to_thread(driver.RawReader, bench.session, bench.tweet_ks, bench.social_ks)
    deadline = time.monotonic() + timeout_s
    pending = list(bench.home_readers)
    while pending:
        counts = await asyncio.gather(*(raw.page(r.lower(), page, hydrate=False) for r in pending))
        pending = [r for r, n in zip(pending, counts, strict=True) if n < page]
        if pending and time.monotonic() > deadline:
            raise BenchError(f"read path: {len(pending)} readers' timelines not filled after {timeout_s:.0f}s")
        if pending:
            await asyncio.sleep(0.5)
    return total


async def run(bench: Bench) -> None:
    p = bench.plan
    from fanline_tweet_store.cache import DEFAULT_SIZE, DEFAULT_TTL_S

    env = dict(item.split("=", 1) for item in bench.args.env)
    cache_size = int(env.get("FANLINE_TWEET_CACHE_SIZE", DEFAULT_SIZE))
    cache_ttl = float(env.get("FANLINE_TWEET_CACHE_TTL_S", DEFAULT_TTL_S))
    say(f"read path: {len(bench.home_readers)} readers with distinct follow sets; filling their timelines")
    posted = await fill_timelines(bench)
    readers = bench.home_readers
    say(
        f"read path: GET /v1/timeline vs raw CQL (uncached and cached) at {p.read_rate:g}/s, "
        f"{p.read_blocks} rounds × {len(KINDS)} blocks of {p.read_block_s:.0f}s"
    )
    raw = await asyncio.to_thread(
        driver.RawReader, bench.session, bench.tweet_ks, bench.social_ks, cache_size=cache_size, cache_ttl_s=cache_ttl
    )
    token_hashes = {u: hashlib.sha256(bench.tokens[u].encode()).hexdigest() for u in readers}
    per_round: dict[str, list[list[float]]] = {k: [] for k in KINDS}
    short_pages = 0
    raw_short_pages = 0
    distinct_pages: set[tuple[str, ...]] = set()

    async def api_call(reader: str) -> float:
        nonlocal short_pages
        started = time.perf_counter()
        r = await bench.http.get(
            f"{bench.api}/v1/timeline", params={"limit": 20}, headers={"authorization": f"Bearer {bench.tokens[reader]}"}
        )
        took = (time.perf_counter() - started) * 1000
        if r.status_code != 200:
            raise BenchError(f"GET /v1/timeline: {r.status_code} {r.text[:200]}")
        items = r.json()["items"]
        if len(items) < 20:
            short_pages += 1
        distinct_pages.add(tuple(str(i.get("id")) for i in items))
        return took

    async def raw_call(reader: str, kind: str) -> float:
        nonlocal raw_short_pages
        started = time.perf_counter()
        found = await raw.page(
            reader.lower(),
            20,
            token_hashes[reader] if "session" in kind else None,
            hydrate=kind != "slice+session",
            cached=kind == "raw_cached",
        )
        took = (time.perf_counter() - started) * 1000
        if found < 20 and kind != "slice+session":  # the baseline must read what the API returns
            raw_short_pages += 1
        return took

    async def block(kind: str) -> list[float]:
        n = int(p.read_rate * p.read_block_s)
        start = time.monotonic() + 0.2
        sink: list[float] = []

        async def one(i: int) -> None:
            delay = start + i / p.read_rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            reader = readers[i % len(readers)]
            sink.append(await api_call(reader) if kind == "api" else await raw_call(reader, kind))

        await asyncio.gather(*(one(i) for i in range(n)))
        return sink

    # Warm up every path (connections, prepared statements, both caches).
    for reader in readers:
        await api_call(reader)
        await raw_call(reader, "raw+session")
        await raw_call(reader, "raw_cached")
    raw.hits = raw.misses = 0
    assert bench.system is not None
    metrics_url = bench.system.url("tweet-store") + "/metrics"
    scraped_before = await asyncio.to_thread(prometheus.scrape_all, metrics_url)
    for r, kind in stats.interleaved(KINDS, max(1, p.read_blocks)):
        per_round[kind].append(await block(kind))
        if kind == KINDS[-1]:
            say(
                f"  round {r + 1}/{p.read_blocks}: p50 api {stats.percentile(per_round['api'][-1], 50):.2f} ms, "
                f"raw {stats.percentile(per_round['raw'][-1], 50):.2f}, "
                f"raw cached {stats.percentile(per_round['raw_cached'][-1], 50):.2f}"
            )
    scraped_after = await asyncio.to_thread(prometheus.scrape_all, metrics_url)

    def lookups(result: str) -> float:
        series = f'fanline_tweet_cache_lookups_total{{result="{result}"}}'
        return scraped_after.get(series, 0.0) - scraped_before.get(series, 0.0)

    def pooled(kind: str) -> list[float]:
        return [x for block_ms in per_round[kind] for x in block_ms]

    def p50s(kind: str) -> list[float | None]:
        return [stats.percentile(b, 50) if b else None for b in per_round[kind]]

    hits, misses = lookups("hit"), lookups("miss")
    hit_ratio = round(hits / (hits + misses), 4) if hits + misses else None
    raw_lookups = raw.hits + raw.misses
    api_ms, raw_ms, cached_ms = pooled("api"), pooled("raw"), pooled("raw_cached")
    bench.doc["timeline_read_ms"] = {"api": stats.p50_p99(api_ms, 3), "raw": stats.p50_p99(raw_ms, 3), "rate_per_s": p.read_rate}
    bench.doc.setdefault("fair", {})["timeline_read_ms"] = {
        "api": stats.p50_p99(api_ms, 3),
        "raw_cached": stats.p50_p99(cached_ms, 3),
        "raw_uncached": stats.p50_p99(raw_ms, 3),
        "rate_per_s": p.read_rate,
    }
    samples = [len(b) for k in ("api", "raw", "raw_cached") for b in per_round[k]]
    ratios = bench.doc.setdefault("ratios", {})
    ratios["read_p50_vs_raw_cached"] = stats.repeated_ratio(p50s("api"), p50s("raw_cached"), samples)
    ratios["read_p50_vs_raw_uncached"] = stats.repeated_ratio(p50s("api"), p50s("raw"), samples)
    bench.details["timeline_read"] = {
        "api_n": len(api_ms),
        "raw_n": len(raw_ms),
        "raw_cached_n": len(cached_ms),
        "api": stats.summary(api_ms, 3),
        "raw": stats.summary(raw_ms, 3),
        "raw_cached": stats.summary(cached_ms, 3),
        "raw_with_session": stats.summary(pooled("raw+session"), 3),
        "raw_slice_with_session": stats.summary(pooled("slice+session"), 3),
        "tweet_cache": {"hits": int(hits), "misses": int(misses), "hit_ratio": hit_ratio},
        "raw_cache": {
            "hits": raw.hits,
            "misses": raw.misses,
            "hit_ratio": round(raw.hits / raw_lookups, 4) if raw_lookups else None,
            "size": cache_size,
            "ttl_s": cache_ttl,
        },
        "readers": len(readers),
        "distinct_follow_sets": len({tuple(v) for v in bench.follow_sets.values()}),
        "distinct_pages_seen": len(distinct_pages),
        "tweets_posted": posted,
        "short_pages": short_pages,
        "raw_short_pages": raw_short_pages,
        "method": (
            f"{len(readers)} readers, each following a **different** set of {p.reader_follows} of "
            f"{len(bench.read_authors)} authors (no two readers share a follow set), take turns; "
            f"{posted} tweets from those authors were posted through the API and fanned out first, so the pages "
            f"differ between readers ({len(distinct_pages)} distinct pages seen). The API side times "
            "`GET /v1/timeline?limit=20` with a bearer token through the harness's httpx client (gateway → "
            "social-graph session check → tweet-store slice + multi-get through its tweet cache → JSON back "
            "through the gateway). The raw side times, from the same process and event loop, the CQL tweet-store "
            "runs for that page: one `SELECT tweet_id … LIMIT 21` slice of `home_timeline` and the multi-get of "
            "the 20 tweets as `CassandraTweets.get_many` does it (concurrent single-partition reads, window 64). "
            "It runs **uncached** (every tweet read) and **cached with tweet-store's rules** (the same "
            f"`cachetools.TTLCache` of {cache_size:,} tweets kept {cache_ttl:g} s, read-through, unknown ids not "
            "cached; tweet-store also keeps the tweets it writes, which the harness's cache never sees, so its "
            "misses are if anything more). Two more series add the `sessions` lookup the gateway's "
            "authentication also costs, and only the session lookup and the slice. The five run in "
            f"alternating blocks ({p.read_blocks} rounds: api, raw, raw cached, raw + session, session + slice, "
            "then again), and each round gives one api ÷ raw p50 ratio per baseline, reported as median with "
            "min-max; each request's latency is measured from its actual start."
        ),
    }
    if short_pages:
        bench.notes.append(f"read path: {short_pages} timeline pages had fewer than 20 items")
    if raw_short_pages:
        bench.notes.append(f"read path: {raw_short_pages} raw CQL pages found fewer than 20 tweets")
    if short_pages + raw_short_pages > 0.05 * (len(api_ms) + len(raw_ms) + len(cached_ms)):
        raise BenchError(
            f"read path: {short_pages} API and {raw_short_pages} raw pages were short of 20 "
            "tweets; the readers' home timelines are not filled"
        )
