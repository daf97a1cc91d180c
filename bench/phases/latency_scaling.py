"""Scaling where the fan-out is latency-bound (issue 13, item 4).

Two cores cannot show CPU scaling, so this phase puts a fixed latency
between the services and Cassandra — ``bench/latency_proxy.py``, a TCP proxy
adding ``Plan.scale_delay_ms`` each way — and drains the same backlog with
1 → 2 → 4 fan-out workers, each with its own tweet-store replica (worker
``i`` writes through replica ``i``). social-graph is restarted behind the
proxy for the phase too, so every service's Cassandra round trip is slow.

Per run: rows/s from when every worker has joined (or 10 %) to 90 % of the backlog (the workers'
``fanline_timeline_rows_written_total``), the machine's CPU utilisation over
the drain (``psutil``: a run at ≥ 90 % of all cores is CPU-bound, and its
ratio says more about the machine than about the design), and the
CPU-seconds per 1,000 rows of each component (process CPU times before and
after: workers, replicas, social-graph, the Cassandra JVM; the proxy's own
CPU apart, it is not the product). Records ``latency_scaling`` and
``details.latency_scaling``; ends with the system as it was (one worker,
social-graph direct).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

from fanline_shared import cassandra as cql
from fanline_shared.config import StorageSettings

from .. import procs, prometheus, seed
from ..common import BenchError, balanced_authors, say
from ..harness import Bench
from .scaling import crossing, verify_delivered

CPU_BOUND_UTILISATION = 0.9  # share of all cores busy over a run


def _cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of a process (and its children), None if gone."""
    if pid is None:
        return None
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return None
    return float(t.user + t.system + t.children_user + t.children_system)


def _machine_busy_s() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, wall seconds * cores) now."""
    import psutil

    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    return float(sum(t) - idle), float(sum(t))


def component_pids(bench: Bench, proxy_pid: int | None) -> dict[str, list[int]]:
    """Component -> pids whose CPU the capacity model counts."""
    assert bench.system is not None
    pids = bench.system.pids()
    out: dict[str, list[int]] = {
        "fanout-worker": [pid for n, pid in pids.items() if n.startswith(procs.WORKER)],
        "tweet-store": [pid for n, pid in pids.items() if n.startswith("tweet-store-r")],
        "social-graph": [pids["social-graph"]] if "social-graph" in pids else [],
    }
    cassandra = bench.infra.cassandra.pid()
    out["cassandra"] = [cassandra] if cassandra else []
    kafka = bench.infra.kafka.pid()
    out["kafka"] = [kafka] if kafka else []
    if proxy_pid is not None:
        out["latency proxy (harness)"] = [proxy_pid]
    return out


def cpu_snapshot(pids: dict[str, list[int]]) -> dict[str, dict[int, float]]:
    return {c: {pid: v for pid in ps if (v := _cpu_s(pid)) is not None} for c, ps in pids.items()}


def cpu_per_1k(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]], rows: float) -> dict[str, float | None]:
    """CPU-seconds per 1,000 rows of each component between two snapshots
    (processes absent from ``before`` count from zero)."""
    out: dict[str, float | None] = {}
    for comp, now in after.items():
        used = sum(v - before.get(comp, {}).get(pid, 0.0) for pid, v in now.items())
        out[comp] = round(1000 * used / rows, 4) if rows > 0 and now else None
    return out


def start_proxy(bench: Bench, port: int, target: str, delay_ms: float) -> subprocess.Popen[bytes]:
    """``bench/latency_proxy.py`` as its own process, logging beside the services."""
    bench.logs.mkdir(parents=True, exist_ok=True)
    with open(bench.logs / "latency-proxy.log", "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.latency_proxy",
                "--listen",
                f"127.0.0.1:{port}",
                "--target",
                target,
                "--delay-ms",
                str(delay_ms),
            ],
            cwd=procs.REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


async def _rtt_ms(settings: StorageSettings, n: int = 20) -> float:
    """Median round trip of a trivial query through ``settings``' contact
    point; raises ``BenchError`` if the driver knows any other endpoint."""
    session = await cql.open_session(settings)
    try:
        hosts = [str(h.endpoint) for h in session.cluster.metadata.all_hosts()]
        want = f"{settings.cassandra_hosts[0]}:{settings.cassandra_port}"
        if hosts != [want]:
            raise BenchError(f"the driver discovered {hosts}, not only the proxy {want}: it would bypass it")
        times = []
        for _ in range(n):
            t = time.perf_counter()
            await cql.execute(session, "SELECT release_version FROM system.local", name="bench_rtt")
            times.append((time.perf_counter() - t) * 1000)
        return sorted(times)[n // 2]
    finally:
        await cql.close_session(session)


def pending_compactions(bench: Bench) -> int | None:
    """Cassandra's pending compaction tasks (``nodetool compactionstats``), None if unknown."""
    try:
        out = subprocess.run(
            bench.infra.nodetool_command("compactionstats"), check=True, capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError, AttributeError):
        return None
    m = re.search(r"pending tasks:?\s+([0-9]+)", out)
    return int(m.group(1)) if m else None


