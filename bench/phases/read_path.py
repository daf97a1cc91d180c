"""Read path: ``GET /v1/timeline`` against the raw CQL of the same page,
in alternating blocks at a fixed rate. Records ``timeline_read_ms`` and
``details.timeline_read``; raises ``BenchError`` if the readers' timelines
are not filled (run ``delivery_lag`` first)."""

from __future__ import annotations

import asyncio
import hashlib
import time

from .. import driver, procs, stats
from ..common import BenchError, say
from ..harness import Bench


async def run(bench: Bench) -> None:
    p = bench.plan
    say(f"read path: GET /v1/timeline vs raw CQL at {p.read_rate:g}/s, {p.read_blocks} × {p.read_block_s:.0f}s blocks each")
    raw = await asyncio.to_thread(driver.RawReader, bench.session, bench.tweet_ks, bench.social_ks)
    token_hashes = {u: hashlib.sha256(bench.tokens[u].encode()).hexdigest() for u in bench.readers}
    api_ms: list[float] = []
    raw_ms: list[float] = []
    raw_auth_ms: list[float] = []
    raw_slice_ms: list[float] = []
    short_pages = 0
    raw_short_pages = 0

    async def api_call(reader: str) -> float:
        nonlocal short_pages
        started = time.perf_counter()
        r = await bench.http.get(f"{bench.api}/v1/timeline", params={"limit": 20},
                                 headers={"authorization": f"Bearer {bench.tokens[reader]}"})
        took = (time.perf_counter() - started) * 1000
        if r.status_code != 200:
            raise BenchError(f"GET /v1/timeline: {r.status_code} {r.text[:200]}")
        if len(r.json()["items"]) < 20:
            short_pages += 1
        return took

    async def raw_call(reader: str, with_session: bool, hydrate: bool = True) -> float:
        nonlocal raw_short_pages
        started = time.perf_counter()
        found = await raw.page(reader, 20, token_hashes[reader] if with_session else None, hydrate=hydrate)
        took = (time.perf_counter() - started) * 1000
        if found < 20:  # the baseline must read what the API returns, or it measures nothing
            raw_short_pages += 1
        return took

    async def block(kind: str, sink: list[float]) -> None:
        n = int(p.read_rate * p.read_block_s)
        start = time.monotonic() + 0.2

        async def one(i: int) -> None:
            delay = start + i / p.read_rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            reader = bench.readers[i % len(bench.readers)]
            if kind == "api":
                sink.append(await api_call(reader))
            else:
                sink.append(await raw_call(reader, kind != "raw", hydrate=kind != "slice+session"))

        await asyncio.gather(*(one(i) for i in range(n)))

    # Warm up both paths.
    for reader in bench.readers:
        await api_call(reader)
        await raw_call(reader, True)
    assert bench.system is not None
    metrics_url = bench.system.url("tweet-store") + "/metrics"
    scraped_before = await asyncio.to_thread(procs.scrape_all, metrics_url)
    for b in range(p.read_blocks):
        for kind, sink in (("api", api_ms), ("raw", raw_ms), ("raw+session", raw_auth_ms),
                           ("slice+session", raw_slice_ms)):
            await block(kind, sink)
        say(f"  block {b + 1}/{p.read_blocks}: api p50 {stats.percentile(api_ms, 50):.2f} ms, "
            f"raw p50 {stats.percentile(raw_ms, 50):.2f} ms")
    scraped_after = await asyncio.to_thread(procs.scrape_all, metrics_url)

    def lookups(result: str) -> float:
        series = f'fanline_tweet_cache_lookups_total{{result="{result}"}}'
        return scraped_after.get(series, 0.0) - scraped_before.get(series, 0.0)

    hits, misses = lookups("hit"), lookups("miss")
    hit_ratio = round(hits / (hits + misses), 4) if hits + misses else None
    bench.doc["timeline_read_ms"] = {"api": stats.p50_p99(api_ms, 3), "raw": stats.p50_p99(raw_ms, 3),
                                     "rate_per_s": p.read_rate}
    bench.details["timeline_read"] = {
        "api_n": len(api_ms), "raw_n": len(raw_ms), "api": stats.summary(api_ms, 3), "raw": stats.summary(raw_ms, 3),
        "raw_with_session": stats.summary(raw_auth_ms, 3), "raw_slice_with_session": stats.summary(raw_slice_ms, 3),
        "tweet_cache": {"hits": int(hits), "misses": int(misses), "hit_ratio": hit_ratio},
        "short_pages": short_pages,
        "raw_short_pages": raw_short_pages,
        "method": (
            f"{len(bench.readers)} readers whose home timelines hold more than 20 tweets take turns. The API side "
            "times `GET /v1/timeline?limit=20` with a bearer token through the harness's httpx client (gateway → "
            "social-graph session check → tweet-store slice + multi-get → JSON back through the gateway). The raw "
            "side times, from the same process and event loop, the CQL tweet-store runs for that page: one "
            "`SELECT tweet_id … LIMIT 21` slice of `home_timeline` and the multi-get of the 20 tweets as "
            "`CassandraTweets.get_many` does it (concurrent single-partition reads, window 64), with the same "
            "prepared statements and driver bridge. A third series adds the `sessions` lookup that the "
            "gateway's authentication also costs, and a fourth only the session lookup and the slice — the CQL "
            "of a page whose tweets all come from tweet-store's hydration cache (`cache.py`; the API side's "
            "cache hits and misses during the phase are in `tweet_cache`). The raw baseline is the uncached "
            "page, as the issue defines it; with the cache the API runs less CQL than the baseline does. The "
            "four run in alternating blocks so drifting background load hits them alike; each request's "
            "latency is measured from its actual start."),
    }
    if short_pages:
        bench.notes.append(f"read path: {short_pages} timeline pages had fewer than 20 items")
    if raw_short_pages:
        bench.notes.append(f"read path: {raw_short_pages} raw CQL pages found fewer than 20 tweets")
    if short_pages + raw_short_pages > 0.05 * (len(api_ms) + len(raw_ms)):
        # Empty timelines read fast and prove nothing: the readers' timelines
        # are filled by the delivery-lag phase (run it first with --only).
        raise BenchError(f"read path: {short_pages} API and {raw_short_pages} raw pages were short of 20 "
                         "tweets; the readers' home timelines are not filled (run delivery_lag first)")
