"""Large accounts, hybrid fan-out off and on, home reads by followed large accounts, and
the crossover: ``celebrity`` (docs/benchmark-methods.md)."""

from __future__ import annotations

import asyncio
import math
import random
import re
import subprocess
import time
import uuid
from typing import Any

from deploy.local.infra import InfraError
from fanline_shared import cassandra as cql
from fanline_tweet_store.hybrid import HybridPolicy

from .. import seed, stats
from ..context import BenchError, Ctx, say
from .reads import blocks

Follows = dict[str, list[str]]  # author -> followers

BUDGET_S = 1.0  # a large account's tweet readable by every follower within 1 s
REGISTRY_TTL_S = HybridPolicy.registry_ttl_s  # how long tweet-store serves its cached large-account registry


async def celebrity(ctx: Ctx, p: dict[str, Any]) -> None:
    tag, counts, s = ctx.tag, sorted(p["counts"]), ctx.rec.scope("celebrity")
    celebs = {n: f"a{tag}c{n}" for n in counts}
    ordinary = [f"a{tag}o{j}" for j in range(p["ordinary_authors"])]
    rng = random.Random(13)
    watchers = {n: [seed.celebrity_follower(tag, i) for i in sorted({0, n - 1, *rng.sample(range(1, n - 1), 3)})] for n in counts}
    followers_of = {
        a: [seed.celebrity_follower(tag, j * p["ordinary_followers"] + i) for i in range(p["ordinary_followers"])]
        for j, a in enumerate(ordinary)
    }
    await ctx.gather([ctx.sign_up(a) for a in [*celebs.values(), *ordinary]], 4)
    edges = [(seed.celebrity_follower(tag, i), celebs[n]) for n in counts for i in range(n)]
    edges += [(f, a) for a, fs in followers_of.items() for f in fs]
    accounts = sorted({w for ws in watchers.values() for w in ws})
    started = time.monotonic()
    rows = await asyncio.to_thread(seed.bulk_load_edges, ctx.session, ctx.social_ks, edges, accounts)
    s("seed_rows", rows)
    s("seed_s", time.monotonic() - started)
    for n, name in celebs.items():
        r = await ctx.http.get(f"{ctx.api}/v1/users/{name}")
        if r.status_code != 200 or r.json().get("followers_count") != n:
            raise BenchError(f"social-graph reports {r.text[:100]} for the {n:,}-follower celebrity")
    await ctx.gather([ctx.login(u, seed.POOL_PASSWORD) for u in accounts], 4)
    push, merged = list[tuple[float, float]](), list[float]()  # push: (followers, s to the last follower), hybrid off
    try:
        for mode in ("off", "on"):
            await ctx.restart_workers({"FANLINE_HYBRID_FANOUT": "true" if mode == "on" else "false"})
            for n in counts:
                readable = await _run(ctx, p, mode, n, celebs[n], watchers[n], followers_of)
                if readable and mode == "off":
                    push.append((n, min(readable)))
                elif readable and n >= p["threshold"]:
                    merged.append(stats.percentile(readable, 50))
            s("largest_partition_bytes", await asyncio.to_thread(_largest_partition, ctx), hybrid=mode)
        per_large = await _reads(ctx, p)
    finally:
        await ctx.restart_workers()
        await asyncio.to_thread(forget_large_accounts, ctx)
    cross = crossover(push)
    s("threshold", p["threshold"])
    s("crossover_followers", cross)
    s("threshold_log10_distance", abs(math.log10(p["threshold"] / cross)) if cross else None)
    s("merged_readable_s", stats.percentile(merged, 50) if merged else None)
    s("read_ms_per_large_account", per_large)


def forget_large_accounts(ctx: Ctx) -> None:
    """Empty tweet-store's large-account registry (harness only, like the seeding).

    The authors registered here stay registered for the retention period, so
    every later home read of the run (mixed, route_cost, saturation, overload)
    would ask social-graph for its reader's follows to merge them: on
    2026-11-28 that was 1.9 of the 6.9 CPU-s per 1,000 home reads, none of
    which the standard mix's population causes. Waits out the registry's cache."""
    ctx.session.execute(f"TRUNCATE {ctx.tweet_ks}.large_accounts")
    time.sleep(2 * REGISTRY_TTL_S)  # tweet-store's cached members have expired


def crossover(push: list[tuple[float, float]], budget_s: float = BUDGET_S) -> float | None:
    """Followers at which a pushed tweet reaches its last follower in ``budget_s``:
    piecewise linear between the measured counts (through the origin below the
    first, along the last segment above the last); None if never crossed."""
    prev = (0.0, 0.0)
    for n, t in sorted(push):
        if t >= budget_s:
            return prev[0] + (n - prev[0]) * (budget_s - prev[1]) / (t - prev[1]) if t > prev[1] else n
        prev = (n, t)
    if len(push) >= 2:
        (n1, t1), (n2, t2) = sorted(push)[-2:]
        return n2 + (n2 - n1) * (budget_s - t2) / (t2 - t1) if t2 > t1 else None
    return None