async def wait_for_compactions(bench: Bench, timeout_s: float = 900.0) -> dict[str, Any]:
    """Wait (at most ``timeout_s``) until Cassandra has no compaction pending:
    the earlier phases write tens of millions of rows, and the node compacting
    them is a shared queue every pair waits behind — in a full run the pairs
    added nothing (0.82x with 2) while a run on a quiet node reached 1.77x.
    What was pending, and how long it took, goes into the results."""
    started = time.monotonic()
    first = last = await asyncio.to_thread(pending_compactions, bench)
    while last and time.monotonic() - started < timeout_s:
        await asyncio.sleep(10)
        last = await asyncio.to_thread(pending_compactions, bench)
    waited = round(time.monotonic() - started, 1)
    if first:
        say(f"  waited {waited:.0f} s for Cassandra's {first} pending compactions ({last} left)")
    return {"pending_at_start": first, "pending_after_wait": last, "waited_s": waited}


async def seed_authors(bench: Bench) -> list[str]:
    """The backlog's authors: ``Plan.scale_authors`` of their own (signed up
    through the API, each followed by the first ``backlog_followers`` of the
    pool, bulk-loaded), or the backlog authors if 0. A worker runs the
    events of one author one after another, so with the 64 backlog authors
    each of 4 workers held 16 authors for its 16 event slots and any author
    between two tweets left a slot empty: the ratio measured the backlog."""
    p = bench.plan
    if not p.scale_authors:
        return bench.backlog_authors
    authors = balanced_authors(bench.tag, p.scale_authors, stem="s")
    await bench.gather_limited([bench.sign_up(a) for a in authors], 4)
    edges = [(seed.pool_name(bench.tag, i), a) for a in authors for i in range(p.backlog_followers)]
    rows, _ = await asyncio.to_thread(seed.bulk_load_edges, bench.session, bench.social_ks, edges, [])
    for a in authors:
        bench.graph.followers[a] = p.backlog_followers
    say(f"  {len(authors)} authors of the backlog, {p.backlog_followers:,} followers each ({rows:,} rows)")
    return authors


