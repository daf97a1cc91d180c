"""The write path as users see it: post latency against the synchronous baseline and its curve to
100,000 followers (``post_latency``), delivery lag (``delivery_lag``); docs/benchmark-methods.md."""

from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from typing import Any

from fanline_shared import cassandra as cql

from .. import openloop, probes, stats
from ..context import BenchError, Ctx, say, skip_to_end, stop_process
from ..rows import Scope
from ..system import spawn, wait_ready
from .fanout import batch_rows
from .open_loop import quiet

Sent = list[tuple[str, str, float]]  # (author, tweet id, when its 201 came)
SYSTEMS = {"running": ("ours", "running"), "stopped": ("ours", "stopped"), "sync": ("sync", "stopped")}


async def post_latency(ctx: Ctx, p: dict[str, Any]) -> None:
    s, port = ctx.rec.scope("post_latency"), ctx.args.base_port + 20
    sync_url, groups, curve = f"http://127.0.0.1:{port}/tweets", list(p["followers"]), list(p["curve"])
    argv = f"-m bench.sync_baseline {port} {ctx.sync_ks} {ctx.system.url('social-graph')} {ctx.best[1]} {batch_rows(ctx)}".split()
    ctx.sync_proc = proc = spawn([sys.executable, *argv], ctx.logs / "sync-baseline.log", ctx.system.env())
    await asyncio.to_thread(wait_ready, f"http://127.0.0.1:{port}/healthz", proc, 60, "the synchronous baseline")
    author = {n: [ctx.post_author(0 if n in curve else r, n) for r in range(p["rounds"])] for n in groups + curve}
    for a in dict.fromkeys(a for names in author.values() for a in names):  # warm-up, not counted
        await ctx.post_ours(a, "warm-up")
        await ctx.post(sync_url, a, "warm-up")
    samples: dict[tuple[str, int], list[list[float]]] = {(k, n): [] for k in SYSTEMS for n in groups + curve}
    done = -await ctx.rows_written()  # rows the workers wrote in the phase, across restarts (each counts from zero)
    offered = sum(n + 1 for n in groups) * p["rounds"] + len(curve)  # the warm-ups (the curve's: the author's own row)
    own, last, speeds, during = {n: Sent() for n in groups}, dict[str, str](), list[float | None](), 0.0
    services = {n: ctx.system.metrics_url(n) for n in ("api", "tweet-store", "social-graph")}
    before = await asyncio.to_thread(lambda: {n: probes.scrape(url) for n, url in services.items()})
    for r, kind in stats.interleaved(list(SYSTEMS), p["rounds"]):
        if kind == "stopped":  # and stays stopped through the baseline's block
            done += await ctx.rows_written()
            await asyncio.to_thread(ctx.system.stop_workers)
        elif r > 0 and kind == "running":
            await _resume(ctx, s, r)
        block: dict[int, list[float]] = {n: [] for n in (groups if kind == "running" else groups + curve)}
        rows0, t0, i = done + await ctx.rows_written(), time.monotonic(), 0
        while pending := [n for n in block if len(block[n]) < p["curve_samples" if n in curve else "samples"]]:
            for n in random.sample(pending, len(pending)):
                if kind == "sync":
                    ms, _, _ = await ctx.post(sync_url, author[n][r], f"sync post {i}")
                else:
                    ms, tid, when = await ctx.post_ours(author[n][r], f"post {i} ({kind}, round {r + 1})")
                    if kind == "running":  # B's events are skipped (_resume): only A's rows are offered
                        offered += n + 1
                        last[author[n][r]] = tid
                        own[n].append((author[n][r], tid, when))
                block[n].append(ms)
                i += 1
                await asyncio.sleep(p["gap_s"])
        if kind == "running":
            delivered = done + await ctx.rows_written() - rows0
            during += delivered
            speeds.append(delivered / (time.monotonic() - t0))
            s("fanout_rows_per_s", speeds[-1], round=r + 1)
            await _catch_up(ctx, s, p, r, done, offered, last)
        for n, got in block.items():
            samples[kind, n].append(got)
        say(f"  round {r + 1} ({kind}): p99 " + ", ".join(f"{n}: {stats.percentile(ms, 99):.0f} ms" for n, ms in block.items()))
    await _resume(ctx, s, p["rounds"])
    s("offered_rows", offered)
    s("delivered_during_blocks_rows", during)
    after = await asyncio.to_thread(lambda: {n: probes.scrape(url) for n, url in services.items()})
    ctx.system.peak_kib["sync-baseline"] = probes.status_kib(proc.pid, "VmHWM") or 0
    stop_process(proc)
    ctx.sync_proc = None
    for (kind, n), blocks in samples.items():
        if blocks:
            s.dist("latency_ms", [x for b in blocks for x in b], followers=n, system=SYSTEMS[kind][0], worker=SYSTEMS[kind][1])

    def ratio(name: str, a: tuple[str, int], b: tuple[str, int]) -> None:
        """Round by round: the p99 of ``a``'s block over ``b``'s."""
        nums, dens = ([stats.percentile(block, 99) for block in samples[side]] for side in (a, b))
        s.repeated(name, nums, dens, [len(block) for block in (*samples[a], *samples[b])])

    top = max(groups)
    ratio("post_p99_10000_vs_0", ("running", top), ("running", 0))
    ratio("post_p99_running_vs_stopped", ("running", top), ("stopped", top))
    ratio("sync_vs_ours_p99_10000", ("sync", top), ("running", top))
    idle = ctx.lookup("scaling", "worker_rows_per_s", workers=1, stat="median")
    s.repeated("fanout_speed_during_posts_vs_idle", speeds, [idle] * len(speeds))
    for n in [n for n in groups + curve if n >= 1000]:  # the baseline's curve, the worker stopped on both sides
        sync, ours = ([x for b in samples[k, n] for x in b] for k in ("sync", "stopped"))
        for q in (50, 99) if sync and ours else ():
            s(f"sync_vs_ours_p{q}", stats.ratio(stats.percentile(sync, q), stats.percentile(ours, q)), followers=n)
    for service, histogram, filters in p["breakdown"]:
        for series, count, mean in probes.means(before[service], after[service], histogram, filters):
            s("mean_ms", mean, service=service, series=series)
            s("count", count, "", service=service, series=series)
    await _lags(ctx, s, p, own)


