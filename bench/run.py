"""Run the Fanline benchmarks (issue 4) in one go.

    python -m bench.run            # full run: bench/results/ and docs/benchmarks.md
    python -m bench.run --quick    # smoke run (a few minutes): bench/results/quick/
    python bench/run.py --quick    # the same

Starts (or reuses) the real Cassandra and Kafka through deploy/local/infra,
starts its own isolated system (keyspaces ``bench_<tag>_*``, topics
``bench.<tag>.*``, consumer group ``bench-<tag>``, ports from ``--base-port``),
runs every phase, writes the results JSON (latest + dated copy) and the
markdown page with its plots, and drops its keyspaces and topics at the end.
Progress goes to stderr with the elapsed time.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

if __name__ == "__main__" and not __package__:  # run as a script: python bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from . import driver, procs, report, results, seed, stats, stress
from .baseline import SCHEMA as BASELINE_SCHEMA
from .procs import REPO, BenchSystem, RssMonitor

sys.path.insert(0, str(REPO / "deploy" / "local"))
from fanline_shared import cassandra as cql
from fanline_shared.config import StorageSettings
from fanline_shared.domain import new_timeuuid
from infra import LocalInfra

GROUPS = results.FOLLOWER_COUNTS
PASSWORD = "bench-author-pw"
RETENTION_S = 30 * 24 * 3600
PARTITIONS = 8

# Cheap argon2 for the accounts the harness creates (as the e2e tests do):
# posting and reading never hash, only sign-up and log-in do.
SYSTEM_ENV = {
    "FANLINE_ARGON2_TIME_COST": "1",
    "FANLINE_ARGON2_MEMORY_KIB": "8192",
    "FANLINE_ARGON2_PARALLELISM": "1",
    "FANLINE_LOG_LEVEL": "WARNING",
    "FANLINE_KAFKA_IDEMPOTENCE": "true",
}


@dataclass(frozen=True)
class Plan:
    """How much of everything a run does."""

    mode: str
    posts_per_group: int  # ours, per follower count
    sync_posts: tuple[int, int, int, int]  # baseline, per follower count
    post_gap_s: float
    backlog_authors: int
    backlog_followers: int
    backlog_tweets: int
    tune_rows: int
    tune_concurrencies: tuple[int, ...]
    stress_ops: int
    stress_threads: int
    lag_authors: int
    lag_rate: float
    lag_duration_s: float
    lag_sweep_rates: tuple[float, ...]
    lag_sweep_duration_s: float
    read_rate: float
    read_block_s: float
    read_blocks: int
    readers: int
    profile_s: int
    drain_timeout_s: float


# Sized for a 2-core machine shared with other jobs, where one Cassandra node
# takes roughly 10k writes/s: the full run takes about a quarter of an hour.
QUICK = Plan(mode="quick", posts_per_group=12, sync_posts=(12, 12, 12, 6), post_gap_s=0.05,
             backlog_authors=8, backlog_followers=2000, backlog_tweets=16, tune_rows=4000,
             tune_concurrencies=(64, 256), stress_ops=30_000, stress_threads=64, lag_authors=4, lag_rate=0.5,
             lag_duration_s=16, lag_sweep_rates=(2.0,), lag_sweep_duration_s=8, read_rate=20, read_block_s=3,
             read_blocks=2, readers=10, profile_s=10, drain_timeout_s=600)
FULL = Plan(mode="full", posts_per_group=300, sync_posts=(100, 100, 100, 50), post_gap_s=0.05,
            backlog_authors=8, backlog_followers=2000, backlog_tweets=50, tune_rows=8000,
            tune_concurrencies=(32, 128, 512), stress_ops=100_000, stress_threads=64, lag_authors=4,
            lag_rate=0.5, lag_duration_s=120, lag_sweep_rates=(2.0, 4.0), lag_sweep_duration_s=60, read_rate=40,
            read_block_s=10, read_blocks=3, readers=20, profile_s=30, drain_timeout_s=3600)


class BenchError(RuntimeError):
    pass


# --- progress ------------------------------------------------------------------------------

_T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[bench +{time.monotonic() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# --- small helpers -----------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        import psutil

        mem_gb = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    return {"cores": os.cpu_count(), "cpu_model": cpu, "memory_gb": mem_gb, "platform": platform.platform(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def versions(infra: LocalInfra) -> dict[str, Any]:
    import faust
    import starlette
    import uvicorn

    import cassandra as driver_pkg
    from fanline_api import __version__ as fanline_version

    return {**infra.versions(), "fanline": fanline_version, "python": platform.python_version(),
            "cassandra_driver": driver_pkg.__version__, "faust": faust.__version__,
            "httpx": httpx.__version__, "starlette": starlette.__version__, "uvicorn": uvicorn.__version__}


def partition_of(key: str, partitions: int = PARTITIONS) -> int:
    from aiokafka.partitioner import DefaultPartitioner

    return int(DefaultPartitioner()(key.encode(), list(range(partitions)), list(range(partitions))))


def balanced_authors(tag: str, count: int) -> list[str]:
    """``count`` author names spread evenly over the events topic's partitions
    (key = the lower-cased author), so 1, 2 and 4 workers get equal shares."""
    per = max(1, count // PARTITIONS)
    chosen: list[str] = []
    used: dict[int, int] = {}
    k = 0
    while len(chosen) < count:
        name = f"a{tag}b{k:03d}"
        k += 1
        p = partition_of(name)
        if used.get(p, 0) < per or k > 5000:
            used[p] = used.get(p, 0) + 1
            chosen.append(name)
    return chosen


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


class Bench:
    def __init__(self, plan: Plan, args: argparse.Namespace) -> None:
        self.plan = plan
        self.args = args
        self.doc = results.empty_result()
        self.details: dict[str, Any] = self.doc["details"]
        self.notes: list[str] = []
        self.details["notes"] = self.notes
        self.tag = uuid.uuid4().hex[:4]
        self.prefix = f"bench_{self.tag}"
        self.infra = LocalInfra(log=lambda m: say(f"infra: {m}"))
        self.logs = REPO / "test-artifacts" / f"bench-{self.tag}"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"fanline-bench-{self.tag}-"))
        self.system: BenchSystem | None = None
        self.monitor: RssMonitor | None = None
        self.session: Any = None
        self.client: httpx.AsyncClient | None = None
        self.baseline_proc: Any = None
        self.tokens: dict[str, str] = {}
        self.graph = seed.Graph(self.tag)
        self.best_concurrency = 128
        self.best: dict[str, Any] | None = None
        self.stress_keyspace = f"{self.prefix}_stress"
        self._verify_stmts: dict[int, Any] = {}
        self.backlog_authors: list[str] = []
        self.lag_authors: list[str] = []
        self.readers: list[str] = []

    # names -----------------------------------------------------------------------
    @property
    def social_ks(self) -> str:
        return f"{self.prefix}_social_graph"

    @property
    def tweet_ks(self) -> str:
        return f"{self.prefix}_tweet_store"

    @property
    def sync_ks(self) -> str:
        return f"{self.prefix}_sync"

    def group_author(self, n: str) -> str:
        return f"a{self.tag}p{n}"

    @property
    def api(self) -> str:
        assert self.system is not None
        return self.system.url("api")

    @property
    def baseline_url(self) -> str:
        return f"http://127.0.0.1:{self.args.base_port + 20}"

    @property
    def http(self) -> httpx.AsyncClient:
        assert self.client is not None
        return self.client

    # lifecycle ----------------------------------------------------------------------
    async def setup(self) -> None:
        say(f"run {self.tag} ({self.plan.mode}); logs in {self.logs}")
        await asyncio.to_thread(self.infra.check_prerequisites)
        await asyncio.to_thread(self.infra.start)
        host, port = self.infra.cassandra_contact.rsplit(":", 1)
        env = {
            **SYSTEM_ENV,
            "FANLINE_CASSANDRA_HOSTS": host,
            "FANLINE_CASSANDRA_PORT": port,
            "FANLINE_KEYSPACE_PREFIX": self.prefix,
            "FANLINE_EVENTS_TOPIC": f"bench.{self.tag}.events",
            "FANLINE_DLQ_TOPIC": f"bench.{self.tag}.dlq",
            "FANLINE_WORKER_GROUP": f"bench-{self.tag}",
            "FANLINE_TOPIC_PARTITIONS": str(PARTITIONS),
        }
        experiment = dict(item.split("=", 1) for item in self.args.env)
        env.update(experiment)
        if experiment:
            self.details["experiment"] = {"env": experiment}
            self.notes.append(f"EXPERIMENT, not the product's defaults: {experiment}")
        self.system = BenchSystem(data_dir=self.tmp / "data", base_port=self.args.base_port, backend="cassandra",
                                  kafka_bootstrap=self.infra.kafka_bootstrap, extra_env=env, log_dir=self.logs)
        say(f"starting social-graph, tweet-store and the gateway on ports {self.args.base_port}+ "
            f"(keyspaces {self.prefix}_*)")
        await asyncio.to_thread(self.system.start_core)
        say("starting one fan-out worker")
        await asyncio.to_thread(self.system.start_workers, 1)
        self.monitor = RssMonitor(self.system)
        self.monitor.start()
        storage = StorageSettings(backend="cassandra", data_dir=self.tmp, cassandra_hosts=(host,),
                                  cassandra_port=int(port), keyspace_prefix=self.prefix, replication_factor=1,
                                  local_dc="datacenter1", request_timeout_s=30.0)
        self.session = await cql.open_session(storage)
        self.client = httpx.AsyncClient(timeout=60.0, limits=httpx.Limits(max_connections=200,
                                                                           max_keepalive_connections=200))
        self.doc["versions"] = versions(self.infra)

    async def teardown(self) -> None:
        if self.client is not None:
            await self.client.aclose()
        procs.stop_process(self.baseline_proc)
        if self.monitor is not None:
            self.monitor.stop()
            self.doc["peak_rss_mb"] = {s: self.monitor.peak_mb().get(s) for s in results.SERVICES}
            loads = self.monitor.load_samples
            self.doc["machine"]["load_average"] = ({"min": round(min(loads), 2), "mean": round(sum(loads) / len(loads), 2),
                                                    "max": round(max(loads), 2), "samples": len(loads)} if loads else {})
        if self.system is not None:
            await asyncio.to_thread(self.system.stop)
        if self.session is not None:
            if not self.args.keep:
                for ks in (self.social_ks, self.tweet_ks, self.sync_ks, self.stress_keyspace):
                    try:
                        await cql.execute(self.session, f"DROP KEYSPACE IF EXISTS {ks}", name="bench_drop")
                    except Exception as exc:  # noqa: BLE001 - cleanup is best effort
                        say(f"could not drop {ks}: {exc}")
            await cql.close_session(self.session)
        if not self.args.keep:
            await self.delete_topics()
        shutil.rmtree(self.tmp, ignore_errors=True)

    async def delete_topics(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=self.infra.kafka_bootstrap)
        try:
            await admin.start()
            topics = [t for t in await admin.list_topics()
                      if t.startswith((f"bench.{self.tag}.", f"bench-{self.tag}"))]
            if topics:
                await admin.delete_topics(topics)
        except Exception as exc:  # noqa: BLE001 - cleanup is best effort
            say(f"could not delete topics: {exc}")
        finally:
            await admin.close()

    # API helpers ---------------------------------------------------------------------
    async def sign_up(self, name: str) -> str:
        r = await self.http.post(f"{self.api}/v1/users", json={"username": name, "password": PASSWORD})
        if r.status_code not in (200, 201):
            raise BenchError(f"sign-up of {name} failed: {r.status_code} {r.text[:200]}")
        return await self.login(name, PASSWORD)

    async def login(self, name: str, password: str) -> str:
        r = await self.http.post(f"{self.api}/v1/sessions", json={"username": name, "password": password})
        if r.status_code not in (200, 201):
            raise BenchError(f"log-in of {name} failed: {r.status_code} {r.text[:200]}")
        token = str(r.json()["token"])
        self.tokens[name] = token
        return token

    async def post(self, url: str, author: str, body: str) -> tuple[float, str, float]:
        """(latency ms, tweet id, wall-clock time of the answer)."""
        headers = {"authorization": f"Bearer {self.tokens[author]}"}
        started = time.perf_counter()
        r = await self.http.post(url, json={"body": body}, headers=headers)
        elapsed = (time.perf_counter() - started) * 1000
        answered = time.time()
        if r.status_code != 201:
            raise BenchError(f"POST {url} as {author}: {r.status_code} {r.text[:200]}")
        return elapsed, str(r.json()["id"]), answered

    async def post_ours(self, author: str, body: str) -> tuple[float, str, float]:
        return await self.post(f"{self.api}/v1/tweets", author, body)

    async def gather_limited(self, coros: list[Awaitable[Any]], limit: int) -> list[Any]:
        sem = asyncio.Semaphore(limit)

        async def one(c: Awaitable[Any]) -> Any:
            async with sem:
                return await c

        return await asyncio.gather(*(one(c) for c in coros))

    # worker metrics ----------------------------------------------------------------------
    def rows_written(self) -> float | None:
        """The sum of ``fanline_timeline_rows_written_total`` over running workers."""
        assert self.system is not None
        total, seen = 0.0, False
        for name in self.system.running_workers():
            port = self.system.worker_ports.get(name)
            value = procs.scrape(f"http://127.0.0.1:{port}/metrics", "fanline_timeline_rows_written_total")
            if value is not None:
                total += value
                seen = True
        return total if seen else None

    async def wait_rows(self, target: float, timeout_s: float, label: str,
                        interval: float = 0.25) -> list[tuple[float, float]]:
        """Poll the workers' row counter until it reaches ``target``; the
        (monotonic time, rows) series."""
        series: list[tuple[float, float]] = []
        started = time.monotonic()
        last_say = started
        while True:
            value = await asyncio.to_thread(self.rows_written)
            now = time.monotonic()
            if value is not None:
                series.append((now, value))
                if value >= target:
                    return series
            if now - last_say >= 10:
                last_say = now
                rate = ""
                if len(series) >= 2 and series[-1][0] > series[0][0]:
                    rate = f", {(series[-1][1] - series[0][1]) / (series[-1][0] - series[0][0]):,.0f} rows/s"
                say(f"  {label}: {value or 0:,.0f} / {target:,.0f} rows{rate}")
            if now - started > timeout_s:
                raise BenchError(f"{label}: only {value} of {target:,.0f} rows after {timeout_s:.0f}s")
            await asyncio.sleep(interval)

    async def home_rows(self, tweet_id: uuid.UUID, owners: list[str]) -> dict[str, int]:
        """owner -> writetime (µs) of its row for ``tweet_id``; owners without
        the row are absent. Chunked multi-partition reads (one node: cheap)."""
        found: dict[str, int] = {}
        for i in range(0, len(owners), 100):
            chunk = owners[i:i + 100]
            stmt = self._verify_stmts.get(len(chunk))
            if stmt is None:
                stmt = await asyncio.to_thread(
                    cql.prepare, self.session,
                    f"SELECT owner_lc, WRITETIME(author_lc) AS wt FROM {self.tweet_ks}.home_timeline "
                    f"WHERE owner_lc IN ({','.join('?' * len(chunk))}) AND tweet_id = ?")
                self._verify_stmts[len(chunk)] = stmt
            rows = await cql.execute(self.session, stmt, (*chunk, tweet_id), name="bench_verify")
            found.update({r.owner_lc: int(r.wt) for r in rows})
        return found

    # --- phases ------------------------------------------------------------------------------
    async def seed(self) -> None:
        p = self.plan
        say("seeding: authors through the API")
        self.backlog_authors = balanced_authors(self.tag, p.backlog_authors)
        self.lag_authors = [f"a{self.tag}l{j}" for j in range(p.lag_authors)]
        authors = [self.group_author(n) for n in GROUPS] + self.backlog_authors + self.lag_authors
        await self.gather_limited([self.sign_up(a) for a in authors], 4)
        for n in GROUPS:
            self.graph.followers[self.group_author(n)] = int(n)
        for a in self.backlog_authors:
            self.graph.followers[a] = p.backlog_followers
        for a in self.lag_authors:
            self.graph.followers[a] = 1000
        started = time.monotonic()
        rows, statements = await asyncio.to_thread(seed.bulk_load_social_graph, self.session, self.social_ks,
                                                   self.graph, say)
        took = time.monotonic() - started
        say(f"  social-graph bulk load: {rows:,} rows in {statements:,} statements, {took:.1f}s")
        await cql.migrate(self.session, self.sync_ks, 1, [BASELINE_SCHEMA])
        copied = await asyncio.to_thread(seed.bulk_load_followers_table, self.session, self.sync_ks, self.graph,
                                         [self.group_author(n) for n in GROUPS])
        # Sanity: the service sees the bulk-loaded edges.
        r = await self.http.get(f"{self.api}/v1/users/{self.group_author('10000')}")
        seen = r.json().get("followers_count") if r.status_code == 200 else None
        if seen != 10000:
            raise BenchError(f"social-graph reports {seen} followers for the 10,000-follower author")
        say(f"  readers: logging in {p.readers} follower accounts")
        self.readers = [seed.pool_name(self.tag, i) for i in range(p.readers)]
        await self.gather_limited([self.login(u, seed.POOL_PASSWORD) for u in self.readers], 4)
        self.details["seeding"] = (
            f"Authors ({len(authors)}) were created and logged in through the public API. Their followers — a pool of "
            f"{self.graph.pool_size:,} accounts; the author with N followers is followed by the first N of the pool — were "
            f"**bulk-loaded by the harness** straight into social-graph's keyspace ({rows:,} rows in {took:.1f} s: "
            "`users`, `users_by_prefix`, `following`, `followers`, `follow_counts`, the same rows social-graph "
            "writes), with prepared statements and the driver's `execute_concurrent` (rows of one partition in "
            "unlogged single-partition batches of 100), because 10,000+ "
            "sign-ups (argon2 each) and follows (one LWT each) through the API would dominate the run without "
            "measuring anything asked here. This is harness-only; the product never writes another service's "
            f"tables. The synchronous baseline got the same edges in its own `followers` table ({copied:,} rows). "
            f"The system ran with cheap argon2 parameters (time 1, 8 MiB), as the end-to-end tests do; no measured "
            f"request hashes a password. Backlog authors' names were chosen so that they spread evenly over the "
            f"{PARTITIONS} partitions of the events topic.")

    def backlog_rows(self, tweets: int) -> list[driver.Row]:
        rows: list[driver.Row] = []
        ttl = RETENTION_S - 5
        for t in range(tweets):
            author = self.backlog_authors[t % len(self.backlog_authors)]
            tid = new_timeuuid()
            rows.append((author, tid, author, ttl))
            rows.extend((f, tid, author, ttl) for f in self.graph.followers_of(author))
        return rows

    async def phase_ceiling(self) -> None:
        p = self.plan
        say("bare-driver ceiling: tuning the in-flight window")
        stmt = await asyncio.to_thread(driver.home_insert, self.session, self.sync_ks)
        per_tweet = p.backlog_followers + 1
        sample_tweets = max(1, p.tune_rows // per_tweet)
        tuning = await driver.tune(self.session, stmt, lambda: self.backlog_rows(sample_tweets), p.tune_concurrencies, say)
        self.best = max(tuning, key=lambda t: t["rows_per_s"])
        bridge = [t for t in tuning if t["path"].startswith("fanline_shared")]
        self.best_concurrency = int(max(bridge, key=lambda t: t["rows_per_s"])["concurrency"]) if bridge else 128
        fan = self.details.setdefault("fanout", {})
        fan["bare_driver_tuning"] = tuning
        await self.measure_ceiling("before the worker runs")

    async def measure_ceiling(self, when: str) -> None:
        """The backlog's rows, written by the bare driver with the tuned settings.
        Measured before and after the scaling runs; the ceiling is the best."""
        if self.best is None:
            return
        stmt = await asyncio.to_thread(driver.home_insert, self.session, self.sync_ks)
        rows = self.backlog_rows(self.plan.backlog_tweets)
        say(f"bare-driver ceiling ({when}): {len(rows):,} rows with {self.best['path']}, "
            f"concurrency {self.best['concurrency']}")
        rate = await driver.run_best(self.session, stmt, rows, self.best)
        say(f"  bare driver: {rate:,.0f} rows/s")
        fan = self.details.setdefault("fanout", {})
        runs = fan.setdefault("bare_driver_runs", [])
        runs.append({**self.best, "when": when, "rows": len(rows), "rows_per_s": round(rate, 1)})
        self.doc["fanout_rows_per_s"]["bare_driver"] = max(r["rows_per_s"] for r in runs)

    async def phase_ceiling_again(self) -> None:
        await self.measure_ceiling("after the scaling runs")

    async def phase_stress(self) -> None:
        p = self.plan
        say(f"cassandra-stress: write n={p.stress_ops:,}, {p.stress_threads} threads")
        fan = self.details.setdefault("fanout", {})
        try:
            out = await asyncio.to_thread(stress.run_write, self.infra, self.stress_keyspace, p.stress_ops,
                                          p.stress_threads, say)
        except stress.StressUnavailable as exc:
            fan["stress_note"] = (f"`cassandra_stress_ops` is null: {exc}. The bare-driver loop is the ceiling the "
                                  "worker target is judged against.")
            self.notes.append(f"cassandra-stress not measured: {exc}")
            self.doc["versions"]["cassandra_stress"] = None
            return
        self.doc["fanout_rows_per_s"]["cassandra_stress_ops"] = out["ops_per_s"]
        self.doc["versions"]["cassandra_stress"] = out["tool"]
        fan["stress"] = {"args": out["args"], "output_tail": out["output_tail"]}
        fan["stress_note"] = (
            f"cassandra-stress: `{out['args']}` — {out['tool']}. Apache publishes no `cassandra-stress` artifact to "
            "Maven Central and no 5.0 binary tarball there (the newest `org.apache.cassandra:apache-cassandra:*:bin` "
            "tarball is 4.0-alpha2), so the 4.0-alpha2 tool, with its own libraries, drives the 5.0 node over the "
            "native protocol. Its rows (one 32-byte column, 10-byte key) are about the size of a home-timeline row; "
            "it runs on the JVM with 64 client threads, so it shows what the node can take, not what one Python "
            "process can send.")
        say(f"  cassandra-stress: {out['ops_per_s']:,.0f} ops/s")

    async def post_backlog(self, tweets: int) -> list[tuple[str, str]]:
        """Post ``tweets`` from the backlog authors (round robin); (author, id)."""
        async def one(i: int) -> tuple[str, str]:
            author = self.backlog_authors[i % len(self.backlog_authors)]
            _, tid, _ = await self.post_ours(author, f"backlog tweet {i}")
            return author, tid

        return list(await self.gather_limited([one(i) for i in range(tweets)], 8))

    async def verify_delivered(self, posted: list[tuple[str, str]], sample: int = 3) -> bool:
        ok = True
        for author, tid in random.sample(posted, min(sample, len(posted))):
            owners = [author.lower(), *self.graph.followers_of(author)]
            found = await self.home_rows(uuid.UUID(tid), owners)
            if len(found) != len(owners):
                ok = False
        return ok

    async def phase_scaling(self) -> None:
        assert self.system is not None
        p = self.plan
        runs: dict[str, Any] = {}
        # One worker is measured first and again last, as the bare-driver
        # ceiling is measured before and after: each side is the better of two
        # measurements around the same stretch of time on this noisy machine.
        for label, count in (("1", 1), ("2", 2), ("4", 4), ("1 again", 1)):
            say(f"scaling: {count} worker(s): stopping workers, posting a backlog of {p.backlog_tweets} tweets "
                f"× {p.backlog_followers:,} followers")
            await asyncio.to_thread(self.system.stop_workers)
            posted = await self.post_backlog(p.backlog_tweets)
            expected = p.backlog_tweets * (p.backlog_followers + 1)
            say(f"  starting {count} worker(s); draining {expected:,} rows")
            started = time.monotonic()
            await asyncio.to_thread(self.system.spawn_workers, count)
            series = await self.wait_rows(expected, p.drain_timeout_s, f"{count} worker(s)")
            verified = await self.verify_delivered(posted)
            deadline = time.monotonic() + 60
            while not verified and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                verified = await self.verify_delivered(posted)
            t10, t90 = crossing(series, 0.1 * expected), crossing(series, 0.9 * expected)
            first = next((t for t, v in series if v > 0), None)
            done = series[-1][0]
            rate = 0.8 * expected / (t90 - t10) if t10 is not None and t90 is not None and t90 > t10 else None
            runs[label] = {
                "rows": int(series[-1][1]), "expected_rows": expected, "rows_per_s_10_90": rate and round(rate, 1),
                "drain_s": round(done - (first or started), 2), "start_to_first_row_s": round((first or started) - started, 2),
                "verified_sample": verified,
            }
            if rate is not None:
                best = max(rate, self.doc["scaling_rows_per_s"].get(str(count)) or 0.0)
                self.doc["scaling_rows_per_s"][str(count)] = round(best, 1)
            say(f"  {count} worker(s): {rate or 0:,.0f} rows/s (10-90 % window), drained in {done - (first or started):.1f}s")
            if not verified:
                self.notes.append(f"scaling with {count} worker(s): a sampled tweet was not in every follower's "
                                  "timeline after the counter reached the expected rows")
        self.doc["scaling_rows_per_s"]["cores"] = os.cpu_count()
        self.doc["fanout_rows_per_s"]["worker"] = self.doc["scaling_rows_per_s"]["1"]
        self.details["scaling"] = {"runs": runs}
        fan = self.details.setdefault("fanout", {})
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
            "of up to 10 rows grouped by replica (one request per batch). **Bare driver:** the same number of rows of the "
            "same shape, written by the harness process with tweet-store's prepared `INSERT … USING TTL ?` and the "
            "best (path, in-flight window) found by the tuning sweep below, into an identical table in the "
            "baseline's keyspace — once before and once after the worker runs; the ceiling is the better of the "
            "two (the harder bar for the worker). Likewise one worker drains the backlog first and again last (after "
            "the 2- and 4-worker runs), and its figure is the better of those two runs; both runs are in the "
            "scaling table.")
        await asyncio.to_thread(self.system.stop_workers)
        say("scaling done; back to one worker")
        await asyncio.to_thread(self.system.start_workers, 1)

    async def phase_post_latency(self) -> None:
        p = self.plan
        say(f"post latency: starting the synchronous baseline (window {self.best_concurrency})")
        assert self.system is not None
        self.baseline_proc = await asyncio.to_thread(
            procs.spawn_baseline, sys.executable, self.args.base_port + 20, self.sync_ks, self.system.url("social-graph"),
            self.infra.cassandra_contact, self.best_concurrency, self.logs / "sync-baseline.log")
        if self.monitor is not None:
            self.monitor.watch("sync-baseline", self.baseline_proc.pid)
        ours: dict[str, list[float]] = {n: [] for n in GROUPS}
        sync: dict[str, list[float]] = {n: [] for n in GROUPS}
        sync_targets = dict(zip(GROUPS, p.sync_posts, strict=True))
        rows_before = await asyncio.to_thread(self.rows_written) or 0.0
        # Warm both paths up (connections, prepared statements, JIT of the node).
        for n in GROUPS:
            await self.post_ours(self.group_author(n), "warm-up")
            await self.post(f"{self.baseline_url}/tweets", self.group_author(n), "warm-up")
        expected_rows = sum(int(n) + 1 for n in GROUPS)
        say(f"post latency: {p.posts_per_group} posts per group (ours), {p.sync_posts} (sync), interleaved")
        scraped_before = await asyncio.to_thread(self.scrape_services)
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
                author = self.group_author(n)
                if len(ours[n]) < p.posts_per_group:
                    ms, _, _ = await self.post_ours(author, f"post {i}")
                    ours[n].append(ms)
                    sequence.append((time.monotonic() - phase_t0, "ours", n, ms))
                    expected_rows += int(n) + 1
                    await asyncio.sleep(p.post_gap_s)
                if len(sync[n]) < sync_targets[n]:
                    ms, _, _ = await self.post(f"{self.baseline_url}/tweets", author, f"sync post {i}")
                    sync[n].append(ms)
                    sequence.append((time.monotonic() - phase_t0, "sync", n, ms))
                    await asyncio.sleep(p.post_gap_s)
                i += 1
            if time.monotonic() - last_say >= 10:
                last_say = time.monotonic()
                say("  " + ", ".join(f"{n}: {len(ours[n])}/{len(sync[n])}" for n in GROUPS) + " (ours/sync samples)")
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.logs / "post-samples.csv").write_text(
            "answered_s,system,followers,ms\n" + "".join(f"{t:.3f},{s},{n},{ms:.2f}\n" for t, s, n, ms in sequence))
        for n in GROUPS:
            self.doc["post_latency_ms"]["ours"][n] = stats.p50_p99(ours[n])
            self.doc["post_latency_ms"]["sync_baseline"][n] = stats.p50_p99(sync[n])
            say(f"  {int(n):>6,} followers: ours p50/p99 {stats.percentile(ours[n], 50):.1f}/"
                f"{stats.percentile(ours[n], 99):.1f} ms, sync {stats.percentile(sync[n], 50):.1f}/"
                f"{stats.percentile(sync[n], 99):.1f} ms")
        scraped_after = await asyncio.to_thread(self.scrape_services)
        procs.stop_process(self.baseline_proc)
        self.baseline_proc = None
        self.details["post_latency"] = {
            "breakdown_ms": self.breakdown(scraped_before, scraped_after),
            "samples": {n: {"ours": len(ours[n]), "sync_baseline": len(sync[n])} for n in GROUPS},
            "summary": {n: {"ours": stats.summary(ours[n]), "sync_baseline": stats.summary(sync[n])} for n in GROUPS},
            "sync_concurrency": self.best_concurrency,
            "method": (
                "Requests are sent one at a time (closed loop, "
                f"{p.post_gap_s * 1000:.0f} ms pause after each), one author per follower count, and the four "
                "follower counts and the two systems are **interleaved** (a shuffled round over the groups, ours "
                "then the baseline) so that background load — the worker fanning out earlier posts, other people's "
                "jobs on the machine — falls on every column alike. One warm-up post per author and system is not "
                "counted. The fan-out worker runs throughout (on the same 2 cores), as it would in production."),
        }
        rows_now = await asyncio.to_thread(self.rows_written) or 0.0
        pending = rows_before + expected_rows - rows_now
        say(f"post latency done; the worker still has {max(0, pending):,.0f} of {expected_rows:,} rows to fan out: "
            "skipping them (stop the worker, move the group's offsets to the end, start it again)")
        assert self.system is not None
        await asyncio.to_thread(self.system.stop_workers)
        # The same posts with no fan-out running anywhere on the machine: shows
        # how much of ours' latency is the co-located worker's load.
        say("  ours again with the worker stopped (for comparison)")
        paused: dict[str, list[float]] = {n: [] for n in GROUPS}
        for i in range(p.posts_per_group):
            order = list(GROUPS)
            random.shuffle(order)
            for n in order:
                ms, _, _ = await self.post_ours(self.group_author(n), f"paused post {i}")
                paused[n].append(ms)
                await asyncio.sleep(p.post_gap_s)
        self.details["post_latency"]["ours_worker_stopped"] = {n: stats.summary(paused[n]) for n in GROUPS}
        await self.skip_backlog()
        await asyncio.to_thread(self.system.start_workers, 1)
        self.details["post_latency"]["fanout_rows"] = {"expected": expected_rows, "skipped": max(0, int(pending))}
        self.details["post_latency"]["method"] += (
            f" The worker had fanned out {expected_rows - max(0, int(pending)):,} of the phase's {expected_rows:,} "
            "home-timeline rows when it ended; the rest (the 10,000-follower author's backlog) was skipped by moving "
            "the consumer group's offsets to the end, so later phases start with an idle worker.")

    def scrape_services(self) -> dict[str, dict[str, float]]:
        assert self.system is not None
        return {name: procs.scrape_all(self.system.url(name) + "/metrics")
                for name in ("api", "tweet-store", "social-graph")}

    @staticmethod
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

    async def skip_backlog(self) -> None:
        """Commit the events topic's end offsets for the (stopped) worker group."""
        from aiokafka import AIOKafkaConsumer, TopicPartition
        from aiokafka.errors import KafkaError

        topic = f"bench.{self.tag}.events"
        deadline = time.monotonic() + 60
        while True:
            consumer = AIOKafkaConsumer(bootstrap_servers=self.infra.kafka_bootstrap, group_id=f"bench-{self.tag}",
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

    async def phase_delivery_lag(self) -> None:
        p = self.plan
        lags, head = await self._lag_run(p.lag_rate, p.lag_duration_s)
        self.doc["delivery_lag_ms"] = {"followers": 1000, "rate_per_s": p.lag_rate,
                                       **(stats.p50_p99(lags, 1) or {"p50": None, "p99": None})}
        self.details["delivery_lag"] = {
            **head,
            "samples_ms": [round(x, 1) for x in lags],
            "method": (
                f"{len(self.lag_authors)} authors, each followed by the same 1,000 accounts, post in turn at a steady "
                f"{p.lag_rate:g} tweets/s (open loop) for {p.lag_duration_s:.0f} s while one worker runs. For each "
                "tweet, from the moment its 201 arrives: (a) the harness reads a sample of five followers' home "
                "timelines in Cassandra every 20 ms (the last follower in name order, whose page is written last, "
                "and four at random) until the tweet is in all five; (b) afterwards it reads all 1,001 rows "
                "(followers + author) with their `WRITETIME`, which is when tweet-store issued each write. A tweet's "
                "lag is the later of the two — the last of its 1,001 rows written, and readable in the sampled "
                "timelines — so every follower is covered and the figure errs on the slow side. Tweets missing any "
                "row at the end count as incomplete."),
        }
        # The same measurement at higher posting rates, one after another
        # (each starts once the previous one's tweets are all delivered): where
        # the lag starts to grow is the fan-out's capacity while it yields.
        if not p.lag_sweep_rates:
            return
        runs = [{"rate_per_s": p.lag_rate, **head}]
        for rate in p.lag_sweep_rates:
            _, run = await self._lag_run(rate, p.lag_sweep_duration_s)
            runs.append({"rate_per_s": rate, **run})
        rates = ", ".join(f"{r:g}" for r in p.lag_sweep_rates)
        self.details["delivery_lag_sweep"] = {
            "runs": runs,
            "method": (
                f"After the run above, the same authors and followers post at {rates} tweets/s for "
                f"{p.lag_sweep_duration_s:.0f} s each, measured the same way. Only the posting rate changes: each "
                "1,000-follower tweet is 1,001 home-timeline rows, so N tweets/s ask the fan-out for about "
                "N × 1,000 rows/s while tweet-store is also serving the posts. A lag that grows through a run "
                "instead of settling means the rate is above what the fan-out delivers while it yields to users."),
        }

    async def _lag_run(self, rate: float, duration_s: float) -> tuple[list[float], dict[str, Any]]:
        """Post ``rate`` tweets/s for ``duration_s`` from the lag authors and
        time each one until it is in every follower's home timeline: the lags
        of the complete tweets (ms) and a summary of the run."""
        total = int(rate * duration_s)
        say(f"delivery lag: {total} tweets from {len(self.lag_authors)} authors with 1,000 followers, "
            f"{rate:g}/s for {duration_s:.0f}s")
        read = await asyncio.to_thread(cql.prepare, self.session,
                                       f"SELECT tweet_id FROM {self.tweet_ks}.home_timeline WHERE owner_lc = ? AND tweet_id = ?")
        followers = self.graph.followers_of(self.lag_authors[0])  # the same 1,000 for every lag author
        polled: dict[str, float] = {}
        answered: dict[str, tuple[float, str]] = {}
        lateness: list[float] = []

        async def watch(tid: str) -> None:
            """Live reads of a sample of followers (the last in name order, whose
            page is written last, plus random ones) until all have the row."""
            sample = [followers[-1], *random.sample(followers[:-1], 4)]
            tweet_id = uuid.UUID(tid)
            deadline = time.monotonic() + 120
            pending = list(sample)
            while pending and time.monotonic() < deadline:
                found = await cql.execute_concurrent(self.session, read, [(o, tweet_id) for o in pending],
                                                     name="bench_lag_poll", concurrency=8)
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
            author = self.lag_authors[i % len(self.lag_authors)]
            _, tid, when = await self.post_ours(author, f"lag tweet {i} at {rate:g}/s")
            answered[tid] = (when, author)
            await watch(tid)

        start = time.monotonic() + 0.5
        tasks = [asyncio.create_task(one(i, start + i / rate)) for i in range(total)]
        await asyncio.gather(*tasks)
        say("  verifying every follower's row (writetime) for each tweet")
        lags, lags_written, lags_polled, incomplete = [], [], [], 0
        for tid, (when, author) in answered.items():
            owners = [author.lower(), *followers]
            rows = await self.home_rows(uuid.UUID(tid), owners)
            if len(rows) != len(owners) or tid not in polled:
                incomplete += 1
                continue
            last_write = max(rows.values()) / 1e6
            lw, lp = (last_write - when) * 1000, (polled[tid] - when) * 1000
            lags_written.append(lw)
            lags_polled.append(lp)
            lags.append(max(lw, lp))
        if incomplete:
            self.notes.append(f"delivery lag at {rate:g}/s: {incomplete} of {len(answered)} tweets were not in every "
                              "follower's timeline")
        if lags:
            say(f"  lag p50 {stats.percentile(lags, 50):,.0f} ms, p99 {stats.percentile(lags, 99):,.0f} ms "
                f"({len(lags)} tweets)")
        return lags, {
            "tweets": len(answered), "complete": len(lags), "incomplete": incomplete,
            "summary": stats.summary(lags, 1), "last_row_written_ms": stats.summary(lags_written, 1),
            "sample_readable_ms": stats.summary(lags_polled, 1),
            "max_send_lateness_ms": round(max(lateness, default=0) * 1000, 1),
        }

    async def phase_read_path(self) -> None:
        p = self.plan
        say(f"read path: GET /v1/timeline vs raw CQL at {p.read_rate:g}/s, {p.read_blocks} × {p.read_block_s:.0f}s blocks each")
        raw = await asyncio.to_thread(driver.RawReader, self.session, self.tweet_ks, self.social_ks)
        token_hashes = {u: hashlib.sha256(self.tokens[u].encode()).hexdigest() for u in self.readers}
        api_ms: list[float] = []
        raw_ms: list[float] = []
        raw_auth_ms: list[float] = []
        raw_slice_ms: list[float] = []
        short_pages = 0
        raw_short_pages = 0

        async def api_call(reader: str) -> float:
            nonlocal short_pages
            started = time.perf_counter()
            r = await self.http.get(f"{self.api}/v1/timeline", params={"limit": 20},
                                    headers={"authorization": f"Bearer {self.tokens[reader]}"})
            took = (time.perf_counter() - started) * 1000
            if r.status_code != 200:
                raise BenchError(f"GET /v1/timeline: {r.status_code} {r.text[:200]}")
            if len(r.json()["items"]) < 20:
                short_pages += 1
            return took

        async def raw_call(reader: str, with_session: bool, hydrate: bool = True) -> float:
            nonlocal raw_short_pages
            started = time.perf_counter()
            found = await raw.page(reader, 20, token_hashes[reader] if with_session else None, hydrate=hydrate)
            took = (time.perf_counter() - started) * 1000
            if found < 20:  # the baseline must read what the API returns, or it measures nothing
                raw_short_pages += 1
            return took

        async def block(kind: str, sink: list[float]) -> None:
            n = int(p.read_rate * p.read_block_s)
            start = time.monotonic() + 0.2

            async def one(i: int) -> None:
                delay = start + i / p.read_rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                reader = self.readers[i % len(self.readers)]
                if kind == "api":
                    sink.append(await api_call(reader))
                else:
                    sink.append(await raw_call(reader, kind != "raw", hydrate=kind != "slice+session"))

            await asyncio.gather(*(one(i) for i in range(n)))

        # Warm up both paths.
        for reader in self.readers:
            await api_call(reader)
            await raw_call(reader, True)
        assert self.system is not None
        metrics_url = self.system.url("tweet-store") + "/metrics"
        scraped_before = await asyncio.to_thread(procs.scrape_all, metrics_url)
        for b in range(p.read_blocks):
            for kind, sink in (("api", api_ms), ("raw", raw_ms), ("raw+session", raw_auth_ms),
                               ("slice+session", raw_slice_ms)):
                await block(kind, sink)
            say(f"  block {b + 1}/{p.read_blocks}: api p50 {stats.percentile(api_ms, 50):.2f} ms, "
                f"raw p50 {stats.percentile(raw_ms, 50):.2f} ms")
        scraped_after = await asyncio.to_thread(procs.scrape_all, metrics_url)

        def lookups(result: str) -> float:
            series = f'fanline_tweet_cache_lookups_total{{result="{result}"}}'
            return scraped_after.get(series, 0.0) - scraped_before.get(series, 0.0)

        hits, misses = lookups("hit"), lookups("miss")
        hit_ratio = round(hits / (hits + misses), 4) if hits + misses else None
        self.doc["timeline_read_ms"] = {"api": stats.p50_p99(api_ms, 3), "raw": stats.p50_p99(raw_ms, 3),
                                        "rate_per_s": p.read_rate}
        self.details["timeline_read"] = {
            "api_n": len(api_ms), "raw_n": len(raw_ms), "api": stats.summary(api_ms, 3), "raw": stats.summary(raw_ms, 3),
            "raw_with_session": stats.summary(raw_auth_ms, 3), "raw_slice_with_session": stats.summary(raw_slice_ms, 3),
            "tweet_cache": {"hits": int(hits), "misses": int(misses), "hit_ratio": hit_ratio},
            "short_pages": short_pages,
            "raw_short_pages": raw_short_pages,
            "method": (
                f"{len(self.readers)} readers whose home timelines hold more than 20 tweets take turns. The API side "
                "times `GET /v1/timeline?limit=20` with a bearer token through the harness's httpx client (gateway → "
                "social-graph session check → tweet-store slice + multi-get → JSON back through the gateway). The raw "
                "side times, from the same process and event loop, the CQL tweet-store runs for that page: one "
                "`SELECT tweet_id … LIMIT 21` slice of `home_timeline` and the multi-get of the 20 tweets as "
                "`CassandraTweets.get_many` does it (concurrent single-partition reads, window 64), with the same "
                "prepared statements and driver bridge. A third series adds the `sessions` lookup that the "
                "gateway's authentication also costs, and a fourth only the session lookup and the slice — the CQL "
                "of a page whose tweets all come from tweet-store's hydration cache (`cache.py`; the API side's "
                "cache hits and misses during the phase are in `tweet_cache`). The raw baseline is the uncached "
                "page, as the issue defines it; with the cache the API runs less CQL than the baseline does. The "
                "four run in alternating blocks so drifting background load hits them alike; each request's "
                "latency is measured from its actual start."),
        }
        if short_pages:
            self.notes.append(f"read path: {short_pages} timeline pages had fewer than 20 items")
        if raw_short_pages:
            self.notes.append(f"read path: {raw_short_pages} raw CQL pages found fewer than 20 tweets")
        if short_pages + raw_short_pages > 0.05 * (len(api_ms) + len(raw_ms)):
            # Empty timelines read fast and prove nothing: the readers' timelines
            # are filled by the delivery-lag phase (run it first with --only).
            raise BenchError(f"read path: {short_pages} API and {raw_short_pages} raw pages were short of 20 "
                             "tweets; the readers' home timelines are not filled (run delivery_lag first)")

    async def phase_profile(self) -> None:
        assert self.system is not None
        p = self.plan
        pids = self.system.pids()
        targets = {name: pids[name] for name in ("fanout-worker", "api", "tweet-store") if name in pids}
        if procs.py_spy() is None:
            self.notes.append("py-spy not installed: no profile")
            return
        say(f"profile: py-spy on {', '.join(targets)} for {p.profile_s}s while the worker drains a backlog and "
            "the gateway serves posts and timeline reads")
        outs = {name: self.logs / f"profile-{name}.txt" for name in targets}
        spies = {name: procs.start_profile(pid, p.profile_s, outs[name]) for name, pid in targets.items()}
        backlog = asyncio.create_task(self.post_backlog(max(8, p.backlog_tweets // 2)))
        stop_at = time.monotonic() + p.profile_s
        i = 0
        while time.monotonic() < stop_at:
            reader = self.readers[i % len(self.readers)]
            await asyncio.gather(self.post_ours(self.group_author("0"), f"profile {i}"),
                                 self.http.get(f"{self.api}/v1/timeline", params={"limit": 20},
                                               headers={"authorization": f"Bearer {self.tokens[reader]}"}))
            i += 1
            await asyncio.sleep(0.05)
        await backlog
        services: dict[str, Any] = {}
        for name, spy in spies.items():
            if spy is None:
                continue
            _, err = await asyncio.to_thread(spy.communicate)
            if spy.returncode not in (0, None) and not outs[name].exists():
                self.notes.append(f"py-spy on {name} failed: {err.decode(errors='replace')[-300:]}")
                continue
            services[name] = procs.summarize_profile(outs[name])
        findings = []
        for service, info in services.items():
            cats = info.get("categories") or []
            if cats:
                parts = ", ".join(f"{c['name']} {c['percent']:.0f} %" for c in cats[:4])
                findings.append(f"**{service}**: {parts} of {info['samples']:,} samples.")
            if info.get("httpcore_sniffio_import_percent"):
                findings.append(
                    f"**{service}**: {info['httpcore_sniffio_import_percent']:.1f} % of its samples are httpcore's "
                    "`current_async_library()` failing to `import sniffio` (not installed: anyio no longer depends "
                    "on it), which searches every `sys.path` entry on every call, several times per HTTP request.")
        self.details["profile"] = {
            "services": services, "findings": findings,
            "method": (
                f"`py-spy record --gil --rate 100 --function --format raw` attached for {p.profile_s} s to the worker, "
                "the gateway and tweet-store while one worker drained a backlog of 2,000-follower tweets and the "
                "harness posted and read timelines through the gateway. `--gil` samples only the thread holding the "
                "GIL, i.e. where the process spends its Python CPU (the driver's I/O thread in C and time waiting on "
                "sockets are not counted); 'area' is the package of the innermost Python frame (time in C "
                "extensions called from it is attributed there)."),
        }
        # Let the worker finish the profile backlog before measuring anything else.
        say("  profile done")

    # --- the whole run ------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        started_at = datetime.now(UTC)
        self.doc["machine"] = machine_info()
        self.details.update(mode=self.plan.mode, started_at=started_at.strftime("%Y-%m-%d %H:%M UTC"),
                            command="make bench" if self.plan.mode == "full" else "make bench-quick",
                            plan=self.plan.__dict__, tag=self.tag)
        phases: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("ceiling", self.phase_ceiling),
            ("stress", self.phase_stress),
            ("scaling", self.phase_scaling),
            ("ceiling_again", self.phase_ceiling_again),
            ("post_latency", self.phase_post_latency),
            ("delivery_lag", self.phase_delivery_lag),
            ("read_path", self.phase_read_path),
            ("profile", self.phase_profile),
        ]
        only = set(self.args.only.split(",")) if self.args.only else None
        timings: dict[str, float] = {}
        try:
            await self.setup()
            await self.seed()
            for name, phase in phases:
                if only is not None and name not in only:
                    continue
                t = time.monotonic()
                try:
                    await phase()
                except Exception as exc:  # noqa: BLE001 - record, keep the other phases
                    say(f"phase {name} FAILED: {exc!r}")
                    traceback.print_exc()
                    self.notes.append(f"phase {name} failed: {type(exc).__name__}: {exc}")
                timings[name] = round(time.monotonic() - t, 1)
                say(f"phase {name}: {timings[name]:.0f}s")
        finally:
            await self.teardown()
        self.details["phase_seconds"] = timings
        self.details["duration_s"] = round(time.monotonic() - _T0, 1)
        self.details["memory_method"] = (
            "Peak RSS is the kernel's high-water mark (`VmHWM` in /proc/<pid>/status) of each service process, "
            "polled every 0.5 s for the whole run; for the worker, the largest of every worker process started "
            "(1, 2 or 4 at a time). The synchronous baseline's process peaked at "
            f"{(self.monitor.peak_mb().get('sync-baseline') if self.monitor else None) or '—'} MB.")
        return self.doc


# --- output ------------------------------------------------------------------------------------


def publish(doc: dict[str, Any], out_dir: Path, md_path: Path, plots_dir: Path, now: datetime) -> list[Path]:
    """Write the JSON (latest + dated), the plots and the markdown page."""
    results.finalize(doc)
    latest, dated = results.write_results(doc, out_dir, now)
    written = [latest, dated]
    try:
        plots = report.make_plots(doc, plots_dir)
    except ImportError as exc:
        say(f"matplotlib missing, no plots: {exc}")
        plots = {}
    written += plots.values()
    rel = {k: os.path.relpath(v, md_path.parent) for k, v in plots.items()}
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(report.render_markdown(doc, rel, os.path.relpath(latest, md_path.parent)))
    written.append(md_path)
    return written


def _rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(r) for r in text.split(",") if r.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if any(not r > 0 for r in rates):
        raise argparse.ArgumentTypeError(f"rates must be positive: {text!r}")
    return rates


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (a few minutes)")
    parser.add_argument("--base-port", type=int, default=30000, help="first port of the isolated system (default 30000)")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results, or bench/results/quick)")
    parser.add_argument("--docs", type=Path, help="markdown page (default docs/benchmarks.md, or <out>/benchmarks.md)")
    parser.add_argument("--only", help="comma-separated phases to run (ceiling,stress,scaling,ceiling_again,"
                                       "post_latency,delivery_lag,read_path,profile)")
    parser.add_argument("--lag-rate", type=float, help="tweets/s in the delivery-lag phase")
    parser.add_argument("--lag-sweep", type=_rates, metavar="R1,R2",
                        help="further tweets/s for the delivery-lag phase, comma-separated ('' for none)")
    parser.add_argument("--read-rate", type=float, help="GET /v1/timeline requests/s in the read-path phase")
    parser.add_argument("--keep", action="store_true", help="keep the keyspaces and topics afterwards")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="experiment: extra environment for every service (e.g. FANLINE_HOME_WRITE_WINDOW=32)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.lag_rate:
        plan = replace(plan, lag_rate=args.lag_rate)
    if args.lag_sweep is not None:
        plan = replace(plan, lag_sweep_rates=args.lag_sweep)
    if args.read_rate:
        plan = replace(plan, read_rate=args.read_rate)
    out = args.out or (REPO / "bench" / "results" / ("quick" if args.quick else ""))
    md = args.docs or (out / "benchmarks.md" if args.quick else REPO / "docs" / "benchmarks.md")
    plots_dir = md.parent / ("plots" if args.quick else "benchmarks")
    bench = Bench(plan, args)
    try:
        doc = asyncio.run(bench.run())
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    now = datetime.now()
    written = publish(doc, out, md, plots_dir, now)
    say("wrote " + ", ".join(os.path.relpath(p, REPO) for p in written))
    for t in results.evaluate_targets(doc):
        say(f"target {t.key}: measured {t.measured if t.measured is None else round(t.measured, 2)} "
            f"{t.op} {t.bound if t.bound is None else round(t.bound, 2)}: "
            f"{ {True: 'pass', False: 'FAIL', None: 'not measured'}[t.passed] }")
    print(json.dumps(doc.get("targets", {}), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
