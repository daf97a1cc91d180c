"""Post latency (issue 18): ours (``POST /v1/tweets``) against the synchronous
baseline (batched as tweet-store batches), per follower count, in
``plan.repeats`` rounds of three blocks, interleaved (A B C A B C A B C):
**A** ours with the fan-out worker running (it fans out ours' posts
meanwhile, and its rows/s during the block are compared with its idle
speed), **B** ours with the worker stopped, **C** the baseline with the
worker stopped. Each block has the machine to itself but for what it
measures: the baseline's own writes (up to 10,000 rows per post) never load
the fan-out's block, nor ours the baseline's. Each side of each p99 gets
``plan.post_samples`` samples per round (≥ 300 in a full run). Nothing is
skipped: afterwards the worker drains every row the phase offered, and the
phase reports delivered vs offered rows and the delivery lag of a sample of
its own tweets. Records ``post_latency_ms`` (ours pooled over the A blocks,
the baseline over the C blocks), ``ratios.*`` (per round: median, min-max),
``post_fanout`` and ``details.post_latency``; ends with one idle worker."""

from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from typing import Any

from .. import procs, prometheus, stats
from ..common import GROUPS, PARTITIONS, say
from ..harness import Bench
from .ceiling import batch_rows

LAG_SAMPLE_PER_GROUP = 20  # of the phase's own tweets, per follower count, checked row by row


class _Fanout:
    """Rows the worker wrote during the phase, across worker restarts (each
    new process counts from zero)."""

    def __init__(self, bench: Bench, start: float) -> None:
        self.bench = bench
        self.done = -start  # the running process had written ``start`` before the phase

    async def now(self) -> float:
        written: float | None = await asyncio.to_thread(self.bench.rows_written)
        return self.done + (written or 0.0)

    async def stop(self) -> None:
        assert self.bench.system is not None
        self.done = await self.now()
        await asyncio.to_thread(self.bench.system.stop_workers)

    async def start(self) -> None:
        assert self.bench.system is not None
        await asyncio.to_thread(self.bench.system.start_workers, 1)