async def run(bench: Bench) -> None:
    assert bench.system is not None
    p = bench.plan
    system = bench.system
    authors = await seed_authors(bench)
    compactions = await wait_for_compactions(bench)
    host, port = bench.infra.cassandra_contact.rsplit(":", 1)
    proxy_port = bench.args.base_port + 50
    say(f"latency scaling: proxy 127.0.0.1:{proxy_port} -> {host}:{port}, +{p.scale_delay_ms:g} ms each way")
    proxy = await asyncio.to_thread(start_proxy, bench, proxy_port, f"{host}:{port}", p.scale_delay_ms)
    proxied_env = {"FANLINE_CASSANDRA_HOSTS": "127.0.0.1", "FANLINE_CASSANDRA_PORT": str(proxy_port)}
    runs: dict[str, Any] = {}
    try:
        await asyncio.sleep(1.0)
        base = StorageSettings(
            backend="cassandra",
            data_dir=bench.tmp,
            cassandra_hosts=(host,),
            cassandra_port=int(port),
            keyspace_prefix=bench.prefix,
            replication_factor=1,
            local_dc="datacenter1",
            request_timeout_s=30.0,
        )
        direct_rtt = await _rtt_ms(base)
        proxied_rtt = await _rtt_ms(replace(base, cassandra_hosts=("127.0.0.1",), cassandra_port=proxy_port))
        say(
            f"  CQL round trip: {direct_rtt:.2f} ms direct, {proxied_rtt:.2f} ms through the proxy "
            "(the driver sees only the proxy)"
        )
        await asyncio.to_thread(system.stop_workers)
        say("  restarting social-graph behind the proxy")
        await asyncio.to_thread(system.restart_service, "social-graph", proxied_env)
        for count in p.scale_counts:
            label = str(count) if str(count) not in runs else f"{count} again"
            runs[label] = await _one_run(bench, count, proxied_env, proxy.pid, authors)
    finally:
        await asyncio.to_thread(system.stop_workers)
        await asyncio.to_thread(system.stop_replicas)
        say("latency scaling done; social-graph direct again, one worker")
        await asyncio.to_thread(system.restart_service, "social-graph", {})
        procs.stop_process(proxy)
        await asyncio.to_thread(system.start_workers, 1)
    # One pair runs first and again last (as in the CPU-bound scaling phase):
    # its figure is the better of the two, the harder bar for the ratios.
    rates: dict[str, float | None] = {}
    for label, r in runs.items():
        n = label.split()[0]
        rate = r.get("rows_per_s")
        rates[n] = max(rate, rates.get(n) or 0.0) if rate is not None else rates.get(n)
    one = rates.get("1")
    ratios = {n: (round(v / one, 3) if v and one else None) for n, v in rates.items() if n != "1"}
    first = runs.get("1") or {}
    bench.doc["latency_scaling"] = {
        "delay_ms_each_way": p.scale_delay_ms,
        "rtt_ms": {"direct": round(direct_rtt, 3), "proxied": round(proxied_rtt, 3)},
        "rows_per_s": rates,
        "ratio_vs_1": ratios,
        "cpu_bound": {n: r.get("cpu_bound") for n, r in runs.items()},
        "run_order": list(runs),
        "cpu_s_per_1k_rows": first.get("cpu_s_per_1k_rows"),
        "cores": os.cpu_count(),
        "compactions": compactions,
    }
    bench.details["latency_scaling"] = {
        "runs": runs,
        "method": (
            f"A TCP proxy (`bench/latency_proxy.py`, its own process) adds {p.scale_delay_ms:g} ms each way "
            f"between the services and Cassandra (CQL round trip {direct_rtt:.2f} ms direct, "
            f"{proxied_rtt:.2f} ms through it; the driver was checked to know only the proxy's address). "
            "Before the first run the harness waits (up to 15 minutes) for Cassandra to finish compacting what "
            "earlier phases wrote. social-graph is restarted behind it; for each run N tweet-store replicas are "
            "started behind it and "
            "N fan-out workers, worker i writing through replica i (`FANLINE_TWEET_STORE_URL`). "
            f"{p.scale_tweets} tweets by {len(authors)} authors with {p.backlog_followers:,} followers each "
            "(spread evenly over the events topic's partitions) are posted through the gateway while no worker "
            "runs, then the N workers are started at once and drain them: rows/s from the later of 10 % of the "
            "rows and the moment the last worker was ready, to 90 %, from the workers' "
            "`fanline_timeline_rows_written_total`, polled every 0.25 s from before the first worker starts; the "
            "window starts once every worker of the run has joined the group, so the rebalances of the joins fall "
            "outside it. One pair runs first and again last; its figure, the "
            "base of the ratios, is the better of the two. CPU-seconds per 1,000 rows: user + system CPU time "
            "of each component's processes (psutil) from just before the workers start until the last row, divided by "
            "the rows; the Cassandra and Kafka JVMs are shared with anything else running on this machine, so "
            "their figures are upper bounds. A run whose machine-wide CPU utilisation reached "
            f"{CPU_BOUND_UTILISATION:.0%} of all cores is marked CPU-bound: there, more processes cannot add "
            "throughput on this machine whatever the design."
        ),
    }


