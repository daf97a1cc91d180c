"""Post latency: ours (``POST /v1/tweets``) against the synchronous
baseline, per follower count, interleaved, with the worker running; then
ours again with the worker stopped, and the worker's leftover backlog
skipped. Records ``post_latency_ms`` and ``details.post_latency`` (with the
per-service breakdown); ends with one idle worker running."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from typing import Any

from .. import procs, stats
from ..common import GROUPS, PARTITIONS, say
from ..harness import Bench


async def run(bench: Bench) -> None:
    p = bench.plan
    say(f"post latency: starting the synchronous baseline (window {bench.best_concurrency})")
    assert bench.system is not None
    bench.baseline_proc = await asyncio.to_thread(
        procs.spawn_baseline, sys.executable, bench.args.base_port + 20, bench.sync_ks, bench.system.url("social-graph"),
        bench.infra.cassandra_contact, bench.best_concurrency, bench.logs / "sync-baseline.log")
    if bench.monitor is not None:
        bench.monitor.watch("sync-baseline", bench.baseline_proc.pid)
    ours: dict[str, list[float]] = {n: [] for n in GROUPS}
    sync: dict[str, list[float]] = {n: [] for n in GROUPS}
    sync_targets = dict(zip(GROUPS, p.sync_posts, strict=True))
    rows_before = await asyncio.to_thread(bench.rows_written) or 0.0
    # Warm both paths up (connections, prepared statements, JIT of the node).
    for n in GROUPS:
        await bench.post_ours(bench.group_author(n), "warm-up")
        await bench.post(f"{bench.baseline_url}/tweets", bench.group_author(n), "warm-up")
    expected_rows = sum(int(n) + 1 for n in GROUPS)
    say(f"post latency: {p.posts_per_group} posts per group (ours), {p.sync_posts} (sync), interleaved")
    scraped_before = await asyncio.to_thread(scrape_services, bench)
    last_say = time.monotonic()
    # Every sample in order, for attributing the tail afterwards
    # (test-artifacts/bench-*/post-samples.csv; not part of the results).
    sequence: list[tuple[float, str, str, float]] = []
    phase_t0 = time.monotonic()
    i = 0
    while any(len(ours[n]) < p.posts_per_group or len(sync[n]) < sync_targets[n] for n in GROUPS):
        order = list(GROUPS)
        random.shuffle(order)
        for n in order:
            author = bench.group_author(n)
            if len(ours[n]) < p.posts_per_group:
                ms, _, _ = await bench.post_ours(author, f"post {i}")
                ours[n].append(ms)
                sequence.append((time.monotonic() - phase_t0, "ours", n, ms))
                expected_rows += int(n) + 1
                await asyncio.sleep(p.post_gap_s)
            if len(sync[n]) < sync_targets[n]:
                ms, _, _ = await bench.post(f"{bench.baseline_url}/tweets", author, f"sync post {i}")
                sync[n].append(ms)
                sequence.append((time.monotonic() - phase_t0, "sync", n, ms))
                await asyncio.sleep(p.post_gap_s)
            i += 1
        if time.monotonic() - last_say >= 10:
            last_say = time.monotonic()
            say("  " + ", ".join(f"{n}: {len(ours[n])}/{len(sync[n])}" for n in GROUPS) + " (ours/sync samples)")
    bench.logs.mkdir(parents=True, exist_ok=True)
    (bench.logs / "post-samples.csv").write_text(
        "answered_s,system,followers,ms\n" + "".join(f"{t:.3f},{s},{n},{ms:.2f}\n" for t, s, n, ms in sequence))
    for n in GROUPS:
        bench.doc["post_latency_ms"]["ours"][n] = stats.p50_p99(ours[n])
        bench.doc["post_latency_ms"]["sync_baseline"][n] = stats.p50_p99(sync[n])
        say(f"  {int(n):>6,} followers: ours p50/p99 {stats.percentile(ours[n], 50):.1f}/"
            f"{stats.percentile(ours[n], 99):.1f} ms, sync {stats.percentile(sync[n], 50):.1f}/"
            f"{stats.percentile(sync[n], 99):.1f} ms")
    scraped_after = await asyncio.to_thread(scrape_services, bench)
    procs.stop_process(bench.baseline_proc)
    bench.baseline_proc = None
    bench.details["post_latency"] = {
        "breakdown_ms": breakdown(scraped_before, scraped_after),
        "samples": {n: {"ours": len(ours[n]), "sync_baseline": len(sync[n])} for n in GROUPS},
        "summary": {n: {"ours": stats.summary(ours[n]), "sync_baseline": stats.summary(sync[n])} for n in GROUPS},
        "sync_concurrency": bench.best_concurrency,
        "method": (
            "Requests are sent one at a time (closed loop, "
            f"{p.post_gap_s * 1000:.0f} ms pause after each), one author per follower count, and the four "
            "follower counts and the two systems are **interleaved** (a shuffled round over the groups, ours "
            "then the baseline) so that background load — the worker fanning out earlier posts, other people's "
            "jobs on the machine — falls on every column alike. One warm-up post per author and system is not "
            "counted. The fan-out worker runs throughout (on the same 2 cores), as it would in production."),
    }
    rows_now = await asyncio.to_thread(bench.rows_written) or 0.0
    pending = rows_before + expected_rows - rows_now
    say(f"post latency done; the worker still has {max(0, pending):,.0f} of {expected_rows:,} rows to fan out: "
        "skipping them (stop the worker, move the group's offsets to the end, start it again)")
    assert bench.system is not None
    await asyncio.to_thread(bench.system.stop_workers)
    # The same posts with no fan-out running anywhere on the machine: shows
    # how much of ours' latency is the co-located worker's load.
    say("  ours again with the worker stopped (for comparison)")
    paused: dict[str, list[float]] = {n: [] for n in GROUPS}
    for i in range(p.posts_per_group):
        order = list(GROUPS)
        random.shuffle(order)
        for n in order:
            ms, _, _ = await bench.post_ours(bench.group_author(n), f"paused post {i}")
            paused[n].append(ms)
            await asyncio.sleep(p.post_gap_s)
    bench.details["post_latency"]["ours_worker_stopped"] = {n: stats.summary(paused[n]) for n in GROUPS}
    await skip_backlog(bench)
    await asyncio.to_thread(bench.system.start_workers, 1)
    bench.details["post_latency"]["fanout_rows"] = {"expected": expected_rows, "skipped": max(0, int(pending))}
    bench.details["post_latency"]["method"] += (
        f" The worker had fanned out {expected_rows - max(0, int(pending)):,} of the phase's {expected_rows:,} "
        "home-timeline rows when it ended; the rest (the 10,000-follower author's backlog) was skipped by moving "
        "the consumer group's offsets to the end, so later phases start with an idle worker.")


def scrape_services(bench: Bench) -> dict[str, dict[str, float]]:
    assert bench.system is not None
    return {name: procs.scrape_all(bench.system.url(name) + "/metrics")
            for name in ("api", "tweet-store", "social-graph")}


def breakdown(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Where ours' POST time went (means from the services' own histograms)."""
    rows: list[dict[str, Any]] = []
    wanted = {
        "api": (("fanline_http_request_duration_seconds", ('route="/v1/tweets"',)),
                ("fanline_peer_request_duration_seconds", ('operation="create_tweet"', 'operation="authenticate"')),
                ("fanline_kafka_produce_duration_seconds", ())),
        "tweet-store": (("fanline_http_request_duration_seconds", ('route="/internal/tweets"',
                                                                    'route="/internal/home/add"')),
                        ("fanline_cassandra_statement_duration_seconds",
                         ('statement="tweet_create"', 'statement="tweet_create_fresh"', 'statement="tweet_rows"',
                          'statement="tweet_count"',
                          'statement="outbox_minute', 'statement="home_add"'))),
        "social-graph": (("fanline_http_request_duration_seconds", ('route="/internal/sessions/current"',)),
                         ("fanline_cassandra_statement_duration_seconds", ('statement="sessions_get"',))),
    }
    for service, metrics in wanted.items():
        for metric, filters in metrics:
            for row in procs.histogram_means(before.get(service, {}), after.get(service, {}), metric, filters):
                rows.append({"service": service, **row})
    return rows


async def skip_backlog(bench: Bench) -> None:
    """Commit the events topic's end offsets for the (stopped) worker group."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaError

    topic = f"bench.{bench.tag}.events"
    deadline = time.monotonic() + 60
    while True:
        consumer = AIOKafkaConsumer(bootstrap_servers=bench.infra.kafka_bootstrap, group_id=f"bench-{bench.tag}",
                                    enable_auto_commit=False)
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