async def run(bench: Bench) -> None:
    p = bench.plan
    assert bench.system is not None
    rows_per_batch = batch_rows(bench)
    say(f"post latency: starting the synchronous baseline (window {bench.best_concurrency}, batches of {rows_per_batch})")
    bench.baseline_proc = await asyncio.to_thread(
        procs.spawn_baseline,
        sys.executable,
        bench.args.base_port + 20,
        bench.sync_ks,
        bench.system.url("social-graph"),
        bench.infra.cassandra_contact,
        bench.best_concurrency,
        bench.logs / "sync-baseline.log",
        rows_per_batch,
    )
    if bench.monitor is not None:
        bench.monitor.watch("sync-baseline", bench.baseline_proc.pid)
    rounds = max(1, p.repeats)
    ours: dict[str, list[list[float]]] = {n: [] for n in GROUPS}
    sync: dict[str, list[list[float]]] = {n: [] for n in GROUPS}
    paused: dict[str, list[list[float]]] = {n: [] for n in GROUPS}
    written: float | None = await asyncio.to_thread(bench.rows_written)
    fanout = _Fanout(bench, written or 0.0)
    offered = 0
    # running-block tweets: (author, id, answered)
    own: dict[str, list[tuple[str, str, float]]] = {n: [] for n in GROUPS}
    last: dict[str, str] = {}  # author -> its last tweet in the phase
    # Warm both paths up (connections, prepared statements, JIT of the node).
    # Each round posts as authors of its own, with followers of their own
    # (``Bench.post_author``): their timelines still hold the sampled tweets
    # when the lag is read back after the drain.
    for r in range(rounds):
        for n in GROUPS:
            await bench.post_ours(bench.post_author(r, n), "warm-up")
            offered += int(n) + 1
            await bench.post(f"{bench.baseline_url}/tweets", bench.post_author(r, n), "warm-up")
    say(
        f"post latency: {rounds} rounds of three blocks, {p.post_samples} posts per group each (ours with the "
        f"worker running; ours with it stopped; the baseline with it stopped)"
    )
    scraped_before = await asyncio.to_thread(scrape_services, bench)
    sequence: list[tuple[float, str, str, float]] = []
    phase_t0 = time.monotonic()
    block_speeds: list[dict[str, Any]] = []
    i = 0
    for r, kind in stats.interleaved(["running", "stopped", "sync"], rounds):
        samples: dict[str, list[float]] = {n: [] for n in GROUPS}
        if kind == "stopped":
            await fanout.stop()  # and stays stopped through the baseline's block
        elif kind == "running" and r > 0:
            await fanout.start()
        rows_at, t_at = await fanout.now(), time.monotonic()
        last_say = time.monotonic()
        while any(len(samples[n]) < p.post_samples for n in GROUPS):
            order = list(GROUPS)
            random.shuffle(order)
            for n in order:
                author = bench.post_author(r, n)
                if len(samples[n]) >= p.post_samples:
                    continue
                if kind == "sync":
                    ms, _, _ = await bench.post(f"{bench.baseline_url}/tweets", author, f"sync post {i}")
                else:
                    ms, tid, when = await bench.post_ours(author, f"post {i} ({kind} {r + 1})")
                    last[author] = tid
                    offered += int(n) + 1
                    if kind == "running":
                        own[n].append((author, tid, when))
                samples[n].append(ms)
                sequence.append((time.monotonic() - phase_t0, "sync" if kind == "sync" else f"ours-{kind}", n, ms))
                await asyncio.sleep(p.post_gap_s)
                i += 1
            if time.monotonic() - last_say >= 10:
                last_say = time.monotonic()
                say(f"  round {r + 1} ({kind}): " + ", ".join(f"{n}: {len(samples[n])}" for n in GROUPS))
        if kind == "running":
            rows_now, t_now = await fanout.now(), time.monotonic()
            speed = (rows_now - rows_at) / (t_now - t_at) if t_now > t_at else None
            block_speeds.append(
                {
                    "round": r + 1,
                    "rows": int(rows_now - rows_at),
                    "seconds": round(t_now - t_at, 1),
                    "rows_per_s": speed and round(speed, 1),
                }
            )
        for n in GROUPS:
            {"running": ours, "stopped": paused, "sync": sync}[kind][n].append(samples[n])
        say(f"  round {r + 1} ({kind}): 10,000-follower p99 {stats.percentile(samples['10000'], 99):.1f} ms")
    bench.logs.mkdir(parents=True, exist_ok=True)
    (bench.logs / "post-samples.csv").write_text(
        "answered_s,system,followers,ms\n" + "".join(f"{t:.3f},{s},{n},{ms:.2f}\n" for t, s, n, ms in sequence)
    )
    scraped_after = await asyncio.to_thread(scrape_services, bench)
    procs.stop_process(bench.baseline_proc)
    bench.baseline_proc = None

    def pooled(series: dict[str, list[list[float]]], n: str) -> list[float]:
        return [x for block in series[n] for x in block]

    def p99s(series: dict[str, list[list[float]]], n: str) -> list[float | None]:
        return [stats.percentile(b, 99) if b else None for b in series[n]]

    def counts(*blocks: list[list[float]]) -> list[int]:
        return [len(b) for bs in blocks for b in bs]

    for n in GROUPS:
        bench.doc["post_latency_ms"]["ours"][n] = stats.p50_p99(pooled(ours, n))
        bench.doc["post_latency_ms"]["sync_baseline"][n] = stats.p50_p99(pooled(sync, n))
    idle = bench.doc["fanout_rows_per_s"].get("worker")
    ratios = bench.doc.setdefault("ratios", {})
    ratios["sync_vs_ours_p99_10000"] = stats.repeated_ratio(
        p99s(sync, "10000"), p99s(ours, "10000"), counts(sync["10000"], ours["10000"])
    )
    ratios["post_p99_10000_vs_0"] = stats.repeated_ratio(p99s(ours, "10000"), p99s(ours, "0"), counts(ours["10000"], ours["0"]))
    ratios["post_p99_running_vs_stopped"] = stats.repeated_ratio(
        p99s(ours, "10000"), p99s(paused, "10000"), counts(ours["10000"], paused["10000"])
    )
    ratios["fanout_speed_during_posts_vs_idle"] = stats.repeated_ratio(
        [b["rows_per_s"] for b in block_speeds], [idle] * len(block_speeds)
    )
    # Nothing skipped: the worker drains every row the phase offered.
    during = fanout.done  # the last block ran with the worker stopped
    await fanout.start()
    say(f"post latency: the worker had delivered {during:,.0f} of {offered:,} offered rows; draining the rest")
    drain_t0 = time.monotonic()
    drained = True
    # The worker's counter misses the rows a worker writes while it shuts
    # down (it cannot be read after that), so the drain also ends when the
    # phase's last tweet of every author is in every follower's timeline,
    # checked row by row (each author's events are consumed in order).
    checked = time.monotonic()
    while await fanout.now() < offered:
        if time.monotonic() - checked >= 5:
            checked = time.monotonic()
            if await last_tweets_delivered(bench, last):
                break
        if time.monotonic() - drain_t0 > p.drain_timeout_s:
            drained = False
            break
        await asyncio.sleep(0.5)
    counted = await fanout.now()
    delivered = offered if drained else counted
    drain_s = time.monotonic() - drain_t0
    lags = await own_lags(bench, own)
    bench.doc["post_fanout"] = {
        "offered_rows": offered,
        "delivered_rows_during_blocks": int(during),
        "delivered_rows": int(delivered),
        "rows_counted_by_workers": int(counted),
        "drained": drained,
        "drain_after_s": round(drain_s, 1),
        "idle_rows_per_s": idle,
        "block_rows_per_s": block_speeds,
        "lag_ms": {n: stats.summary(v, 1) for n, v in lags.items()},
    }
    if not drained:
        bench.notes.append(
            f"post latency: the workers counted {counted:,.0f} of {offered:,} offered rows within "
            f"{p.drain_timeout_s:.0f}s; the rest was skipped"
        )
        await asyncio.to_thread(bench.system.stop_workers)
        await skip_backlog(bench)
        await asyncio.to_thread(bench.system.start_workers, 1)
    bench.details["post_latency"] = {
        "breakdown_ms": breakdown(scraped_before, scraped_after),
        "samples": {
            n: {
                "ours": len(pooled(ours, n)),
                "sync_baseline": len(pooled(sync, n)),
                "ours_worker_stopped": len(pooled(paused, n)),
            }
            for n in GROUPS
        },
        "samples_per_round": p.post_samples,
        "rounds": rounds,
        "summary": {n: {"ours": stats.summary(pooled(ours, n)), "sync_baseline": stats.summary(pooled(sync, n))} for n in GROUPS},
        "ours_worker_stopped": {n: stats.summary(pooled(paused, n)) for n in GROUPS},
        "p99_per_round": {
            n: {"ours": p99s(ours, n), "sync_baseline": p99s(sync, n), "ours_worker_stopped": p99s(paused, n)} for n in GROUPS
        },
        "sync_concurrency": bench.best_concurrency,
        "sync_batch_rows": rows_per_batch,
        "fanout_rows": {"expected": offered, "skipped": max(0, int(offered - delivered))},
        "method": (
            "Requests are sent one at a time (closed loop, "
            f"{p.post_gap_s * 1000:.0f} ms pause after each), one author per follower count and round, each "
            "with followers of its own (so the sampled tweets are still in their timelines when their lag is read "
            "back). The phase runs "
            f"{rounds} rounds of three blocks, interleaved (A B C A B C …): **A**, ours with the fan-out worker "
            "running; **B**, ours with the worker stopped; **C**, the baseline with the worker stopped (the "
            "baseline at its best: nothing else runs). Within a block the four groups take turns in a shuffled "
            f"order. Each block takes {p.post_samples} samples per group, so every p99 of every "
            "comparison rests on that many; each headline ratio is taken per round and reported as median with "
            "min-max; `post_latency_ms` pools the A blocks for ours and the C blocks for the baseline. No block "
            "carries another's load: until 2026-11-26 the baseline alternated with ours inside A, and its "
            "synchronous writes (3.3 million rows per A block) slowed both ours' posts and the fan-out there "
            "but not in B. In A the worker fans out ours' posts on the same "
            "2 cores; its rows/s during each A block are compared with its idle speed (the one-worker backlog "
            "drain of the scaling phase). Nothing is skipped: after the last block the worker drains every row "
            f"the phase offered ({offered:,}; done when the workers' counters reach it or every author's last tweet "
            "of the phase is in every follower's timeline, row by row — a worker's counter cannot count the rows it "
            f"writes while it shuts down), and the lag of up to {LAG_SAMPLE_PER_GROUP} of ours' A-block tweets "
            "per group is read back row by row (`WRITETIME` of the last row − the 201); those tweets waited "
            "through the worker-stopped blocks too. One warm-up post per author and system is not counted."
        ),
    }