def steady_rate(
    series: list[tuple[float, float]], expected: float, all_ready: float
) -> tuple[float | None, dict[str, float] | None]:
    """Rows/s from when every worker was ready (or 10 % of the rows, whichever
    is later) to 90 %: the group's steady pace, without the joins. None when
    that window holds under a fifth of the rows (the backlog was too small
    for the pace: make ``Plan.scale_tweets`` larger)."""
    t10 = crossing(series, 0.1 * expected)
    t90 = crossing(series, 0.9 * expected)
    if t10 is None or t90 is None:
        return None, None
    t0 = max(t10, all_ready)
    v0 = next((v for t, v in series if t >= t0), None)
    if v0 is None or t90 <= t0 or 0.9 * expected - v0 < 0.2 * expected:
        return None, None
    rate = (0.9 * expected - v0) / (t90 - t0)
    return rate, {"from_share": round(v0 / expected, 3), "to_share": 0.9, "seconds": round(t90 - t0, 2)}


async def _one_run(bench: Bench, count: int, proxied_env: dict[str, str], proxy_pid: int, authors: list[str]) -> dict[str, Any]:
    assert bench.system is not None
    system = bench.system
    p = bench.plan
    await asyncio.to_thread(system.stop_workers)
    await asyncio.to_thread(system.stop_replicas)
    say(f"  {count} worker(s) + {count} tweet-store replica(s) behind the proxy: starting")
    replicas = await asyncio.to_thread(system.start_replicas, count, proxied_env)
    urls = [system.replica_url(r) for r in replicas]
    # The backlog is posted with no worker running, then all N start at once:
    # posting through the proxied social-graph takes ~0.3 s a tweet, and
    # workers already running would drain it as fast as it is posted — the
    # rate measured would be the posting rate, whatever N (it was, for 4).
    base_rows = await asyncio.to_thread(bench.rows_written) or 0.0
    graph_url = f"http://127.0.0.1:{system.ports['social-graph']}/metrics"
    graph_before = await asyncio.to_thread(prometheus.scrape_all, graph_url)
    posted = await bench.post_backlog(p.scale_tweets, authors)
    expected = p.scale_tweets * (p.backlog_followers + 1)
    pids = component_pids(bench, proxy_pid)
    cpu_before = await asyncio.to_thread(cpu_snapshot, pids)
    busy0, total0 = _machine_busy_s()
    started = time.monotonic()
    # The counters are polled from before the first worker starts: the
    # workers begin draining while the later ones are still joining (each
    # join is a group rebalance), and a series begun after the last was ready
    # missed most of a fast drain (4 workers "reached" 107k rows/s that way).
    polling = asyncio.create_task(bench.wait_rows(base_rows + expected, p.drain_timeout_s, f"{count} worker(s), proxied"))
    await asyncio.to_thread(
        system.start_workers, count, 120, lambda i: {**proxied_env, "FANLINE_TWEET_STORE_URL": urls[i % len(urls)]}
    )
    all_ready = time.monotonic()
    pids = component_pids(bench, proxy_pid)  # now with the workers, which count from zero
    series = await polling
    limits = [await asyncio.to_thread(prometheus.scrape, f"{u}/metrics", "fanline_fanout_write_limit") for u in urls]
    cpu_after = await asyncio.to_thread(cpu_snapshot, pids)
    hops = await asyncio.to_thread(_hop_latencies, system, urls, graph_url, graph_before)
    shrinks = await asyncio.to_thread(_limit_events, urls)
    busy1, total1 = _machine_busy_s()
    series = [(t, v - base_rows) for t, v in series]
    rate, window = steady_rate(series, expected, all_ready)
    util = (busy1 - busy0) / (total1 - total0) if total1 > total0 else None
    verified = await verify_delivered(bench, posted)
    per_1k = cpu_per_1k(cpu_before, cpu_after, series[-1][1])
    say(
        f"  {count} worker(s): {rate or 0:,.0f} rows/s over {window}, write limits {limits}, "
        f"machine CPU {100 * (util or 0):.0f} %, CPU-s/1k rows {per_1k}"
    )
    if not verified:
        bench.notes.append(
            f"latency scaling with {count} worker(s): a sampled tweet was not in every follower's "
            "timeline after the counter reached the expected rows"
        )
    return {
        "workers": count,
        "replicas": count,
        "rows": int(series[-1][1]),
        "expected_rows": expected,
        "rows_per_s": rate and round(rate, 1),
        "drain_s": round(series[-1][0] - started, 2),
        "start_to_first_row_s": next((round(t - started, 2) for t, v in series if v > 0), None),
        "all_ready_s": round(all_ready - started, 2),
        "measured_window": window,
        "write_limit_at_end": [None if v is None else round(v, 1) for v in limits],
        "machine_cpu_utilisation": util and round(util, 3),
        "cpu_bound": None if util is None else util >= CPU_BOUND_UTILISATION,
        "cpu_s_per_1k_rows": per_1k,
        "verified_sample": verified,
        "hop_latency": hops,
        "limit_decreases_and_pages_shed": shrinks,
    }


