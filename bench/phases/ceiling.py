"""Fan-out ceiling: the backlog's home-timeline rows written by the bare
driver from the harness process. ``run`` tunes the (path, in-flight window)
and measures once; ``run_again`` measures again after the scaling runs.
Records ``fanout_rows_per_s.bare_driver`` (the better of the two) and
``details.fanout.bare_driver_tuning`` / ``bare_driver_runs``; sets
``bench.best`` and ``bench.best_concurrency`` (the baseline's window)."""

from __future__ import annotations

import asyncio

from fanline_shared.domain import new_timeuuid

from .. import driver
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


async def run(bench: Bench) -> None:
    p = bench.plan
    say("bare-driver ceiling: tuning the in-flight window")
    stmt = await asyncio.to_thread(driver.home_insert, bench.session, bench.sync_ks)
    per_tweet = p.backlog_followers + 1
    sample_tweets = max(1, p.tune_rows // per_tweet)
    tuning = await driver.tune(bench.session, stmt, lambda: backlog_rows(bench, sample_tweets), p.tune_concurrencies, say)
    bench.best = max(tuning, key=lambda t: t["rows_per_s"])
    bridge = [t for t in tuning if t["path"].startswith("fanline_shared")]
    bench.best_concurrency = int(max(bridge, key=lambda t: t["rows_per_s"])["concurrency"]) if bridge else 128
    fan = bench.details.setdefault("fanout", {})
    fan["bare_driver_tuning"] = tuning
    await measure_ceiling(bench, "before the worker runs")


async def measure_ceiling(bench: Bench, when: str) -> None:
    """The backlog's rows, written by the bare driver with the tuned settings.
    Measured before and after the scaling runs; the ceiling is the best."""
    if bench.best is None:
        return
    stmt = await asyncio.to_thread(driver.home_insert, bench.session, bench.sync_ks)
    rows = backlog_rows(bench, bench.plan.backlog_tweets)
    say(f"bare-driver ceiling ({when}): {len(rows):,} rows with {bench.best['path']}, "
        f"concurrency {bench.best['concurrency']}")
    rate = await driver.run_best(bench.session, stmt, rows, bench.best)
    say(f"  bare driver: {rate:,.0f} rows/s")
    fan = bench.details.setdefault("fanout", {})
    runs = fan.setdefault("bare_driver_runs", [])
    runs.append({**bench.best, "when": when, "rows": len(rows), "rows_per_s": round(rate, 1)})
    bench.doc["fanout_rows_per_s"]["bare_driver"] = max(r["rows_per_s"] for r in runs)


async def run_again(bench: Bench) -> None:
    await measure_ceiling(bench, "after the scaling runs")