async def _resume(ctx: Ctx, s: Scope, r: int) -> None:
    """The worker again after a round's blocks B and C (it was stopped through both), past
    their events: the rows of posts timed with the worker stopped are work no figure reads
    (20 million rows, a 1,036 s drain in run 4c97), and block A is measured from the worker's
    own backlog alone. Each block A's rows are all delivered (_catch_up) before it stops."""
    env = ctx.system.env()
    skipped = await skip_to_end(ctx.infra.kafka_bootstrap, env["FANLINE_WORKER_GROUP"], env["FANLINE_EVENTS_TOPIC"])
    s("skipped_events", skipped, "", round=r)
    await asyncio.to_thread(ctx.system.start_workers, 1)


async def _catch_up(ctx: Ctx, s: Scope, p: dict[str, Any], r: int, done: float, offered: int, last: dict[str, str]) -> None:
    """Until the worker has delivered every row offered so far (the counters miss the warm-ups'
    rows written before the phase counted from them: it also ends once each author's last tweet
    is in every follower's timeline) and committed its offsets: nothing of block A is skipped."""
    t0 = checked = time.monotonic()
    while done + await ctx.rows_written() < offered:
        if time.monotonic() - checked >= 5:
            checked = time.monotonic()
            if await ctx.delivered(list(last.items())):
                break
        if time.monotonic() - t0 > p["drain_timeout_s"]:
            s.note(f"round {r + 1}: the workers counted {done + await ctx.rows_written():,.0f} of {offered:,} rows in time")
            break
        await asyncio.sleep(0.5)
    await asyncio.to_thread(openloop.drain_workers, ctx.system.metrics_urls(), p["drain_timeout_s"])
    s("catch_up_s", time.monotonic() - t0, round=r + 1)


