"""The fan-out's throughput: against its fair ceilings (``ceiling``, ``stress``, ``scaling``), where it
is latency-bound (``latency_scaling``, behind ``bench.latency_proxy``), and where its Python time
goes (``profile``, py-spy); docs/benchmark-methods.md."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from fanline_shared import cassandra as cql
from fanline_shared.config import StorageSettings

from .. import bare, probes, seed, stats
from ..context import BenchError, Ctx, balanced_authors, say, stop_process, storage, with_engines
from ..system import spawn
from .open_loop import settle

BATCH_ROWS = 10  # tweet-store's FANLINE_HOME_WRITE_BATCH_ROWS default
PAGE_SIZE = 1000  # the fan-out worker's FANLINE_FANOUT_PAGE_SIZE default


def batch_rows(ctx: Ctx) -> int:
    return int(ctx.env.get("FANLINE_HOME_WRITE_BATCH_ROWS", BATCH_ROWS))


def page_size(ctx: Ctx) -> int:
    return int(ctx.env.get("FANLINE_FANOUT_PAGE_SIZE", PAGE_SIZE))


async def write_backlog(ctx: Ctx, tweets: int, path: str, window: int, rows_per_batch: int, *, reads: bool = False) -> float:
    """The rows of ``tweets`` backlog tweets written by the bare driver: rows/s. With ``reads``, the
    drain's ceiling: each tweet's recipients are first read as the worker reads them
    (``bare.FollowerReader``, ``window`` tweets at a time) and the rate counts the reads' time too.
    Reads, then writes, not overlapped as the worker overlaps them: on a node that two cores keep
    CPU-bound, the work is what counts (docs/benchmark-methods.md)."""
    authors = [ctx.backlog_authors[t % len(ctx.backlog_authors)] for t in range(tweets)]
    recipients, read_s = [ctx.graph.followers_of(a) for a in authors], 0.0
    if reads:
        reader = await asyncio.to_thread(bare.FollowerReader, ctx.session, ctx.social_ks, page_size(ctx))
        started, limit = time.perf_counter(), asyncio.Semaphore(window)

        async def read(author: str) -> list[str]:
            async with limit:
                return await reader.followers(author)

        found = await asyncio.gather(*(read(a) for a in authors))
        read_s = time.perf_counter() - started
        if [len(f) for f in found] != [len(r) for r in recipients]:
            raise BenchError("drain ceiling: followers_active does not hold the followers the seeding wrote")
        recipients = found
    rows: list[bare.Row] = []
    for author, names in zip(authors, recipients, strict=True):
        tid = uuid.uuid1()
        rows += [(o, tid, author, 30 * 24 * 3600 - 5) for o in (author, *names)]
    rate = await bare.write_rows(ctx.session, ctx.sync_ks, rows, path, window, rows_per_batch)
    return len(rows) / (read_s + len(rows) / rate)


async def ceiling(ctx: Ctx, p: dict[str, Any]) -> None:
    s, tweets = ctx.rec.scope("ceiling"), max(1, p["tune_rows"] // (ctx.params["seed"]["backlog_followers"] + 1))
    sweep = [(path, w, batch_rows(ctx)) for path in bare.PATHS for w in p["windows"]]
    best = (0.0, ctx.best)
    for path, window, rows in [*sweep, ("driver", max(p["windows"]), 1)]:  # and the old one-row-per-request ceiling
        s("rows_per_s", rate := await write_backlog(ctx, tweets, path, window, rows), path=path, window=window, batch_rows=rows)
        say(f"  ceiling: {path}, {window} batches of {rows} in flight: {rate:,.0f} rows/s")
        best = max(best, (rate, (path, window))) if rows > 1 else best
    ctx.best = best[1]
    s("best", f"{ctx.best[0]}, {ctx.best[1]} in flight, batches of {batch_rows(ctx)}")
    s("ceiling_rows_per_s", await write_backlog(ctx, p["backlog_tweets"], *ctx.best, batch_rows(ctx)), when="after the sweep")


async def stress(ctx: Ctx, p: dict[str, Any]) -> None:
    s, tool = ctx.rec.scope("stress"), None
    for profile in ("write", "home_timeline"):
        say(f"cassandra-stress {profile}")
        keyspace = f"{ctx.prefix}_stress" + ("_home" if profile != "write" else "")
        args = bare.stress_args(profile, keyspace, p["ops"], p["threads"], ctx.tmp, batch_rows(ctx))
        try:
            out = await asyncio.to_thread(bare.stress, ctx.infra, args)
        except bare.StressUnavailable as exc:
            s.note(f"cassandra-stress {profile} not measured: {exc}")
            continue
        s("ops_per_s", out["ops_per_s"], profile=profile)
        s("rows_per_s", out["rows_per_s"] or out["ops_per_s"] * (1 if profile == "write" else batch_rows(ctx)), profile=profile)
        s("command", " ".join(args), profile=profile)
        tool = out["tool"]
    if tool is not None:
        s("tool", tool)  # once per run, not once per profile


async def timed_ceiling(ctx: Ctx, tweets: int, *, reads: bool = False) -> tuple[float, dict[str, float]]:
    """``write_backlog`` with the best setting, and the CPU per 1,000 rows it cost the harness
    (the bare driver's process) and Cassandra, to set beside a drain's."""
    pids = {"harness": os.getpid()}
    if (node := ctx.infra.cassandra.pid()) is not None:
        pids["cassandra"] = node
    before = probes.cpu_clocks(pids)
    rate = await write_backlog(ctx, tweets, *ctx.best, batch_rows(ctx), reads=reads)
    rows = tweets * (ctx.params["seed"]["backlog_followers"] + 1)
    after = probes.cpu_clocks(pids)
    return rate, {k: (after[k] - before[k]) * 1000 / rows for k in after if k in before}


async def scaling(ctx: Ctx, p: dict[str, Any]) -> None:
    s, expected = ctx.rec.scope("scaling"), p["backlog_tweets"] * (ctx.params["seed"]["backlog_followers"] + 1)
    one, ceilings = list[float | None](), {"": list[float | None](), "drain_": list[float | None]()}
    for label, count in [*((str(r + 1), 1) for r in range(p["rounds"])), *((None, n) for n in p["workers"])]:
        if count == 1:  # the write ceiling, then the drain's (the same rows after the worker's reads)
            for kind, reads in (("", False), ("drain_", True)):
                c, cpu = await timed_ceiling(ctx, p["backlog_tweets"], reads=reads)
                ceilings[kind].append(c)
                s(f"{kind}ceiling_rows_per_s", c, when=f"before one-worker round {label}")
                for component, v in cpu.items():  # the bare driver's side of the same rows, for the drain's
                    s(f"{kind}ceiling_cpu_s_per_1k_rows", v, component=component, round=label)
        await asyncio.to_thread(ctx.system.stop_workers)
        posted = await ctx.post_backlog(p["backlog_tweets"], ctx.backlog_authors)
        say(f"scaling: {count} worker(s) draining {expected:,} rows")
        before = await asyncio.to_thread(_scrape_all, ctx)  # no worker runs: theirs count from zero
        await asyncio.to_thread(ctx.system.start_workers, count, False)
        clocks: list[tuple[float, dict[str, float]]] = []
        sampling = asyncio.create_task(_sample_cpu(with_engines(ctx, ctx.system.pids), clocks))
        try:
            series = await ctx.wait_rows(expected, p["drain_timeout_s"], f"{count} worker(s)")
        finally:
            sampling.cancel()
        t10, t90 = stats.crossing(series, 0.1 * expected), stats.crossing(series, 0.9 * expected)
        rate = 0.8 * expected / (t90 - t10) if t10 is not None and t90 is not None and t90 > t10 else None
        labels = {"workers": count, **({"round": label} if label else {})}
        s("worker_rows_per_s", rate, **labels)
        # The drain's Cassandra statements by name (every process once), against the ceiling's
        # batches and, for the drain's ceiling, its follower pages.
        if ran := probes.statements(before, await asyncio.to_thread(_scrape_all, ctx)):
            for name, n in {"all": sum(ran.values()), **ran}.items():
                s("statements_per_1k_rows", 1000 * n / expected, "", statement=name, **labels)
        if t10 is not None and t90 is not None:
            for component, v in _cpu_between(clocks, series, t10, t90).items():
                s("cpu_s_per_1k_rows", v, component=component, **labels)
        s("drain_s", series[-1][0] - next((t for t, v in series if v > 0), series[0][0]), **labels)
        s("drained_rows", series[-1][1], **labels)
        one += [rate] if count == 1 else []
        deadline = time.monotonic() + 60
        while not (ok := await ctx.delivered(posted[:3])) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        if not ok:
            s.note(f"{count} worker(s): a sampled tweet was not in every follower's timeline after the drain")
    for kind, reads in (("", False), ("drain_", True)):
        after = await write_backlog(ctx, p["backlog_tweets"], *ctx.best, batch_rows(ctx), reads=reads)
        s(f"{kind}ceiling_rows_per_s", after, when="after scaling")
        s(f"{kind}ceiling_rows_per_s", stats.percentile([c for c in (*ceilings[kind], after) if c], 50), stat="median")
        s.repeated(f"worker_vs_{kind}ceiling", one, ceilings[kind])
    s("worker_rows_per_s", stats.percentile([r for r in one if r] or [0.0], 50) if any(one) else None, workers=1, stat="median")
    await ctx.restart_workers()


def _scrape_all(ctx: Ctx) -> dict[str, dict[str, float]]:
    return {n: probes.scrape(u) for n, u in ctx.system.metrics_urls().items()}


async def _sample_cpu(pids: Callable[[], dict[str, int]], into: list[tuple[float, dict[str, float]]]) -> None:
    """Append each process's CPU clock to ``into`` every 0.25 s until cancelled."""
    while True:
        into.append((time.monotonic(), probes.cpu_clocks(pids())))
        await asyncio.sleep(0.25)


def _per_component(before: dict[str, float], after: dict[str, float], rows: float) -> dict[str, float]:
    """``probes.cpu_per_1k`` of each process, the workers and tweet-store replicas each
    summed into one component (``fanout-worker-2`` into ``fanout-worker``)."""
    groups: dict[str, float] = {}
    for name, v in probes.cpu_per_1k(before, after, rows).items():
        if name not in ("fanline", "engines", "all"):
            group = next((g for g in ("fanout-worker", "tweet-store") if name.startswith(g)), name)
            groups[group] = groups.get(group, 0.0) + v
    return groups


def _cpu_between(
    samples: list[tuple[float, dict[str, float]]], series: list[tuple[float, float]], t10: float, t90: float
) -> dict[str, float]:
    """CPU-s per 1,000 rows of the workers (summed), Cassandra and Kafka over the samples
    inside [t10, t90] (the drain's steady part: no start-up, no group join), the rows
    written meanwhile interpolated from ``series``."""
    inside = [(t, c) for t, c in samples if t10 <= t <= t90]
    if len(inside) < 2:
        return {}
    (ta, ca), (tb, cb) = inside[0], inside[-1]
    ra, rb = stats.value_at(series, ta), stats.value_at(series, tb)
    if ra is None or rb is None or rb <= ra:
        return {}
    return {k: v for k, v in _per_component(ca, cb, rb - ra).items() if k in ("fanout-worker", "cassandra", "kafka")}


def steady_rate(series: list[tuple[float, float]], expected: float, all_ready: float) -> float | None:
    """Rows/s from when every worker was ready (or 10 % of the rows, the later) to 90 %;
    None when that window holds under a fifth of the rows."""
    t10, t90 = stats.crossing(series, 0.1 * expected), stats.crossing(series, 0.9 * expected)
    if t10 is None or t90 is None:
        return None
    t0 = max(t10, all_ready)
    v0 = next((v for t, v in series if t >= t0), None)
    return None if v0 is None or t90 <= t0 or 0.9 * expected - v0 < 0.2 * expected else (0.9 * expected - v0) / (t90 - t0)


async def _rtt_ms(settings: StorageSettings) -> float:
    """Median round trip of a trivial query; BenchError if the driver knows another endpoint."""
    session = await cql.open_session(settings)
    try:
        hosts = [str(h.endpoint) for h in session.cluster.metadata.all_hosts()]
        if hosts != [f"{settings.cassandra_hosts[0]}:{settings.cassandra_port}"]:
            raise BenchError(f"the driver discovered {hosts}: it would bypass the proxy")
        times = []
        for _ in range(20):
            t = time.perf_counter()
            await cql.execute(session, "SELECT release_version FROM system.local", name="bench_rtt")
            times.append((time.perf_counter() - t) * 1000)
        return stats.percentile(times, 50)
    finally:
        await cql.close_session(session)


async def latency_scaling(ctx: Ctx, p: dict[str, Any]) -> None:
    s, system = ctx.rec.scope("latency_scaling"), ctx.system
    authors = balanced_authors(ctx.tag, p["authors"], stem="s")
    await ctx.gather([ctx.sign_up(a) for a in authors], 4)
    edges = [(seed.pool_name(ctx.tag, i), a) for a in authors for i in range(p["followers"])]
    await asyncio.to_thread(seed.bulk_load_edges, ctx.session, ctx.social_ks, edges, [])
    ctx.graph.followers |= dict.fromkeys(authors, p["followers"])
    await settle(ctx, "latency_scaling", 900)
    # not base + 50: that is the gateway's metrics port (METRICS_PORT_OFFSET), which the proxy
    # met as an HTTP answer ("protocol version 72") from 2026-11-26 until this was fixed
    port = ctx.args.base_port + 150
    argv = f"-m bench.latency_proxy --listen 127.0.0.1:{port} --target {ctx.infra.cassandra_contact} --delay-ms {p['delay_ms']}"
    proxy = spawn([sys.executable, *argv.split()], ctx.logs / "latency-proxy.log")
    proxied = {"FANLINE_CASSANDRA_HOSTS": "127.0.0.1", "FANLINE_CASSANDRA_PORT": str(port)}
    rates: dict[int, float] = {}
    try:
        await asyncio.sleep(1.0)
        direct = storage(ctx.env)
        s("delay_ms", p["delay_ms"])
        s("rtt_ms", await _rtt_ms(direct), path="direct")
        s("rtt_ms", await _rtt_ms(replace(direct, cassandra_hosts=("127.0.0.1",), cassandra_port=port)), path="proxied")
        await asyncio.to_thread(system.stop_workers)
        if not system.colocate:  # colocated, each worker reads its follower pages through the stores in its process
            await asyncio.to_thread(system.restart_service, "social-graph", proxied)
        for k, count in enumerate(p["workers"]):
            rate = await _one(ctx, p, k, count, proxied, authors, proxy.pid)
            rates[count] = max(rates.get(count, 0.0), rate or 0.0)  # a count run twice: the better (the harder bar)
    finally:
        await asyncio.to_thread(system.stop_workers)
        await asyncio.to_thread(system.stop_replicas)
        if not system.colocate:
            await asyncio.to_thread(system.restart_service, "social-graph", {})
        stop_process(proxy)
        await asyncio.to_thread(system.start_workers, 1)
    for count, rate in rates.items():
        if count != 1:
            s("ratio_vs_1", stats.ratio(rate, rates.get(1)), workers=count)


async def _one(
    ctx: Ctx, p: dict[str, Any], k: int, count: int, proxied: dict[str, str], authors: list[str], proxy: int
) -> float | None:
    system, s = ctx.system, ctx.rec.scope("latency_scaling", run=k + 1, workers=count)
    await asyncio.to_thread(system.stop_workers)
    await asyncio.to_thread(system.stop_replicas)
    say(f"latency scaling: {count} worker(s) + {count} tweet-store replica(s) behind the proxy")
    # Colocated (--colocate), each worker hosts its own stores: the replicas are in its process.
    urls = [] if system.colocate else await asyncio.to_thread(system.start_replicas, count, proxied)
    base = await ctx.rows_written()  # posted with no worker running: running ones would drain it as it is posted
    posted = await ctx.post_backlog(p["tweets"], authors)
    expected, started, (busy0, total0) = p["tweets"] * (p["followers"] + 1), time.monotonic(), probes.machine_busy()
    polling = asyncio.create_task(ctx.wait_rows(base + expected, p["drain_timeout_s"], f"{count} worker(s), proxied"))
    envs = [{**proxied, **({"FANLINE_TWEET_STORE_URL": urls[i % len(urls)]} if urls else {})} for i in range(count)]
    await asyncio.to_thread(system.start_workers, count, True, envs.__getitem__)
    all_ready = time.monotonic()
    components = ("fanout-worker", "tweet-store-r", "social-graph", "cassandra", "kafka")

    def pids() -> dict[str, int]:
        found = with_engines(ctx, system.pids)().items()
        return {n: pid for n, pid in found if n.startswith(components)} | {"latency proxy": proxy}

    cpu0 = probes.cpu_clocks(pids())  # the workers count from zero
    series = [(t, v - base) for t, v in await polling]
    cpu1, (busy1, total1) = probes.cpu_clocks(pids()), probes.machine_busy()
    rate, util = steady_rate(series, expected, all_ready), 100 * (busy1 - busy0) / (total1 - total0)
    s("rows_per_s", rate)
    s("drain_s", series[-1][0] - started)
    s("machine_cpu_percent", util)
    s("cpu_bound", util >= 90)
    for component, v in _per_component(cpu0, cpu1, series[-1][1]).items():
        s("cpu_s_per_1k_rows", v, component=component)
    if not await ctx.delivered(posted[:3]):
        s.note(f"{count} worker(s): a sampled tweet was not in every follower's timeline after the drain")
    say(f"  {count} worker(s): {rate or 0:,.0f} rows/s, machine CPU {util:.0f} %")
    return rate


def summarize(text: str, area_of: dict[str, str]) -> tuple[int, Counter[str], Counter[str]]:
    """Samples, and samples by area (``area_of``: a fragment of the innermost frame's file -> its
    area) and by self-time function, of a py-spy raw (collapsed) file."""
    areas, functions = Counter[str](), Counter[str]()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if (frames := [f for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]) and count.isdigit():
            m = re.match(r"^(.*?) \(([^()]*?)(?::\d+)?\)$", frames[-1])
            func, file = m.groups() if m else (frames[-1], frames[-1])
            areas[next((area for needle, area in area_of.items() if needle in file), "other")] += int(count)
            functions[f"{func} ({'/'.join(Path(file).parts[-2:])})"] += int(count)
    return sum(areas.values()), areas, functions


async def profile(ctx: Ctx, p: dict[str, Any]) -> None:
    s = ctx.rec.scope("profile")
    if not (exe := Path(sys.executable).with_name("py-spy")).exists() and not shutil.which("py-spy"):
        s.note("py-spy not installed: no profile")
        return
    pids = {n: pid for n, pid in ctx.system.pids().items() if n in ("fanout-worker", "api", "tweet-store")}
    say(f"profile: py-spy on {', '.join(pids)} for {p['seconds']} s")
    spies, binary = {}, str(exe) if exe.exists() else "py-spy"
    for n, pid in pids.items():
        args = f"record --pid {pid} --duration {p['seconds']} --rate 100 --format raw --function --gil --full-filenames"
        args += f" --output {ctx.logs}/profile-{n}.txt"
        spies[n] = spawn([binary, *args.split()], ctx.logs / "py-spy.log")
    backlog = asyncio.create_task(ctx.post_backlog(p["backlog_tweets"], ctx.backlog_authors))
    stop_at, i, readers, refused = time.monotonic() + p["seconds"], 0, ctx.home_readers, 0
    while time.monotonic() < stop_at:
        try:
            await asyncio.gather(ctx.post_ours(readers[0], f"profile {i}"), ctx.home(readers[i % len(readers)]))
        except BenchError as exc:
            # py-spy pauses each process it samples: under the drain a request can miss the
            # gateway's deadline (503, run 731e). Counted; the profile is what this measures.
            if not exc.shed:
                raise
            refused += 1
        i += 1
        await asyncio.sleep(0.05)
    await backlog
    s("refused", refused, "")
    for name, spy in spies.items():
        await asyncio.to_thread(spy.wait)
        if not (out := ctx.logs / f"profile-{name}.txt").exists():
            s.note(f"py-spy on {name} failed (exit {spy.returncode}; see {ctx.logs / 'py-spy.log'})")
            continue
        total, areas, functions = summarize(out.read_text(), p["areas"])
        s("samples", total, service=name)
        for area, k in areas.most_common(10):
            s("area_percent", 100 * k / total, service=name, area=area)
        for func, k in functions.most_common(12):
            s("self_percent", 100 * k / total, service=name, function=func)
