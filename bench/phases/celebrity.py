"""Celebrity: authors with 1k … 1M followers, with the hybrid fan-out off
and on (issue 13, item 5).

Followers are bulk-loaded into social-graph's tables (``seed.bulk_load_edges``):
celebrity ``N`` is followed by the first N accounts of a pool named in index
order, so the last follower by name — whose page the fan-out writes last —
is the pool's account N - 1. For each follower count, first with
``FANLINE_HYBRID_FANOUT=false`` (every run of that mode), then ``true`` (the
worker is restarted in between; off first, because a registered large
account stays merged at read time):

* **post** p99 of the celebrity's ``Plan.celebrity_posts`` tweets;
* **readable by the last follower**: watchers (the first, the last and three
  random followers, logged in) poll ``GET /v1/timeline`` until every tweet is
  on their page; per tweet, from its 201 to the last watcher seeing it;
* **ordinary authors' delivery lag** meanwhile: ``ordinary_authors`` authors
  with ``ordinary_followers`` followers each post ``ordinary_rate`` tweets/s
  in turn from before the first celebrity post until every watcher has every
  tweet; a tweet's lag is its last home row's ``WRITETIME`` minus its 201;
* **stored rows**: rows the workers wrote during the run, rows in the
  watchers' home partitions (CQL ``COUNT``), and per mode the largest
  ``home_timeline`` partition (``nodetool tablestats`` after a flush).

Then **home reads** (``celebrity_reads.py``): readers following 0 / 10 / 100 large
accounts read ``GET /v1/timeline?limit=20`` in alternating blocks at a fixed
rate. To have 100 large accounts without 100 * 10,000 edges, the worker runs
with ``FANLINE_LARGE_ACCOUNT_FOLLOWERS=Plan.read_large_threshold`` for that
sub-phase (each large account gets that many bulk-loaded followers); the
merge cost per followed large account does not depend on the threshold.

Finally the **crossover**: the follower count at which one pushed tweet
(hybrid off) takes 1 s to reach its last follower — the bound a large
account's tweet is held to — interpolated between the measured counts; with
the merged path's time and the read cost per followed large account beside
it. Push cost per tweet and merge cost per read both grow linearly with
followers, so what sets the threshold is delivery time and fairness: above
the crossover a push cannot meet the bound and delays everyone behind it."""

from __future__ import annotations

import asyncio
import random
import re
import subprocess
import time
import uuid
from typing import Any

from fanline_shared import cassandra as cql

from .. import seed, stats
from ..common import BenchError, say
from ..harness import Bench
from .celebrity_reads import read_large

DEFAULT_THRESHOLD = 10_000  # fanline_fanout.config.DEFAULT_LARGE_ACCOUNT_FOLLOWERS
WATCH_LIMIT = 50


async def run(bench: Bench) -> None:
    p = bench.plan
    assert bench.system is not None
    tag = bench.tag
    counts = sorted(p.celebrity_counts)
    celebs = {n: f"a{tag}c{n}" for n in counts}
    ordinary = [f"a{tag}o{j}" for j in range(p.ordinary_authors)]
    rng = random.Random(13)
    watchers: dict[int, list[str]] = {}
    for n in counts:
        picks = {0, n - 1, *rng.sample(range(1, n - 1), 3)}
        watchers[n] = [seed.celebrity_follower(tag, i) for i in sorted(picks)]
    accounts = sorted({w for ws in watchers.values() for w in ws})
    say(f"celebrity: signing up {len(celebs)} celebrities and {len(ordinary)} ordinary authors")
    await bench.gather_limited([bench.sign_up(a) for a in [*celebs.values(), *ordinary]], 4)
    edges = [(seed.celebrity_follower(tag, i), celebs[n]) for n in counts for i in range(n)]
    edges += [
        (seed.celebrity_follower(tag, j * p.ordinary_followers + i), a)
        for j, a in enumerate(ordinary)
        for i in range(p.ordinary_followers)
    ]
    started = time.monotonic()
    rows, statements = await asyncio.to_thread(seed.bulk_load_edges, bench.session, bench.social_ks, edges, accounts, say)
    seeding_s = time.monotonic() - started
    say(f"  {rows:,} rows in {statements:,} statements, {seeding_s:.1f}s")
    for n, name in celebs.items():
        r = await bench.http.get(f"{bench.api}/v1/users/{name}")
        if r.status_code != 200 or r.json().get("followers_count") != n:
            raise BenchError(f"social-graph reports {r.text[:100]} for the {n:,}-follower celebrity")
    await bench.gather_limited([bench.login(u, seed.POOL_PASSWORD) for u in accounts], 4)
    experiment = dict(item.split("=", 1) for item in bench.args.env)
    threshold = int(experiment.get("FANLINE_LARGE_ACCOUNT_FOLLOWERS", DEFAULT_THRESHOLD))
    followers_of_ordinary = {
        a: [seed.celebrity_follower(tag, j * p.ordinary_followers + i) for i in range(p.ordinary_followers)]
        for j, a in enumerate(ordinary)
    }
    runs: dict[str, dict[str, Any]] = {}
    partitions: dict[str, Any] = {}
    try:
        for mode in ("off", "on"):
            await bench.restart_workers({"FANLINE_HYBRID_FANOUT": "true" if mode == "on" else "false"})
            runs[mode] = {}
            for n in counts:
                runs[mode][str(n)] = await _celebrity_run(bench, mode, n, celebs[n], watchers[n], followers_of_ordinary)
            partitions[mode] = await asyncio.to_thread(_largest_partition, bench)
        reads = await read_large(bench)
    finally:
        await bench.restart_workers()
    crossover = compute_crossover(runs, threshold, reads)
    say(
        f"celebrity: crossover {crossover.get('followers') or 0:,.0f} followers (threshold {threshold:,}): "
        f"{crossover.get('text')}"
    )
    bench.doc["celebrity"] = summarize(runs, partitions, reads, crossover, threshold)
    bench.details["celebrity"] = {
        "runs": runs,
        "largest_partition": partitions,
        "read_large": reads,
        "seeding": (
            f"{len(edges):,} follow edges and {len(accounts)} full accounts bulk-loaded in "
            f"{seeding_s:.1f} s ({rows:,} rows, {statements:,} statements)"
        ),
        "method": _method_text(),
    }