async def _lags(ctx: Ctx, s: Scope, p: dict[str, Any], own: dict[int, Sent]) -> None:
    """The lag of a sample of block A's tweets, row by row, once all of them are delivered."""
    missing = trimmed = 0
    for n, tweets in own.items():
        lags = []
        for a, tid, when in tweets[:: max(1, len(tweets) // p["lag_sample"])][: p["lag_sample"]]:
            rows = await ctx.home_rows(uuid.UUID(tid), owners := [a.lower(), *ctx.graph.followers_of(a)])
            if absent := [o for o in owners if o not in rows]:
                # a follower of several post authors holds more than the cap: trimmed, not lost
                cut = await ctx.trimmed(uuid.UUID(tid), absent)
                trimmed += len(cut)
                missing += len(cut) < len(absent)
                continue
            lags.append((max(rows.values()) / 1e6 - when) * 1000)
        s.dist("lag_ms", lags, followers=n)
    s("sampled_rows_trimmed", trimmed, "")
    s("sampled_tweets_missing", missing, "")
    if missing:
        s.note(f"{missing} sampled tweets were missing home rows after the drain (not trimmed by the row cap)")


async def delivery_lag(ctx: Ctx, p: dict[str, Any]) -> None:
    # it follows post_latency's tens of millions of rows: start from idle workers and no compaction
    await quiet(ctx, "delivery_lag")
    runs = [("steady", p["rate"], p["duration_s"], 0.0), ("reads", p["reads_rate"], p["reads_duration_s"], p["reads_per_s"])]
    for run, rate, duration, reads in [*runs, *((f"sweep {r:g}/s", r, p["sweep_duration_s"], 0.0) for r in p["sweep_rates"])]:
        await _run(ctx, ctx.rec.scope("delivery_lag", run=run), rate, duration, reads)


async def _reads(ctx: Ctx, rate: float, stop: asyncio.Event) -> tuple[list[float], int, float]:
    """GET /v1/timeline at ``rate``/s, open loop, until ``stop``: latencies, errors, achieved rate."""
    latencies, errors, tasks, t0, i = list[float](), 0, set(), time.monotonic(), 0

    async def one(reader: str) -> None:
        nonlocal errors
        started = time.perf_counter()
        try:
            ok = (await ctx.home(reader)).status_code == 200
        except Exception:  # noqa: BLE001 - counted, the load goes on
            ok = False
        if ok:
            latencies.append((time.perf_counter() - started) * 1000)
        errors += not ok

    while not stop.is_set():
        if (delay := t0 + i / rate - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(stop.wait(), delay)
                break
            except TimeoutError:
                pass
        task = asyncio.create_task(one(ctx.readers[i % len(ctx.readers)]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        i += 1
    elapsed = time.monotonic() - t0
    await asyncio.gather(*tasks)
    return latencies, errors, len(latencies) / elapsed


async def _run(ctx: Ctx, s: Scope, rate: float, duration_s: float, reads_per_s: float) -> list[float]:
    total = int(rate * duration_s)
    say(f"delivery lag: {total} tweets at {rate:g}/s to 1,000 followers" + (f", {reads_per_s:g} reads/s" if reads_per_s else ""))
    text = f"SELECT tweet_id FROM {ctx.tweet_ks}.home_timeline WHERE owner_lc = ? AND tweet_id = ?"
    read = await asyncio.to_thread(cql.prepare, ctx.session, text)
    followers = ctx.graph.followers_of(ctx.lag_authors[0])  # the same for every lag author
    polled, answered, refused = dict[str, float](), dict[str, tuple[float, str]](), 0

    async def one(i: int, at: float) -> None:
        nonlocal refused
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        author = ctx.lag_authors[i % len(ctx.lag_authors)]
        try:
            _, tid, when = await ctx.post_ours(author, f"lag tweet {i} at {rate:g}/s")
        except BenchError as exc:
            if not exc.shed:
                raise
            refused += 1  # shed by admission control: counted, not a crash
            return
        answered[tid] = (when, author)
        pending, deadline = [followers[-1], *random.sample(followers[:-1], 4)], time.monotonic() + 120
        while pending and time.monotonic() < deadline:
            keys = [(o, uuid.UUID(tid)) for o in pending]
            found = await cql.execute_concurrent(ctx.session, read, keys, name="bench_lag", concurrency=8)
            pending = [o for o, rows in zip(pending, found, strict=True) if not rows]
            await asyncio.sleep(0.02 if pending else 0)
        if not pending:
            polled[tid] = time.time()

    stop = asyncio.Event()
    reader = asyncio.create_task(_reads(ctx, reads_per_s, stop)) if reads_per_s else None
    start = time.monotonic() + 0.5
    try:
        await asyncio.gather(*(one(i, start + i / rate) for i in range(total)))
    finally:
        stop.set()
        read_figures = await reader if reader is not None else None
    lags, incomplete = [], 0
    for tid, (when, author) in answered.items():
        rows = await ctx.home_rows(uuid.UUID(tid), [author.lower(), *followers])
        if len(rows) <= len(followers) or tid not in polled:
            incomplete += 1
        else:
            lags.append(max(max(rows.values()) / 1e6 - when, polled[tid] - when) * 1000)
    for name, value in (("rate_per_s", rate), ("tweets", len(answered)), ("incomplete", incomplete), ("refused", refused)):
        s(name, value)
    s.dist("lag_ms", lags)
    if read_figures is not None:
        latencies, errors, achieved = read_figures
        s("reads_per_s", reads_per_s)
        s("reads_per_s_achieved", achieved)
        s("read_errors", errors)
        s.dist("read_ms", latencies, ("p50", "p99"))
    if refused or incomplete:
        s.note(f"{refused} posts refused with 503, {incomplete} tweets not in every follower's timeline")
    if lags:
        say(f"  lag p50 {stats.percentile(lags, 50):,.0f} ms, p99 {stats.percentile(lags, 99):,.0f} ms ({len(lags)} tweets)")
    return lags