async def _run(ctx: Ctx, p: dict[str, Any], mode: str, n: int, celeb: str, watchers: list[str], ordinary: Follows) -> list[float]:
    """One follower count in one mode: the seconds each tweet took to reach the last watcher."""
    say(f"celebrity: {n:,} followers, hybrid {mode}")
    rows0, done, s = await ctx.rows_written(), asyncio.Event(), ctx.rec.scope("celebrity", followers=n, hybrid=mode)
    lag_task = asyncio.create_task(_ordinary(ctx, p, ordinary, done))
    await asyncio.sleep(2.0)  # the ordinary authors' lag before the celebrity posts, too
    posts, seen, posted = list[tuple[str, float, float]](), dict[str, dict[str, float]](), asyncio.Event()
    watch = asyncio.create_task(_watch(ctx, watchers, seen, posted, p["drain_timeout_s"]))
    t0 = time.monotonic()
    try:
        for k in range(p["posts"]):
            await asyncio.sleep(max(0.0, t0 + k * p["gap_s"] - time.monotonic()))
            ms, tid, when = await ctx.post_ours(celeb, f"celebrity {n} hybrid {mode} tweet {k}")
            seen.setdefault(tid, {})
            posts.append((tid, ms, when))
    finally:
        posted.set()
        await asyncio.gather(watch, return_exceptions=True)
        await asyncio.sleep(max(0.0, p["ordinary_min_s"] - (time.monotonic() - t0)))
        done.set()
        lags = await lag_task
    readable = [max(seen[t].values()) - when for t, _, when in posts if len(seen[t]) == len(watchers)]
    count = f"SELECT COUNT(*) AS n FROM {ctx.tweet_ks}.home_timeline WHERE owner_lc = ?"
    stmt = await asyncio.to_thread(cql.prepare, ctx.session, count)
    stored = [int((await cql.execute(ctx.session, stmt, (w.lower(),), name="bench_count"))[0].n) for w in watchers]
    s.dist("post_ms", [ms for _, ms, _ in posts], ("p99",))
    s.dist("readable_s", readable if len(readable) == len(posts) else [], ("min", "p50", "max"))
    s.dist("ordinary_lag_ms", lags, ("n", "p99"))
    s("written_rows", await ctx.rows_written() - rows0)
    s("stored_max_rows", max(stored))
    return readable


async def _watch(
    ctx: Ctx, watchers: list[str], seen: dict[str, dict[str, float]], posted: asyncio.Event, timeout_s: float
) -> None:
    """Fill ``seen`` (tweet -> watcher -> when it was first on the watcher's page) for
    the tweets the poster adds, until all are posted and every watcher has every one;
    polling every 0.1 s while the newest tweet is under 5 s old, then every 0.5 s."""
    started = time.monotonic()

    async def one(w: str) -> None:
        newest: tuple[str | None, float] = (None, time.monotonic())
        while (not posted.is_set() or any(w not in s for s in seen.values())) and time.monotonic() - started < timeout_s:
            if not (pending := [t for t, s in seen.items() if w not in s]):
                await asyncio.sleep(0.02)
                continue
            if pending[-1] != newest[0]:
                newest = (pending[-1], time.monotonic())
            r, now = await ctx.home(w, 50), time.time()
            if r.status_code == 200:  # 206 (regenerating) counts as not yet
                ids = {str(i["id"]) for i in r.json()["items"]}
                for t in pending:
                    if t in ids:
                        seen[t][w] = now
            await asyncio.sleep(0.1 if time.monotonic() - newest[1] < 5 else 0.5)

    await asyncio.gather(*(one(w) for w in watchers))
    if missing := sum(len(watchers) - len(s) for s in seen.values()):
        ctx.rec.scope("celebrity").note(f"{missing} (watcher, tweet) pairs never readable within {timeout_s:.0f} s")


