"""Delivery lag: 1,000-follower tweets posted at a steady rate (and at the
sweep's higher rates), each timed until it is in every follower's home
timeline. Records ``delivery_lag_ms`` and ``details.delivery_lag`` (and
``details.delivery_lag_sweep``). Then (issue 18) the same at
``plan.lag_reads_rate`` tweets/s with ``plan.lag_reads_per_s`` home-timeline
reads/s running (open loop, by followers of the posting authors): records
``delivery_lag_reads_ms`` with the read rate actually achieved."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

from fanline_shared import cassandra as cql

from .. import stats
from ..common import BenchError, say
from ..harness import Bench


async def run(bench: Bench) -> None:
    p = bench.plan
    lags, head = await _lag_run(bench, p.lag_rate, p.lag_duration_s)
    bench.doc["delivery_lag_ms"] = {
        "followers": 1000,
        "rate_per_s": p.lag_rate,
        **(stats.p50_p99(lags, 1) or {"p50": None, "p99": None}),
    }
    bench.details["delivery_lag"] = {
        **head,
        "samples_ms": [round(x, 1) for x in lags],
        "method": (
            f"{len(bench.lag_authors)} authors, each followed by the same 1,000 accounts, post in turn at a steady "
            f"{p.lag_rate:g} tweets/s (open loop) for {p.lag_duration_s:.0f} s while one worker runs. For each "
            "tweet, from the moment its 201 arrives: (a) the harness reads a sample of five followers' home "
            "timelines in Cassandra every 20 ms (the last follower in name order, whose page is written last, "
            "and four at random) until the tweet is in all five; (b) afterwards it reads all 1,001 rows "
            "(followers + author) with their `WRITETIME`, which is when tweet-store issued each write. A tweet's "
            "lag is the later of the two — the last of its 1,001 rows written, and readable in the sampled "
            "timelines — so every follower is covered and the figure errs on the slow side. Tweets missing any "
            "row at the end count as incomplete."
        ),
    }
    await run_with_reads(bench)
    # The same measurement at higher posting rates, one after another
    # (each starts once the previous one's tweets are all delivered): where
    # the lag starts to grow is the fan-out's capacity while it yields.
    if not p.lag_sweep_rates:
        return
    runs = [{"rate_per_s": p.lag_rate, **head}]
    for rate in p.lag_sweep_rates:
        _, run = await _lag_run(bench, rate, p.lag_sweep_duration_s)
        runs.append({"rate_per_s": rate, **run})
    rates = ", ".join(f"{r:g}" for r in p.lag_sweep_rates)
    bench.details["delivery_lag_sweep"] = {
        "runs": runs,
        "method": (
            f"After the run above, the same authors and followers post at {rates} tweets/s for "
            f"{p.lag_sweep_duration_s:.0f} s each, measured the same way. Only the posting rate changes: each "
            "1,000-follower tweet is 1,001 home-timeline rows, so N tweets/s ask the fan-out for about "
            "N × 1,000 rows/s while tweet-store is also serving the posts. A lag that grows through a run "
            "instead of settling means the rate is above what the fan-out delivers while it yields to users."
        ),
    }


async def run_with_reads(bench: Bench) -> None:
    """Delivery lag while users read: ``lag_reads_rate`` tweets/s to 1,000
    followers with ``lag_reads_per_s`` GET /v1/timeline requests/s running."""
    p = bench.plan
    lags, head = await _lag_run(bench, p.lag_reads_rate, p.lag_reads_duration_s, reads_per_s=p.lag_reads_per_s)
    bench.doc["delivery_lag_reads_ms"] = {
        "followers": 1000,
        "rate_per_s": p.lag_reads_rate,
        "reads_per_s": p.lag_reads_per_s,
        "reads_per_s_achieved": head.get("reads", {}).get("achieved_per_s"),
        "posts_refused": head["posts_refused"],
        "read_errors": head.get("reads", {}).get("errors"),
        **(stats.p50_p99(lags, 1) or {"p50": None, "p99": None}),
        "n": len(lags),
    }
    bench.details["delivery_lag_reads"] = {
        **head,
        "method": (
            f"As above, at {p.lag_reads_rate:g} tweets/s for {p.lag_reads_duration_s:.0f} s, while the harness "
            f"sends {p.lag_reads_per_s:g} `GET /v1/timeline?limit=20` requests/s (open loop: each at its "
            f"scheduled time, whatever the answers) as {len(bench.readers)} followers of the posting authors, "
            "in turn. tweet-store paces the fan-out while it serves reads, so this is the lag users see on a "
            "service people are reading; the read rate actually achieved and the reads' latency are reported "
            "beside it."
        ),
    }


async def _reads(bench: Bench, rate: float, stop: asyncio.Event) -> dict[str, Any]:
    """GET /v1/timeline at ``rate``/s (open loop) until ``stop``; a summary."""
    latencies: list[float] = []
    errors = 0
    tasks: set[asyncio.Task[None]] = set()

    async def one(reader: str) -> None:
        nonlocal errors
        started = time.perf_counter()
        try:
            r = await bench.http.get(
                f"{bench.api}/v1/timeline", params={"limit": 20}, headers={"authorization": f"Bearer {bench.tokens[reader]}"}
            )
            if r.status_code != 200:
                errors += 1
                return
        except Exception:  # noqa: BLE001 - counted, the load goes on
            errors += 1
            return
        latencies.append((time.perf_counter() - started) * 1000)

    t0 = time.monotonic()
    i = 0
    while not stop.is_set():
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), delay)
                break
            except TimeoutError:
                pass
        task = asyncio.create_task(one(bench.readers[i % len(bench.readers)]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        i += 1
    elapsed = time.monotonic() - t0
    if tasks:
        await asyncio.gather(*tasks)
    return {
        "target_per_s": rate,
        "sent": i,
        "answered": len(latencies),
        "errors": errors,
        "achieved_per_s": round(len(latencies) / elapsed, 1) if elapsed > 0 else None,
        "latency_ms": stats.summary(latencies, 2),
    }


async def _lag_run(bench: Bench, rate: float, duration_s: float, reads_per_s: float = 0.0) -> tuple[list[float], dict[str, Any]]:
    """Post ``rate`` tweets/s for ``duration_s`` from the lag authors and
    time each one until it is in every follower's home timeline (with
    ``reads_per_s`` home reads/s running meanwhile): the lags of the complete
    tweets (ms) and a summary of the run."""
    total = int(rate * duration_s)
    say(
        f"delivery lag: {total} tweets from {len(bench.lag_authors)} authors with 1,000 followers, "
        f"{rate:g}/s for {duration_s:.0f}s"
    )
    read = await asyncio.to_thread(
        cql.prepare, bench.session, f"SELECT tweet_id FROM {bench.tweet_ks}.home_timeline WHERE owner_lc = ? AND tweet_id = ?"
    )
    followers = bench.graph.followers_of(bench.lag_authors[0])  # the same 1,000 for every lag author
    polled: dict[str, float] = {}
    answered: dict[str, tuple[float, str]] = {}
    lateness: list[float] = []
    refused: list[str] = []

    async def watch(tid: str) -> None:
        """Live reads of a sample of followers (the last in name order, whose
        page is written last, plus random ones) until all have the row."""
        sample = [followers[-1], *random.sample(followers[:-1], 4)]
        tweet_id = uuid.UUID(tid)
        deadline = time.monotonic() + 120
        pending = list(sample)
        while pending and time.monotonic() < deadline:
            found = await cql.execute_concurrent(
                bench.session, read, [(o, tweet_id) for o in pending], name="bench_lag_poll", concurrency=8
            )
            pending = [o for o, rows in zip(pending, found, strict=True) if not rows]
            if pending:
                await asyncio.sleep(0.02)
        if not pending:
            polled[tid] = time.time()

    async def one(i: int, at: float) -> None:
        delay = at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        lateness.append(max(0.0, time.monotonic() - at))
        author = bench.lag_authors[i % len(bench.lag_authors)]
        try:
            _, tid, when = await bench.post_ours(author, f"lag tweet {i} at {rate:g}/s")
        except BenchError as exc:
            if " 503 " not in str(exc):
                raise
            refused.append(str(exc))  # shed by admission control: counted and reported, not a crash
            return
        answered[tid] = (when, author)
        await watch(tid)

    stop_reads = asyncio.Event()
    reader = asyncio.create_task(_reads(bench, reads_per_s, stop_reads)) if reads_per_s > 0 else None
    start = time.monotonic() + 0.5
    tasks = [asyncio.create_task(one(i, start + i / rate)) for i in range(total)]
    try:
        await asyncio.gather(*tasks)
    finally:
        stop_reads.set()
        reads = await reader if reader is not None else None
    if reads is not None:
        say(f"  reads: {reads['achieved_per_s']}/s achieved of {reads_per_s:g}/s, {reads['errors']} errors")
    say("  verifying every follower's row (writetime) for each tweet")
    lags, lags_written, lags_polled, incomplete = [], [], [], 0
    for tid, (when, author) in answered.items():
        owners = [author.lower(), *followers]
        rows = await bench.home_rows(uuid.UUID(tid), owners)
        if len(rows) != len(owners) or tid not in polled:
            incomplete += 1
            continue
        last_write = max(rows.values()) / 1e6
        lw, lp = (last_write - when) * 1000, (polled[tid] - when) * 1000
        lags_written.append(lw)
        lags_polled.append(lp)
        lags.append(max(lw, lp))
    if refused:
        say(f"  {len(refused)} of {total} posts refused (503): {refused[0][:160]}")
        bench.notes.append(f"delivery lag at {rate:g}/s: {len(refused)} of {total} posts were refused with 503")
    if incomplete:
        bench.notes.append(
            f"delivery lag at {rate:g}/s: {incomplete} of {len(answered)} tweets were not in every follower's timeline"
        )
    if lags:
        say(f"  lag p50 {stats.percentile(lags, 50):,.0f} ms, p99 {stats.percentile(lags, 99):,.0f} ms ({len(lags)} tweets)")
    return lags, {
        "tweets": len(answered),
        "complete": len(lags),
        "incomplete": incomplete,
        "posts_refused": len(refused),
        "summary": stats.summary(lags, 1),
        "last_row_written_ms": stats.summary(lags_written, 1),
        "sample_readable_ms": stats.summary(lags_polled, 1),
        "max_send_lateness_ms": round(max(lateness, default=0) * 1000, 1),
        **({"reads": reads} if reads is not None else {}),
    }