def _method_text() -> str:
    """The module docstring's method, as one markdown paragraph."""
    text = " ".join((__doc__ or "").split("\n\n", 1)[-1].split()).replace("``", "`")
    return text.replace(" * ", "; ").replace(":; ", ": ").replace(";; ", "; ")


# --- one follower count in one mode --------------------------------------------------------


async def _celebrity_run(
    bench: Bench, mode: str, n: int, celeb: str, watchers: list[str], followers_of: dict[str, list[str]]
) -> dict[str, Any]:
    p = bench.plan
    say(f"celebrity: {n:,} followers, hybrid {mode}: {p.celebrity_posts} posts, ordinary authors at {p.ordinary_rate:g}/s")
    rows_before = await asyncio.to_thread(bench.rows_written) or 0.0
    done = asyncio.Event()
    lag_task = asyncio.create_task(_ordinary_stream(bench, followers_of, done))
    await asyncio.sleep(2.0)  # the ordinary authors' lag before the celebrity posts, too
    posts: list[tuple[str, float, float]] = []  # (id, post ms, answered wall time)
    # The watchers poll from the first post on: each tweet is timed from its
    # own 201, not from the last post's.
    seen: dict[str, dict[str, float]] = {}
    posted_all = asyncio.Event()
    watch = asyncio.create_task(_watch(bench, watchers, seen, posted_all, p.drain_timeout_s))
    t0 = time.monotonic()
    try:
        for k in range(p.celebrity_posts):
            await asyncio.sleep(max(0.0, t0 + k * p.celebrity_gap_s - time.monotonic()))
            ms, tid, when = await bench.post_ours(celeb, f"celebrity {n} hybrid {mode} tweet {k}")
            seen.setdefault(tid, {})
            posts.append((tid, ms, when))
        posted_all.set()
        await watch
    finally:
        posted_all.set()
        await asyncio.gather(watch, return_exceptions=True)
        await asyncio.sleep(max(0.0, p.ordinary_min_s - (time.monotonic() - t0)))
        done.set()
        lags, ordinary = await lag_task
    readable = [max(seen[tid].values()) - when for tid, _, when in posts if len(seen.get(tid, {})) == len(watchers)]
    rows_after = await asyncio.to_thread(bench.rows_written) or 0.0
    stored = await _stored_rows(bench, watchers)
    out: dict[str, Any] = {
        "followers": n,
        "posts": len(posts),
        "post_ms": stats.summary([ms for _, ms, _ in posts], 1),
        "readable_by_last_follower_s": stats.summary(readable, 3),
        "readable_by_last_follower_max_s": round(max(readable), 3) if len(readable) == len(posts) else None,
        "watchers": len(watchers),
        "ordinary_lag_ms": stats.summary(lags, 1),
        "ordinary": ordinary,
        "rows_written": int(rows_after - rows_before),
        "stored_rows_of_watchers": stored,
    }
    say(
        f"  post p99 {(out['post_ms'] or {}).get('p99')} ms, last follower readable max "
        f"{out['readable_by_last_follower_max_s']} s, ordinary lag p99 {(out['ordinary_lag_ms'] or {}).get('p99')} ms, "
        f"{out['rows_written']:,} rows written"
    )
    return out