async def _ordinary(ctx: Ctx, p: dict[str, Any], followers_of: Follows, done: asyncio.Event) -> list[float]:
    """Ordinary authors post in turn at ``ordinary_rate``/s until ``done``; each tweet's lag (ms)."""
    authors, posted, start, i = list(followers_of), [], time.monotonic(), 0
    while not done.is_set():
        await asyncio.sleep(max(0.0, start + i / p["ordinary_rate"] - time.monotonic()))
        _, tid, when = await ctx.post_ours(authors[i % len(authors)], f"ordinary tweet {i}")
        posted.append((authors[i % len(authors)], tid, when))
        i += 1
    lags, incomplete, deadline = [], 0, time.monotonic() + p["drain_timeout_s"]
    for author, tid, when in posted:
        owners = [author.lower(), *followers_of[author]]
        while len(rows := await ctx.home_rows(uuid.UUID(tid), owners)) < len(owners) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        if len(rows) < len(owners):
            incomplete += 1
        else:
            lags.append((max(rows.values()) / 1e6 - when) * 1000)
    if incomplete:
        ctx.rec.scope("celebrity").note(f"{incomplete} ordinary tweets never reached every follower")
    return lags


def _largest_partition(ctx: Ctx) -> float | None:
    """The largest compacted ``home_timeline`` partition (bytes; ``nodetool`` flush + tablestats)."""
    try:
        for args in (("flush", ctx.tweet_ks, "home_timeline"), ("tablestats", f"{ctx.tweet_ks}.home_timeline")):
            done = subprocess.run(ctx.infra.nodetool_command(*args), check=True, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError, InfraError) as exc:
        ctx.rec.scope("celebrity").note(f"nodetool failed: {exc}"[:300])
        return None
    m = re.search(r"Compacted partition maximum bytes:\s*([0-9]+)", done.stdout)
    return float(m.group(1)) if m else None


async def _reads(ctx: Ctx, p: dict[str, Any]) -> float | None:
    """Home reads by how many large accounts the reader follows (0, 10, 100):
    p50/p99 per group; returns the read cost per followed large account (ms, p50)."""
    tag, groups = ctx.tag, p["read_large"]
    large, fillers = [f"a{tag}L{k:03d}" for k in range(max(groups))], [f"a{tag}f{j}" for j in range(5)]
    readers = {g: [f"r{tag}_{g:03d}_{i:02d}" for i in range(p["read_large_readers"])] for g in groups}
    everyone = [r for rs in readers.values() for r in rs]
    await ctx.gather([ctx.sign_up(a) for a in [*large, *fillers]], 4)
    edges = [(r, f) for r in everyone for f in fillers]
    edges += [(r, large[k]) for g, rs in readers.items() for r in rs for k in range(g)]
    edges += [(seed.celebrity_follower(tag, i), a) for a in large for i in range(p["read_large_threshold"])]
    await asyncio.to_thread(seed.bulk_load_edges, ctx.session, ctx.social_ks, edges, everyone)
    await ctx.gather([ctx.login(u, seed.POOL_PASSWORD) for u in everyone], 4)
    hybrid = {"FANLINE_HYBRID_FANOUT": "true", "FANLINE_LARGE_ACCOUNT_FOLLOWERS": str(p["read_large_threshold"])}
    await ctx.restart_workers(hybrid)
    base = await ctx.rows_written()
    # fillers first (stored rows for every reader), then the large accounts (merged at read time)
    await ctx.gather([ctx.post_ours(f, f"filler {k}") for k in range(6) for f in fillers])
    await ctx.gather([ctx.post_ours(a, f"large {k}") for a in large for k in range(2)])
    await ctx.wait_rows(base + 6 * len(fillers) * (len(everyone) + 1) + 2 * len(large), p["drain_timeout_s"], "read-phase tweets")
    await asyncio.sleep(3 * REGISTRY_TTL_S)  # tweet-store's registry cache has seen every registration
    large_lc, merged_pages = {a.lower() for a in large}, dict.fromkeys(map(str, groups), 0)

    async def call(group: str, reader: str) -> float:
        started = time.perf_counter()
        r = await ctx.home(reader)
        took = (time.perf_counter() - started) * 1000
        items = r.json().get("items", []) if r.status_code in (200, 206) else []
        merged_pages[group] += any(str(i.get("author", i.get("username"))).lower() in large_lc for i in items)
        return took

    for g, rs in readers.items():  # warm-up
        for r in rs:
            await call(str(g), r)
    merged_pages = dict.fromkeys(merged_pages, 0)
    got = await blocks({str(g): rs for g, rs in readers.items()}, p["read_blocks"], p["read_rate"], p["read_block_s"], call)
    p50 = {}
    for g, runs in got.items():
        summary = ctx.rec.scope("celebrity").dist("home_read_ms", [x for b in runs for x in b], ("n", "p50", "p99"), large=g)
        ctx.rec.add("celebrity", "pages_with_large", merged_pages[g], large=g)
        p50[g] = summary.get("p50")
        if g != "0" and not merged_pages[g]:
            ctx.rec.scope("celebrity").note(f"no page of a reader following {g} large accounts held their tweets")
    return (ten - none) / 10 if (ten := p50.get("10")) is not None and (none := p50.get("0")) is not None else None