def _limit_events(replica_urls: list[str]) -> list[dict[str, float]]:
    """Per replica (they start with each run, so totals are the run's): why
    its fan-out limit shrank (``fanline_fanout_write_limit_decreases_total``
    by cause) and the pages it refused or let expire."""
    out = []
    for url in replica_urls:
        scraped = prometheus.scrape_all(f"{url}/metrics")
        out.append(
            {
                k.split("{", 1)[1].rstrip("}"): v
                for k, v in scraped.items()
                if k.startswith(("fanline_fanout_write_limit_decreases_total{", "fanline_fanout_pages_expired_total{"))
            }
        )
    return out


def _hop_latencies(system: Any, replica_urls: list[str], graph_url: str, graph_before: dict[str, float]) -> dict[str, Any]:
    """Where a run's time went, hop by hop: the mean latency (ms) and count
    of the workers' calls to their peers, the replicas' Cassandra
    statements, and social-graph's (which outlives the run: the difference
    of two scrapes). Workers and replicas start with each run, so their
    totals are the run's."""

    def means(url: str, metric: str, before: dict[str, float] | None = None) -> list[dict[str, Any]]:
        return prometheus.histogram_means(before or {}, prometheus.scrape_all(url), metric)

    workers = [f"http://127.0.0.1:{port}/metrics" for port in system.worker_ports.values()]
    return {
        "worker_peer_calls": [m for u in workers for m in means(u, "fanline_peer_request_duration_seconds")],
        "worker_page_writes": [m for u in workers for m in means(u, "fanline_fanout_page_duration_seconds")],
        "replica_cassandra": [
            m for u in replica_urls for m in means(f"{u}/metrics", "fanline_cassandra_statement_duration_seconds")
        ],
        "social_graph_cassandra": means(graph_url, "fanline_cassandra_statement_duration_seconds", graph_before),
    }