async def _watch(
    bench: Bench, watchers: list[str], seen: dict[str, dict[str, float]], posted_all: asyncio.Event, timeout_s: float
) -> None:
    """Fill ``seen`` (tweet id -> watcher -> wall time the tweet was first on
    the watcher's page) for the tweet ids the poster adds to it, until
    ``posted_all`` is set and every watcher has every tweet. Each watcher
    polls every 0.1 s while the newest tweet is under 5 s old, then every
    0.5 s (long push fan-outs)."""
    started = time.monotonic()

    async def one(w: str) -> None:
        headers = {"authorization": f"Bearer {bench.tokens[w]}"}
        newest: tuple[str | None, float] = (None, time.monotonic())  # (newest tweet id, when it became known)
        while not posted_all.is_set() or any(w not in s for s in seen.values()):
            if time.monotonic() - started > timeout_s:
                return
            pending = [t for t, s in seen.items() if w not in s]
            if not pending:
                await asyncio.sleep(0.02)
                continue
            if pending[-1] != newest[0]:
                newest = (pending[-1], time.monotonic())
            r = await bench.http.get(f"{bench.api}/v1/timeline", params={"limit": WATCH_LIMIT}, headers=headers)
            now = time.time()
            if r.status_code == 200:  # 206 (regenerating) counts as not yet
                ids = {str(i["id"]) for i in r.json()["items"]}
                for t in pending:
                    if t in ids:
                        seen[t][w] = now
            await asyncio.sleep(0.1 if time.monotonic() - newest[1] < 5 else 0.5)

    await asyncio.gather(*(one(w) for w in watchers))
    missing = sum(len(watchers) - len(s) for s in seen.values())
    if missing:
        bench.notes.append(f"celebrity: {missing} (watcher, tweet) pairs never readable within {timeout_s:.0f} s")


async def _ordinary_stream(
    bench: Bench, followers_of: dict[str, list[str]], done: asyncio.Event
) -> tuple[list[float], dict[str, Any]]:
    """Ordinary authors post in turn at ``ordinary_rate``/s until ``done``;
    then each tweet's lag (ms, last home row's WRITETIME - its 201)."""
    p = bench.plan
    authors = list(followers_of)
    posted: list[tuple[str, str, float]] = []
    start = time.monotonic()
    i = 0
    while not done.is_set():
        await asyncio.sleep(max(0.0, start + i / p.ordinary_rate - time.monotonic()))
        author = authors[i % len(authors)]
        _, tid, when = await bench.post_ours(author, f"ordinary tweet {i}")
        posted.append((author, tid, when))
        i += 1
    lags: list[float] = []
    incomplete = 0
    deadline = time.monotonic() + p.drain_timeout_s
    for author, tid, when in posted:
        owners = [author.lower(), *followers_of[author]]
        while True:
            rows = await bench.home_rows(uuid.UUID(tid), owners)
            if len(rows) == len(owners) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        if len(rows) < len(owners):
            incomplete += 1
            continue
        lags.append((max(rows.values()) / 1e6 - when) * 1000)
    if incomplete:
        bench.notes.append(f"celebrity: {incomplete} ordinary tweets never reached every follower")
    return lags, {
        "tweets": len(posted),
        "complete": len(lags),
        "authors": len(authors),
        "followers_each": p.ordinary_followers,
        "rate_per_s": p.ordinary_rate,
    }


async def _stored_rows(bench: Bench, owners: list[str]) -> dict[str, int]:
    stmt = await asyncio.to_thread(
        cql.prepare, bench.session, f"SELECT COUNT(*) AS n FROM {bench.tweet_ks}.home_timeline WHERE owner_lc = ?"
    )
    out = {}
    for o in owners:
        rows = await cql.execute(bench.session, stmt, (o.lower(),), name="bench_count")
        out[o] = int(rows[0].n)
    return out


def _largest_partition(bench: Bench) -> dict[str, Any]:
    """``nodetool flush`` + ``tablestats`` of home_timeline: the largest
    compacted partition (bytes) and the partition count estimate."""
    table = f"{bench.tweet_ks}.home_timeline"
    try:
        subprocess.run(
            bench.infra.nodetool_command("flush", bench.tweet_ks, "home_timeline"), check=True, capture_output=True, timeout=120
        )
        out = subprocess.run(
            bench.infra.nodetool_command("tablestats", table), check=True, capture_output=True, text=True, timeout=120
        ).stdout
    except (OSError, subprocess.SubprocessError, AttributeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}

    def field(label: str) -> int | None:
        m = re.search(rf"{re.escape(label)}:\s*([0-9]+)", out)
        return int(m.group(1)) if m else None

    return {
        "max_partition_bytes": field("Compacted partition maximum bytes"),
        "mean_partition_bytes": field("Compacted partition mean bytes"),
        "partitions_estimate": field("Number of partitions (estimate)"),
    }


