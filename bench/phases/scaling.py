"""Worker scaling: the workers drain a posted backlog with 1 worker
(``plan.repeats`` times, each right after a bare-driver ceiling measurement:
C W C W C W), then 2 and 4 workers. Records ``scaling_rows_per_s`` (rows/s
between 10 % and 90 % of the backlog; for 1 worker the median of its runs),
``fanout_rows_per_s.worker``, ``ratios.worker_vs_ceiling`` (worker ÷ the
ceiling measured just before it, per round: median, min-max) and
``details.scaling``; ends with one worker running."""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from typing import Any

from .. import stats
from ..common import PARTITIONS, say
from ..harness import Bench
from . import ceiling


def crossing(series: list[tuple[float, float]], level: float) -> float | None:
    """Interpolated time at which a non-decreasing series first reaches ``level``."""
    prev: tuple[float, float] | None = None
    for t, v in series:
        if v >= level:
            if prev is None or v == prev[1]:
                return t
            return prev[0] + (t - prev[0]) * (level - prev[1]) / (v - prev[1])
        prev = (t, v)
    return None


# --- the harness ----------------------------------------------------------------------------


async def verify_delivered(bench: Bench, posted: list[tuple[str, str]], sample: int = 3) -> bool:
    ok = True
    for author, tid in random.sample(posted, min(sample, len(posted))):
        owners = [author.lower(), *bench.graph.followers_of(author)]
        found = await bench.home_rows(uuid.UUID(tid), owners)
        if len(found) != len(owners):
            ok = False
    return ok


async def run(bench: Bench) -> None:
    assert bench.system is not None
    p = bench.plan
    runs: dict[str, Any] = {}
    one_worker: list[float | None] = []
    ceilings: list[float | None] = []
    # The worker ÷ ceiling ratio round by round: the ceiling is measured
    # right before each one-worker drain (C W C W C W), so background load
    # drifting over the run falls on both sides of every round alike.
    order: list[tuple[str, int]] = [(f"1 (round {r + 1})", 1) for r, _ in stats.interleaved(["W"], p.repeats)]
    order += [("2", 2), ("4", 4)]
    for label, count in order:
        if count == 1:
            ceilings.append(await ceiling.measure_ceiling(bench, f"before one-worker {label}"))
        say(
            f"scaling: {count} worker(s): stopping workers, posting a backlog of {p.backlog_tweets} tweets "
            f"× {p.backlog_followers:,} followers"
        )
        await asyncio.to_thread(bench.system.stop_workers)
        posted = await bench.post_backlog(p.backlog_tweets)
        expected = p.backlog_tweets * (p.backlog_followers + 1)
        say(f"  starting {count} worker(s); draining {expected:,} rows")
        started = time.monotonic()
        await asyncio.to_thread(bench.system.spawn_workers, count)
        series = await bench.wait_rows(expected, p.drain_timeout_s, f"{count} worker(s)")
        verified = await verify_delivered(bench, posted)
        deadline = time.monotonic() + 60
        while not verified and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            verified = await verify_delivered(bench, posted)
        t10, t90 = crossing(series, 0.1 * expected), crossing(series, 0.9 * expected)
        first = next((t for t, v in series if v > 0), None)
        done = series[-1][0]
        rate = 0.8 * expected / (t90 - t10) if t10 is not None and t90 is not None and t90 > t10 else None
        runs[label] = {
            "rows": int(series[-1][1]),
            "expected_rows": expected,
            "rows_per_s_10_90": rate and round(rate, 1),
            "drain_s": round(done - (first or started), 2),
            "start_to_first_row_s": round((first or started) - started, 2),
            "verified_sample": verified,
        }
        if count == 1:
            one_worker.append(rate)
        elif rate is not None:
            bench.doc["scaling_rows_per_s"][str(count)] = round(rate, 1)
        say(f"  {count} worker(s): {rate or 0:,.0f} rows/s (10-90 % window), drained in {done - (first or started):.1f}s")
        if not verified:
            bench.notes.append(
                f"scaling with {count} worker(s): a sampled tweet was not in every follower's "
                "timeline after the counter reached the expected rows"
            )
    bench.doc["scaling_rows_per_s"]["cores"] = os.cpu_count()
    bench.doc["scaling_rows_per_s"]["1"] = stats.spread(one_worker, 1)["median"]
    bench.doc["fanout_rows_per_s"]["worker"] = bench.doc["scaling_rows_per_s"]["1"]
    bench.doc.setdefault("ratios", {})["worker_vs_ceiling"] = stats.repeated_ratio(one_worker, ceilings)
    bench.doc.setdefault("fair", {})["worker_rows_per_s"] = stats.spread(one_worker, 1)
    bench.details["scaling"] = {"runs": runs}
    fan = bench.details.setdefault("fanout", {})
    fan["method"] = (
        f"**Backlog:** the workers are stopped, {p.backlog_tweets} tweets are posted through the API by "
        f"{p.backlog_authors} authors with {p.backlog_followers:,} followers each (spread evenly over the "
        f"{PARTITIONS} partitions), then the worker process(es) are started and drain it: "
        f"{p.backlog_tweets * (p.backlog_followers + 1):,} home-timeline rows (each follower's plus the author's "
        "own). **Worker rows/s** is read from the workers' `fanline_timeline_rows_written_total` (polled every "
        "0.25 s, summed over processes) as the rows between 10 % and 90 % of the backlog divided by the time "
        "between those two crossings, so process start-up and the consumer-group join are not counted (the whole "
        "drain time is in the scaling table). A sample of tweets is then checked row by row in Cassandra. The "
        "worker writes through tweet-store's `POST /internal/home/add` (one call per page of followers), so "
        "this figure includes two HTTP hops and JSON per page; tweet-store writes a page as unlogged batches "
        "of up to 10 rows grouped by replica (one request per batch). **Bare driver (the fair ceiling):** the "
        "same number of rows of the same shape, written by the harness process with tweet-store's prepared "
        "`INSERT … USING TTL ?` **in the same replica-grouped unlogged batches** (`replica_batches`, "
        "`FANLINE_HOME_WRITE_BATCH_ROWS` rows each) with the (path, in-flight window) that won the sweep "
        "below, into an identical table in the baseline's keyspace. The ceiling is measured right before each "
        f"of the {p.repeats} one-worker drains (ceiling, worker, ceiling, worker, …), and the worker ÷ ceiling "
        "ratio is taken round by round and reported as median with min-max; the worker's and the ceiling's "
        "figures are the medians of their runs. The 2- and 4-worker runs follow."
    )
    await asyncio.to_thread(bench.system.stop_workers)
    say("scaling done; back to one worker")
    await asyncio.to_thread(bench.system.start_workers, 1)
