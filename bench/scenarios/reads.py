"""The read path: home reads against their raw CQL and the Mastodon API's home against ``/v1``
(``read_path``), live streams (``streams``); docs/benchmark-methods.md."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from fanline_shared.http_pool import Answer, ConnectionPool

from .. import bare, probes, stats
from ..context import BenchError, Ctx, say

MASTODON_HOME = "/api/v1/timelines/home"


class LeanReader:
    """Home reads through the services' own keep-alive client (``http_pool``:
    httptools, one prebuilt request head per reader and path) rather than the
    harness's httpx. The raw reads beside them pay no client at all, and httpx
    alone cost ~1.7 ms more per call than this one against a server with
    nothing behind it (2.1 against 0.4 ms p50 here): that was a third of the
    API's p50, not the gateway's. ``api_httpx`` keeps the httpx figure."""

    def __init__(self, api: str, tokens: dict[str, str]) -> None:
        url = urlsplit(api)
        assert url.hostname is not None and url.port is not None, api
        self._pool = ConnectionPool(url.hostname, url.port)
        self._host, self._tokens, self._heads = f"{url.hostname}:{url.port}", tokens, dict[tuple[str, str], bytes]()

    async def home(self, reader: str, path: str, limit: int = 20) -> Answer:
        if (head := self._heads.get((reader, path))) is None:
            line = (
                f"GET {path}?limit={limit} HTTP/1.1\r\nhost: {self._host}\r\nauthorization: Bearer {self._tokens[reader]}\r\n\r\n"
            )
            head = self._heads[reader, path] = line.encode()
        return await self._pool.request(head, None, 60.0)

    def close(self) -> None:
        self._pool.close()


async def fill_timelines(ctx: Ctx) -> None:
    """The read authors' tweets posted, until every reader's timeline holds a page."""
    total, authors = ctx.params["seed"]["read_author_tweets"] * len(ctx.read_authors), ctx.read_authors
    await ctx.gather([ctx.post_ours(authors[i % len(authors)], f"read-path tweet {i}") for i in range(total)])
    raw = await asyncio.to_thread(bare.RawReader, ctx.session, ctx.tweet_ks, ctx.social_ks)
    deadline, pending = time.monotonic() + 300, ctx.home_readers
    while pending := [r for r in pending if await raw.page(r.lower(), hydrate=False) < 20]:
        if time.monotonic() > deadline:
            raise BenchError(f"{len(pending)} readers' timelines not filled after 300 s")
        await asyncio.sleep(0.5)


async def blocks(
    readers: dict[str, list[str]], rounds: int, rate: float, block_s: float, call: Callable[[str, str], Awaitable[float]]
) -> dict[str, list[list[float]]]:
    """``rounds`` rounds of one block per kind of ``readers`` (kind -> its readers, in turn):
    ``call(kind, reader)`` -> ms at ``rate``/s, open loop, each from its scheduled start."""
    out: dict[str, list[list[float]]] = {k: [] for k in readers}
    for r, kind in stats.interleaved(list(readers), rounds):
        start, sink = time.monotonic() + 0.2, list[float]()

        async def one(i: int, kind: str = kind, start: float = start, sink: list[float] = sink) -> None:
            await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            sink.append(await call(kind, readers[kind][i % len(readers[kind])]))

        await asyncio.gather(*(one(i) for i in range(int(rate * block_s))))
        out[kind].append(sink)
        if kind == list(readers)[-1]:
            say(f"  round {r + 1}: p50 " + ", ".join(f"{k} {stats.percentile(out[k][-1], 50):.2f}" for k in readers) + " ms")
    return out


async def read_path(ctx: Ctx, p: dict[str, Any]) -> None:
    from fanline_tweet_store.cache import DEFAULT_SIZE, DEFAULT_TTL_S

    s, short, pages = ctx.rec.scope("read_path"), {"api": 0, "raw": 0}, set[tuple[str, ...]]()
    await fill_timelines(ctx)
    size = int(ctx.env.get("FANLINE_TWEET_CACHE_SIZE", DEFAULT_SIZE))
    ttl = float(ctx.env.get("FANLINE_TWEET_CACHE_TTL_S", DEFAULT_TTL_S))
    raw = await asyncio.to_thread(bare.RawReader, ctx.session, ctx.tweet_ks, ctx.social_ks, size, ttl)
    hashes = {u: hashlib.sha256(ctx.tokens[u].encode()).hexdigest() for u in ctx.home_readers}
    kinds = ["api", "api_httpx", "raw", "raw_cached", "raw_session", "slice_session"]
    lean = LeanReader(ctx.api, ctx.tokens)
    if (code := (await ctx.home(ctx.home_readers[0], path=MASTODON_HOME)).status_code) != 200:  # issue 28 not there yet
        why = "endpoint absent" if code == 404 else "error"
        s("mastodon_not_measured", f"not measured: {why} (GET {MASTODON_HOME} answered {code})")
    else:
        kinds.insert(1, "mastodon")

    async def call(kind: str, reader: str) -> float:
        started = time.perf_counter()
        if kind == "api_httpx":
            if (r := await ctx.home(reader)).status_code != 200:
                raise BenchError(f"GET {r.url}: {r.status_code} {r.text[:200]}")
            return (time.perf_counter() - started) * 1000
        if kind in ("api", "mastodon"):
            path = "/v1/timeline" if kind == "api" else MASTODON_HOME
            if (answer := await lean.home(reader, path)).status != 200:
                raise BenchError(f"GET {path} as {reader}: {answer.status} {answer.body[:200]!r}")
            took = (time.perf_counter() - started) * 1000
            if kind == "api":
                pages.add(items := tuple(str(i["id"]) for i in json.loads(answer.body)["items"]))
                short["api"] += len(items) < 20
            return took
        session = hashes[reader] if "session" in kind else None
        found = await raw.page(reader.lower(), session, hydrate=kind != "slice_session", cached=kind == "raw_cached")
        short["raw"] += found < 20 and kind != "slice_session"
        return (time.perf_counter() - started) * 1000

    for reader in ctx.home_readers:  # warm-up: connections, prepared statements, both caches
        for kind in ("api", "api_httpx", "raw_session", "raw_cached", *(["mastodon"] if "mastodon" in kinds else [])):
            await call(kind, reader)
    raw.hits = raw.misses = 0
    before = await asyncio.to_thread(probes.scrape, url := ctx.system.metrics_url("tweet-store"))
    say(f"read path: {', '.join(kinds)} at {p['rate']:g}/s, {p['rounds']} rounds of {p['block_s']:g} s blocks")
    try:
        got = await blocks(dict.fromkeys(kinds, ctx.home_readers), p["rounds"], p["rate"], p["block_s"], call)
    finally:
        lean.close()
    after = await asyncio.to_thread(probes.scrape, url)
    for kind, runs in got.items():
        s.dist("latency_ms", [x for b in runs for x in b], path=kind)
    p50 = {k: [stats.percentile(b, 50) for b in runs] for k, runs in got.items()}
    least = [len(b) for runs in got.values() for b in runs]
    s.repeated("read_p50_vs_raw_cached", p50["api"], p50["raw_cached"], least)
    s.repeated("read_p50_vs_raw_cached_httpx", p50["api_httpx"], p50["raw_cached"], least)  # the figure before 2026-12-07
    s.repeated("read_p50_vs_raw_uncached", p50["api"], p50["raw"], least)
    if "mastodon" in p50:
        s.repeated("mastodon_vs_v1_p50", p50["mastodon"], p50["api"], least)
    hits, misses = (probes.increase(before, after, "fanline_tweet_cache_lookups_total", f'result="{r}"') for r in ("hit", "miss"))
    s("cache_hit_ratio", stats.ratio(hits, hits + misses), cache="tweet-store")
    s("cache_hit_ratio", stats.ratio(raw.hits, raw.hits + raw.misses), cache="raw")
    for name, value in (("rate_per_s", p["rate"]), ("readers", len(ctx.home_readers)), ("distinct_pages", len(pages))):
        s(name, value)
    for side, n in short.items():
        s("short_pages", n, side=side)
    if sum(short.values()) > 0.05 * sum(len(x) for runs in got.values() for x in runs):
        raise BenchError(f"read path: {short} pages short of 20 tweets; the readers' timelines are not filled")


async def _cpu_per_s(pids: dict[str, list[int]], seconds: float) -> dict[str, float]:
    def clocks() -> dict[str, float]:
        return {k: sum(probes.cpu_clocks({str(p): p for p in v}).values()) for k, v in pids.items()}

    before, t0 = clocks(), time.monotonic()
    await asyncio.sleep(seconds)
    return {k: (v - before[k]) / (time.monotonic() - t0) for k, v in clocks().items()}


async def streams(ctx: Ctx, p: dict[str, Any]) -> None:
    gateway, s, n = ctx.system.procs["api"].pid, ctx.rec.scope("streams"), p["streams"]
    s("load_1m", os.getloadavg()[0], at="start")
    say(f"streams: {p['authors']} authors and {n} stream owners, each following one author")
    authors = [f"s{ctx.tag}a{j}" for j in range(p["authors"])]
    owners = [f"s{ctx.tag}o{i}" for i in range(n)]
    await ctx.gather([ctx.sign_up(u) for u in authors + owners])
    pairs = [(f"{ctx.api}/v1/users/{o}/following/{authors[i % len(authors)]}", ctx.tokens[o]) for i, o in enumerate(owners)]
    follows = [ctx.http.put(url, headers={"authorization": f"Bearer {token}"}) for url, token in pairs]
    if bad := [r.status_code for r in await ctx.gather(follows) if r.status_code != 204]:
        raise BenchError(f"follows of the stream owners answered {bad[:3]}")
    await asyncio.sleep(2)
    rss0 = probes.status_kib(gateway, "VmRSS") or 0
    cpu_without = (await _cpu_per_s({"gateway": [gateway]}, p["idle_s"]))["gateway"]
    say(f"streams: opening {n} home streams from {p['readers']} client processes")
    pipe = asyncio.subprocess.PIPE
    argv = [sys.executable, "-m", "bench.stream_reader"]
    readers = [await asyncio.create_subprocess_exec(*argv, stdin=pipe, stdout=pipe, limit=1 << 28) for _ in range(p["readers"])]
    try:
        for k, proc in enumerate(readers):
            assert proc.stdin is not None and proc.stdout is not None
            tokens = [ctx.tokens[o] for o in owners[k :: p["readers"]]]
            proc.stdin.write(json.dumps({"api": ctx.api, "tokens": tokens}).encode() + b"\n")
        for proc in readers:
            if "opened" not in json.loads(await asyncio.wait_for(proc.stdout.readline(), 300) or "{}"):  # type: ignore[union-attr]
                raise BenchError(f"stream reader {proc.pid} failed")
        await asyncio.sleep(3)  # the gateway settles (following lists read, allocations done)
        rss_open, groups = probes.status_kib(gateway, "VmRSS") or 0, {"gateway": [gateway], "clients": [r.pid for r in readers]}
        idle_t0 = time.time()
        cpu_idle = await _cpu_per_s(groups, p["idle_s"])
        idle_t1, answered, begin = time.time(), {}, time.monotonic() + 0.2

        async def post(k: int) -> None:
            await asyncio.sleep(max(0.0, begin + k / p["rate"] - time.monotonic()))
            _, tid, done = await ctx.post_ours(authors[k % len(authors)], f"live {k}")
            answered[tid] = (done, k % len(authors))

        busy = asyncio.create_task(_cpu_per_s(groups, p["duration_s"]))
        await asyncio.gather(*(post(k) for k in range(int(p["rate"] * p["duration_s"]))))
        cpu_posting = await busy
        await asyncio.sleep(5)  # the last updates arrive
        reports = []
        for proc in readers:
            proc.stdin.close()  # type: ignore[union-attr]
            reports.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 300)))  # type: ignore[union-attr]
    finally:
        for proc in readers:
            if proc.returncode is None:
                proc.kill()
    arrived: dict[tuple[int, str], float] = {}
    for k, rep in enumerate(reports):
        for i, tid, t in rep["arrivals"]:
            arrived.setdefault((i * p["readers"] + k, tid), t)
    expected = [(i, t, done) for t, (done, j) in answered.items() for i in range(j, n, len(authors))]
    latencies = [max(0.0, arrived[i, t] - done) * 1000 for i, t, done in expected if (i, t) in arrived]
    comments = [times for rep in reports for times in rep["comments"]]
    beats = sum(1 for times in comments for t in times if idle_t0 <= t < idle_t1)
    gaps = [b - a for times in comments for a, b in itertools.pairwise([idle_t0, *(t for t in times if idle_t0 <= t < idle_t1)])]
    idle_cpu = max(0.0, cpu_idle["gateway"] - cpu_without)
    s("streams", n)
    s("rate_per_s", p["rate"])
    s.dist("update_latency_ms", latencies)
    s("idle_stream_kib", (rss_open - rss0) / n)
    s("idle_heartbeat_cpu_percent", 100 * idle_cpu)
    s("deliveries", len(expected), kind="expected")
    s("deliveries", len(latencies), kind="received")
    s("heartbeats", beats, kind="received")
    s("heartbeats", n * (idle_t1 - idle_t0) / p["heartbeat_s"], kind="expected")
    s("heartbeat_cpu_us", 1e6 * idle_cpu * (idle_t1 - idle_t0) / beats if beats else None)
    s("longest_heartbeat_wait_s", max(gaps, default=None))
    s("client_cpu_percent", 100 * cpu_idle["clients"], when="idle")
    s("client_cpu_percent", 100 * cpu_posting["clients"], when="posting")
    s("client_loop_lag_max_ms", max(r["loop_lag_max_ms"] for r in reports))
    s("streams_ended_early", sum(len(r["ended"]) for r in reports))
    s("load_1m", os.getloadavg()[0], at="end")
    say(f"  update p99 {stats.percentile(latencies or [0], 99):.0f} ms, {len(latencies)} deliveries")
