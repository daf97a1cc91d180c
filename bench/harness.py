"""The harness every phase runs in: ``Bench`` holds the plan and arguments,
the results document (``doc``, ``details``, ``notes``), the isolated system
with its real engines, the CQL session and HTTP client, and the seeded
accounts. ``setup``/``teardown`` start and stop (and clean up) all of it;
``seed`` creates the authors and bulk-loads their followers (``seed.py``);
the API and worker-metric helpers are what the phases measure with."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import httpx

from . import procs, prometheus, results, seed
from .baseline import SCHEMA as BASELINE_SCHEMA
from .common import GROUPS, PARTITIONS, PASSWORD, SYSTEM_ENV, BenchError, Plan, balanced_authors, say
from .procs import REPO, BenchSystem
from .rss import RssMonitor

sys.path.insert(0, str(REPO / "deploy" / "local"))
from fanline_shared import cassandra as cql
from fanline_shared.config import StorageSettings
from infra import LocalInfra


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
    return {
        "cores": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gb": mem_gb,
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def versions(infra: LocalInfra) -> dict[str, Any]:
    import faust
    import starlette
    import uvicorn

    import cassandra as driver_pkg
    from fanline_api import __version__ as fanline_version

    return {
        **infra.versions(),
        "fanline": fanline_version,
        "python": platform.python_version(),
        "cassandra_driver": driver_pkg.__version__,
        "faust": faust.__version__,
        "httpx": httpx.__version__,
        "starlette": starlette.__version__,
        "uvicorn": uvicorn.__version__,
    }


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
        self.open_loop: Any = None  # workload.Seeded, once the first open-loop phase seeded it
        # issue 18: the read phase's readers, each following its own set of
        # ``read_authors`` (``follow_sets``), so their pages differ
        self.read_authors: list[str] = []
        self.home_readers: list[str] = []
        self.follow_sets: dict[str, list[str]] = {}

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

    def post_author(self, round_: int, n: str) -> str:
        """The post-latency phase's author with ``n`` followers in round
        ``round_`` (from 0): followers of its own (``Graph.add_disjoint``), so
        the phase's own tweets stay in its followers' timelines long enough to
        read their delivery lag back (one author per group for the whole phase
        posted ~1,800 tweets to followers who also follow the other groups and
        the backlog authors: their timelines were trimmed past every sampled
        tweet)."""
        return f"a{self.tag}p{n}r{round_}"

    @property
    def post_authors(self) -> list[str]:
        return [self.post_author(r, n) for r in range(max(1, self.plan.repeats)) for n in GROUPS]

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
        self.system = BenchSystem(
            data_dir=self.tmp / "data",
            base_port=self.args.base_port,
            backend="cassandra",
            kafka_bootstrap=self.infra.kafka_bootstrap,
            extra_env=env,
            log_dir=self.logs,
            fanout_replica=self.args.fanout_replica,
            background_nice=self.args.background_nice,
        )
        self.details["deployment"] = {
            "fanout_replicas": self.args.fanout_replica,
            "background_nice": self.args.background_nice,
            "note": (
                "the fan-out worker calls a social-graph and a tweet-store replica of its own"
                if self.args.fanout_replica
                else "the fan-out worker shares social-graph and tweet-store with the gateway"
            )
            + (
                f"; the worker(s) and those replicas run at nice {self.args.background_nice}"
                if self.args.background_nice
                else "; every process at the same CPU priority"
            )
            + " (docs/operations.md, Background work and CPU priority)",
        }
        say(
            f"starting social-graph, tweet-store{' (+ fan-out replicas)' if self.args.fanout_replica else ''} "
            f"and the gateway on ports {self.args.base_port}+ (keyspaces {self.prefix}_*)"
        )
        await asyncio.to_thread(self.system.start_core)
        say("starting one fan-out worker")
        await asyncio.to_thread(self.system.start_workers, 1)
        self.monitor = RssMonitor(self.system)
        self.monitor.start()
        storage = StorageSettings(
            backend="cassandra",
            data_dir=self.tmp,
            cassandra_hosts=(host,),
            cassandra_port=int(port),
            keyspace_prefix=self.prefix,
            replication_factor=1,
            local_dc="datacenter1",
            request_timeout_s=30.0,
        )
        self.session = await cql.open_session(storage)
        self.client = httpx.AsyncClient(timeout=60.0, limits=httpx.Limits(max_connections=200, max_keepalive_connections=200))
        self.doc["versions"] = versions(self.infra)

    async def teardown(self) -> None:
        if self.client is not None:
            await self.client.aclose()
        procs.stop_process(self.baseline_proc)
        if self.monitor is not None:
            self.monitor.stop()
            self.doc["peak_rss_mb"] = {s: self.monitor.peak_mb().get(s) for s in results.SERVICES}
            loads = self.monitor.load_samples
            self.doc["machine"]["load_average"] = (
                {
                    "min": round(min(loads), 2),
                    "mean": round(sum(loads) / len(loads), 2),
                    "max": round(max(loads), 2),
                    "samples": len(loads),
                }
                if loads
                else {}
            )
        if self.system is not None:
            await asyncio.to_thread(self.system.stop)
        if self.session is not None:
            if not self.args.keep:
                for ks in (self.social_ks, self.tweet_ks, self.sync_ks, self.stress_keyspace, f"{self.stress_keyspace}_home"):
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
            topics = [t for t in await admin.list_topics() if t.startswith((f"bench.{self.tag}.", f"bench-{self.tag}"))]
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

    async def restart_workers(self, env: dict[str, str] | None = None, count: int = 1) -> None:
        """Stop every worker and start ``count`` with ``env`` on top of the
        system's environment (none: the system's own settings)."""
        assert self.system is not None
        await asyncio.to_thread(self.system.stop_workers)
        await asyncio.to_thread(self.system.start_workers, count, 120, (lambda _i: env) if env else None)

    # worker metrics ----------------------------------------------------------------------
    def rows_by_worker(self) -> dict[str, float]:
        """Each running worker's ``fanline_timeline_rows_written_total``; a
        worker whose page did not answer (starting, or busy past the scrape's
        timeout) is absent."""
        assert self.system is not None
        out: dict[str, float] = {}
        for name in self.system.running_workers():
            port = self.system.worker_ports.get(name)
            value = prometheus.scrape(f"http://127.0.0.1:{port}/metrics", "fanline_timeline_rows_written_total")
            if value is not None:
                out[name] = value
        return out

    def rows_written(self) -> float | None:
        """The sum of ``fanline_timeline_rows_written_total`` over running workers."""
        rows = self.rows_by_worker()
        return sum(rows.values()) if rows else None

    async def wait_rows(self, target: float, timeout_s: float, label: str, interval: float = 0.25) -> list[tuple[float, float]]:
        """Poll the workers' row counters until their sum reaches ``target``;
        the (monotonic time, rows) series. A worker whose scrape fails counts
        with its last value seen, so the series never dips (a sum over only
        the workers that answered would, and the 10 %/90 % crossings taken
        from it were wrong by orders of magnitude with 4 busy workers)."""
        series: list[tuple[float, float]] = []
        last: dict[str, float] = {}
        started = time.monotonic()
        last_say = started
        while True:
            for name, rows in (await asyncio.to_thread(self.rows_by_worker)).items():
                last[name] = max(rows, last.get(name, 0.0))
            value = sum(last.values()) if last else None
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
            chunk = owners[i : i + 100]
            stmt = self._verify_stmts.get(len(chunk))
            if stmt is None:
                stmt = await asyncio.to_thread(
                    cql.prepare,
                    self.session,
                    f"SELECT owner_lc, WRITETIME(author_lc) AS wt FROM {self.tweet_ks}.home_timeline "
                    f"WHERE owner_lc IN ({','.join('?' * len(chunk))}) AND tweet_id = ?",
                )
                self._verify_stmts[len(chunk)] = stmt
            rows = await cql.execute(self.session, stmt, (*chunk, tweet_id), name="bench_verify")
            found.update({r.owner_lc: int(r.wt) for r in rows})
        return found

    async def home_horizons(self, owners: list[str]) -> dict[str, uuid.UUID]:
        """owner -> the trim horizon of its home timeline (rows older than it
        were trimmed to ``FANLINE_HOME_MAX_ROWS``); untrimmed owners are absent."""
        found: dict[str, uuid.UUID] = {}
        for i in range(0, len(owners), 100):
            chunk = owners[i : i + 100]
            rows = await cql.execute(
                self.session,
                f"SELECT owner_lc, horizon FROM {self.tweet_ks}.home_timeline WHERE owner_lc IN "
                f"({','.join('%s' for _ in chunk)}) PER PARTITION LIMIT 1",
                tuple(chunk),
                name="bench_horizon",
            )
            found.update({r.owner_lc: r.horizon for r in rows if r.horizon is not None})
        return found

    # --- phases ------------------------------------------------------------------------------
    async def seed(self) -> None:
        p = self.plan
        say("seeding: authors through the API")
        self.backlog_authors = balanced_authors(self.tag, p.backlog_authors)
        self.lag_authors = [f"a{self.tag}l{j}" for j in range(p.lag_authors)]
        authors = [self.group_author(n) for n in GROUPS] + self.backlog_authors + self.lag_authors + self.post_authors
        await self.gather_limited([self.sign_up(a) for a in authors], 4)
        for n in GROUPS:
            self.graph.followers[self.group_author(n)] = int(n)
        for a in self.backlog_authors:
            self.graph.followers[a] = p.backlog_followers
        for a in self.lag_authors:
            self.graph.followers[a] = 1000
        for r in range(max(1, p.repeats)):  # after every first-N author: these ranges come past all of theirs
            for n in GROUPS:
                self.graph.add_disjoint(self.post_author(r, n), int(n))
        started = time.monotonic()
        rows, statements = await asyncio.to_thread(seed.bulk_load_social_graph, self.session, self.social_ks, self.graph, say)
        took = time.monotonic() - started
        say(f"  social-graph bulk load: {rows:,} rows in {statements:,} statements, {took:.1f}s")
        await cql.migrate(self.session, self.sync_ks, 1, [BASELINE_SCHEMA])
        copied = await asyncio.to_thread(
            seed.bulk_load_followers_table,
            self.session,
            self.sync_ks,
            self.graph,
            [self.group_author(n) for n in GROUPS] + self.post_authors,
        )
        # Sanity: the service sees the bulk-loaded edges.
        r = await self.http.get(f"{self.api}/v1/users/{self.group_author('10000')}")
        seen = r.json().get("followers_count") if r.status_code == 200 else None
        if seen != 10000:
            raise BenchError(f"social-graph reports {seen} followers for the 10,000-follower author")
        say(f"  readers: logging in {p.readers} follower accounts")
        self.readers = [seed.pool_name(self.tag, i) for i in range(p.readers)]
        await self.gather_limited([self.login(u, seed.POOL_PASSWORD) for u in self.readers], 4)
        await self.seed_home_readers()
        self.details["seeding"] = (
            f"Authors ({len(authors)}) were created and logged in through the public API. Their followers — a pool of "
            f"{self.graph.pool_size:,} accounts; the author with N followers is followed by the first N of the pool, but for "
            "the post-latency phase's authors (one per follower count and round), each followed by a range of the pool "
            "nobody else follows — were "
            f"**bulk-loaded by the harness** straight into social-graph's keyspace ({rows:,} rows in {took:.1f} s: "
            "`users`, `users_by_prefix`, `following`, `followers`, `follow_counts`, the same rows social-graph "
            "writes), with prepared statements and the driver's `execute_concurrent` (rows of one partition in "
            "unlogged single-partition batches of 100), because 10,000+ "
            "sign-ups (argon2 each) and follows (one LWT each) through the API would dominate the run without "
            "measuring anything asked here. This is harness-only; the product never writes another service's "
            f"tables. The synchronous baseline got the same edges in its own `followers` table ({copied:,} rows). "
            f"The system ran with cheap argon2 parameters (time 1, 8 MiB), as the end-to-end tests do; no measured "
            f"request hashes a password. Backlog authors' names were chosen so that they spread evenly over the "
            f"{PARTITIONS} partitions of the events topic."
        )

    async def seed_home_readers(self) -> None:
        """The read phase's readers (issue 18): ``plan.readers`` accounts, each
        following a different set of ``plan.reader_follows`` of the
        ``plan.read_authors`` (``seed.distinct_follow_sets``), bulk-loaded like
        the other followers and logged in through the API."""
        p = self.plan
        self.read_authors = [f"a{self.tag}r{j:02d}" for j in range(p.read_authors)]
        self.home_readers = [f"h{self.tag}_{i:03d}" for i in range(p.readers)]
        await self.gather_limited([self.sign_up(a) for a in self.read_authors], 4)
        self.follow_sets = seed.distinct_follow_sets(self.home_readers, self.read_authors, p.reader_follows)
        edges = [(r, a) for r, authors in self.follow_sets.items() for a in authors]
        await asyncio.to_thread(seed.bulk_load_edges, self.session, self.social_ks, edges, self.home_readers)
        await self.gather_limited([self.login(u, seed.POOL_PASSWORD) for u in self.home_readers], 4)
        say(
            f"  home readers: {len(self.home_readers)} accounts, each following its own {p.reader_follows} of "
            f"{len(self.read_authors)} authors"
        )

    async def post_backlog(self, tweets: int, authors: list[str] | None = None) -> list[tuple[str, str]]:
        """Post ``tweets`` from ``authors`` (default: the backlog authors),
        round robin; (author, id)."""
        who = authors or self.backlog_authors

        async def one(i: int) -> tuple[str, str]:
            author = who[i % len(who)]
            _, tid, _ = await self.post_ours(author, f"backlog tweet {i}")
            return author, tid

        return list(await self.gather_limited([one(i) for i in range(tweets)], 8))
