"""Fan-out ceiling: the backlog's home-timeline rows written by the bare
driver from the harness process, the way tweet-store writes them (issue 18):
replica-grouped unlogged batches of ``FANLINE_HOME_WRITE_BATCH_ROWS`` rows,
one request per batch, with the in-flight window that wins a sweep.

``run`` sweeps (driver path x window) and measures once; the scaling phase
measures it again before each one-worker drain (``measure_ceiling``), so the
worker ÷ ceiling ratio is measured round by round, interleaved;
``run_again`` measures once more after the scaling runs. Records
``fanout_rows_per_s.bare_driver`` (the median of the measurements),
``details.fanout.bare_driver_tuning`` (the sweep), ``bare_driver_runs`` and
``bare_driver_single_row`` (the old, single-row ceiling, for comparison);
sets ``bench.best`` and ``bench.best_concurrency`` (the synchronous
baseline's window)."""

from __future__ import annotations

import asyncio

from fanline_shared.domain import new_timeuuid

from .. import driver, stats
from ..common import RETENTION_S, say
from ..harness import Bench


def backlog_rows(bench: Bench, tweets: int) -> list[driver.Row]:
    rows: list[driver.Row] = []
    ttl = RETENTION_S - 5
    for t in range(tweets):
        author = bench.backlog_authors[t % len(bench.backlog_authors)]
        tid = new_timeuuid()
        rows.append((author, tid, author, ttl))
        rows.extend((f, tid, author, ttl) for f in bench.graph.followers_of(author))
    return rows


def batch_rows(bench: Bench) -> int:
    """The batch size the bench system's tweet-store runs with."""
    return driver.home_batch_rows(dict(item.split("=", 1) for item in bench.args.env))


async def run(bench: Bench) -> None:
    p = bench.plan
    rows_per_batch = batch_rows(bench)
    say(f"bare-driver ceiling: sweeping the in-flight window (batches of {rows_per_batch} rows by replica)")
    stmt = await asyncio.to_thread(driver.home_insert, bench.session, bench.sync_ks)
    per_tweet = p.backlog_followers + 1
    sample_tweets = max(1, p.tune_rows // per_tweet)
    tuning = await driver.tune(
        bench.session, stmt, lambda: backlog_rows(bench, sample_tweets), p.tune_concurrencies, say, batch_rows=rows_per_batch
    )
    bench.best = max(tuning, key=lambda t: t["rows_per_s"])
    bridge = [t for t in tuning if t["path"].startswith("fanline_shared")]
    bench.best_concurrency = int(max(bridge, key=lambda t: t["rows_per_s"])["concurrency"]) if bridge else 128
    fan = bench.details.setdefault("fanout", {})
    fan["bare_driver_tuning"] = tuning
    fan["ceiling_batch_rows"] = rows_per_batch
    # The old ceiling (one row per request, its best window of the old sweep),
    # once, so the page can show what batching changed.
    single = await driver.tune(
        bench.session, stmt, lambda: backlog_rows(bench, sample_tweets), (max(p.tune_concurrencies),), say, batch_rows=1
    )
    fan["bare_driver_single_row"] = single
    await measure_ceiling(bench, "after the sweep")


async def measure_ceiling(bench: Bench, when: str) -> float | None:
    """The backlog's rows, written by the bare driver with the winning
    settings; rows/s (None before the sweep ran). The ceiling is the median
    of every measurement."""
    if bench.best is None:
        return None
    stmt = await asyncio.to_thread(driver.home_insert, bench.session, bench.sync_ks)
    rows = backlog_rows(bench, bench.plan.backlog_tweets)
    say(
        f"bare-driver ceiling ({when}): {len(rows):,} rows with {bench.best['path']}, "
        f"{bench.best['concurrency']} batches of {bench.best.get('batch_rows', 1)} in flight"
    )
    rate = await driver.run_best(bench.session, stmt, rows, bench.best)
    say(f"  bare driver: {rate:,.0f} rows/s")
    fan = bench.details.setdefault("fanout", {})
    runs = fan.setdefault("bare_driver_runs", [])
    runs.append({**bench.best, "when": when, "rows": len(rows), "rows_per_s": round(rate, 1)})
    bench.doc["fanout_rows_per_s"]["bare_driver"] = stats.spread([r["rows_per_s"] for r in runs], 1)["median"]
    bench.doc.setdefault("fair", {})["ceiling_rows_per_s"] = bench.doc["fanout_rows_per_s"]["bare_driver"]
    return rate


async def run_again(bench: Bench) -> None:
    await measure_ceiling(bench, "after the scaling runs")