# --- summary, crossover ------------------------------------------------------------------------


DELIVERY_BUDGET_S = 1.0  # issue 13: a large account's tweet readable by every follower within 1 s


def compute_crossover(
    runs: dict[str, dict[str, Any]], threshold: int, reads: dict[str, Any] | None = None, budget_s: float = DELIVERY_BUDGET_S
) -> dict[str, Any]:
    """Where pushing stops paying: the follower count at which one pushed
    tweet (hybrid off; the first of each run's tweets, which waits behind no
    other) reaches its last follower in ``budget_s`` — the bound the merged
    path is held to. Below it, push meets that bound and costs reads
    nothing; above it, only merging does. Piecewise-linear between the
    measured counts (through the origin below the first, along the last
    segment above the last). Also, for the comparison, the merged path's
    time and what a read pays per followed large account (``reads``)."""
    push = sorted(
        (float(r["followers"]), float(r["readable_by_last_follower_s"]["min"]))
        for r in (runs.get("off") or {}).values()
        if r.get("readable_by_last_follower_s")
    )
    merged = [
        float(r["readable_by_last_follower_s"]["p50"])
        for r in (runs.get("on") or {}).values()
        if r.get("readable_by_last_follower_s") and r["followers"] >= threshold
    ]
    out: dict[str, Any] = {
        "budget_s": budget_s,
        "push_points": push,
        "followers": None,
        "merged_readable_s": round(stats.percentile(merged, 50), 3) if merged else None,
    }
    groups = (reads or {}).get("by_large_accounts") or {}
    r0, r10 = (groups.get("0") or {}).get("p50"), (groups.get("10") or {}).get("p50")
    if r0 is not None and r10 is not None:
        out["read_ms_per_large_account"] = round((r10 - r0) / 10, 3)
    if not push:
        out["text"] = "not measured (no hybrid-off run)"
        return out
    cross: float | None = None
    prev = (0.0, 0.0)
    for n, t in push:
        if t >= budget_s:
            cross = prev[0] + (n - prev[0]) * (budget_s - prev[1]) / (t - prev[1]) if t > prev[1] else n
            break
        prev = (n, t)
    if cross is None and len(push) >= 2:
        (n1, t1), (n2, t2) = push[-2], push[-1]
        cross = n2 + (n2 - n1) * (budget_s - t2) / (t2 - t1) if t2 > t1 else None
    if cross is None:
        out["text"] = f"push stayed under {budget_s:g} s in the measured range: no crossover measured"
        return out
    out["followers"] = round(cross)
    out["threshold_over_crossover"] = round(threshold / cross, 3) if cross else None
    pts = ", ".join(f"{t:.2f} s at {n:,.0f}" for n, t in push)
    extra = (
        f"; the merged path made tweets readable in {out['merged_readable_s']:.2f} s (p50)"
        if out["merged_readable_s"] is not None
        else ""
    )
    if "read_ms_per_large_account" in out:
        extra += f", and a home read paid {out['read_ms_per_large_account']:.2f} ms (p50) per followed large account"
    out["text"] = (
        f"one pushed tweet reached its last follower in {pts} followers; push crosses the "
        f"{budget_s:g} s bound at {cross:,.0f} followers{extra}"
    )
    return out


def summarize(
    runs: dict[str, dict[str, Any]], partitions: dict[str, Any], reads: dict[str, Any], crossover: dict[str, Any], threshold: int
) -> dict[str, Any]:
    """The ``celebrity`` section of the results document."""
    by_mode: dict[str, Any] = {}
    for mode, per in runs.items():
        by_mode[mode] = {
            n: {
                "post_p99_ms": (r.get("post_ms") or {}).get("p99"),
                "readable_last_follower_s": r.get("readable_by_last_follower_max_s"),
                "ordinary_lag_p99_ms": (r.get("ordinary_lag_ms") or {}).get("p99"),
                "rows_written": r.get("rows_written"),
                "stored_rows_max_of_sampled": max((r.get("stored_rows_of_watchers") or {}).values(), default=None),
            }
            for n, r in per.items()
        }
        by_mode[mode]["largest_partition_bytes"] = (partitions.get(mode) or {}).get("max_partition_bytes")
    groups = reads.get("by_large_accounts") or {}
    return {
        "threshold": threshold,
        "hybrid_on": by_mode.get("on", {}),
        "hybrid_off": by_mode.get("off", {}),
        "home_read_ms": {g: {"p50": v.get("p50"), "p99": v.get("p99")} for g, v in groups.items()},
        "home_read_threshold": reads.get("threshold"),
        "crossover_followers": crossover.get("followers"),
        "crossover": crossover,
    }