async def last_tweets_delivered(bench: Bench, last: dict[str, str]) -> bool:
    """Whether each author's last tweet of the phase (author -> id) is in its
    own and every follower's home timeline."""
    for author, tid in last.items():
        owners = [author.lower(), *bench.graph.followers_of(author)]
        if len(await bench.home_rows(uuid.UUID(tid), owners)) < len(owners):
            return False
    return True


async def own_lags(bench: Bench, own: dict[str, list[tuple[str, str, float]]]) -> dict[str, list[float]]:
    """Delivery lag (ms: last home row written - the 201) of a sample of the
    phase's own tweets ((author, id, answered) per follower count). A tweet
    some owner no longer stores because its timeline was trimmed past it
    (``FANLINE_HOME_MAX_ROWS``; each round's authors have followers of their
    own, so only a run posting more than that many tweets per block reaches
    it) has no measurable lag and is counted apart; one missing a row an
    owner should still hold is counted in the notes as missing."""
    lags: dict[str, list[float]] = {}
    missing = trimmed = 0
    for n, tweets in own.items():
        step = max(1, len(tweets) // LAG_SAMPLE_PER_GROUP)
        lags[n] = []
        horizons: dict[str, dict[str, uuid.UUID]] = {}
        for author, tid, when in tweets[::step][:LAG_SAMPLE_PER_GROUP]:
            owners = [author.lower(), *(bench.graph.followers_of(author))]
            tweet = uuid.UUID(tid)
            rows = await bench.home_rows(tweet, owners)
            if len(rows) < len(owners):
                if author not in horizons:
                    horizons[author] = await bench.home_horizons(owners)
                trimmed_at = horizons[author]
                absent = [o for o in owners if o not in rows]
                if all(o in trimmed_at and trimmed_at[o].time > tweet.time for o in absent):
                    trimmed += 1
                else:
                    missing += 1
                continue
            lags[n].append((max(rows.values()) / 1e6 - when) * 1000)
    if trimmed:
        bench.notes.append(
            f"post latency: {trimmed} sampled tweets were no longer stored by every owner (trimmed "
            "to FANLINE_HOME_MAX_ROWS by newer tweets); their lag is not counted"
        )
    if missing:
        bench.notes.append(f"post latency: {missing} sampled tweets were missing home rows after the drain")
    return lags


def scrape_services(bench: Bench) -> dict[str, dict[str, float]]:
    assert bench.system is not None
    return {name: prometheus.scrape_all(bench.system.url(name) + "/metrics") for name in ("api", "tweet-store", "social-graph")}


def breakdown(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Where ours' POST time went (means from the services' own histograms)."""
    rows: list[dict[str, Any]] = []
    wanted = {
        "api": (
            ("fanline_http_request_duration_seconds", ('route="/v1/tweets"',)),
            ("fanline_peer_request_duration_seconds", ('operation="create_tweet"', 'operation="authenticate"')),
            ("fanline_kafka_produce_duration_seconds", ()),
        ),
        "tweet-store": (
            ("fanline_http_request_duration_seconds", ('route="/internal/tweets"', 'route="/internal/home/add"')),
            (
                "fanline_cassandra_statement_duration_seconds",
                (
                    'statement="tweet_create"',
                    'statement="tweet_create_fresh"',
                    'statement="tweet_rows"',
                    'statement="tweet_count"',
                    'statement="outbox_minute',
                    'statement="home_add"',
                ),
            ),
        ),
        "social-graph": (
            ("fanline_http_request_duration_seconds", ('route="/internal/sessions/current"',)),
            ("fanline_cassandra_statement_duration_seconds", ('statement="sessions_get"',)),
        ),
    }
    for service, metrics in wanted.items():
        for metric, filters in metrics:
            for row in prometheus.histogram_means(before.get(service, {}), after.get(service, {}), metric, filters):
                rows.append({"service": service, **row})
    return rows


async def skip_backlog(bench: Bench) -> None:
    """Commit the events topic's end offsets for the (stopped) worker group."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaError

    topic = f"bench.{bench.tag}.events"
    deadline = time.monotonic() + 60
    while True:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bench.infra.kafka_bootstrap, group_id=f"bench-{bench.tag}", enable_auto_commit=False
        )
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            await consumer.commit({tp: ends[tp] for tp in tps})
            return
        except KafkaError as exc:
            if time.monotonic() > deadline:
                raise
            say(f"  offsets not committed yet ({exc!r}); retrying")
            await asyncio.sleep(2)
        finally:
            await consumer.stop()
