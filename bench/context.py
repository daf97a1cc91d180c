"""What every scenario works with (``Ctx``): the run's parameters and rows, the
real engines, the isolated system under test, a CQL session and an HTTP client,
the seeded accounts, and the helpers the scenarios measure with."""

from __future__ import annotations

import argparse
import asyncio
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import httpx

from deploy.local.infra import LocalInfra
from deploy.local.system import metrics_url_of
from fanline_shared import cassandra as cql
from fanline_shared.config import Env, StorageSettings

from . import probes, seed
from .rows import META, Recorder, Results
from .sync_baseline import SCHEMA as SYNC_SCHEMA
from .system import BenchSystem

REPO = Path(__file__).resolve().parents[1]
PASSWORD = "bench-author-pw"
T = TypeVar("T")
_T0 = time.monotonic()


class BenchError(RuntimeError):
    """A call of the harness's that did not get the answer it needed."""

    @property
    def shed(self) -> bool:
        """Refused by the system's admission control or deadline (503): counted, not a crash."""
        return " 503 " in str(self)


def say(msg: str) -> None:
    print(f"[bench +{time.monotonic() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def storage(env: dict[str, str]) -> StorageSettings:
    """The CQL settings the services read from ``env`` (generous timeouts for the harness's bulk work)."""
    return StorageSettings.from_env(Env({**env, "FANLINE_BACKEND": "cassandra", "FANLINE_CASSANDRA_TIMEOUT_S": "30"}))


def balanced_authors(tag: str, count: int, stem: str = "b", partitions: int = 8) -> list[str]:
    """``count`` author names spread evenly over the events topic's partitions (keyed by the name)."""
    from aiokafka.partitioner import DefaultPartitioner

    part, chosen, used, ps = DefaultPartitioner(), list[str](), dict.fromkeys(range(partitions), 0), list(range(partitions))
    for k in range(100_000):
        if used[p := int(part((name := f"a{tag}{stem}{k:03d}").encode(), ps, ps))] < max(1, count // partitions) or k > 5000:
            used[p] += 1
            chosen.append(name)
        if len(chosen) == count:
            break
    return chosen


class Ctx:
    def __init__(self, args: argparse.Namespace, params: dict[str, dict[str, Any]], rec: Recorder, previous: Results) -> None:
        self.args, self.params, self.rec, self.previous = args, params, rec, previous
        self.tag = rec.run.rsplit("-", 1)[-1]
        self.prefix = f"bench_{self.tag}"
        self.social_ks, self.tweet_ks, self.sync_ks = (f"{self.prefix}_{k}" for k in ("social_graph", "tweet_store", "sync"))
        self.infra = LocalInfra(log=lambda m: say(f"infra: {m}"))
        self.logs = REPO / "test-artifacts" / f"bench-{self.tag}"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"fanline-bench-{self.tag}-"))
        self.env = self.system_env(self.tag) | dict(item.split("=", 1) for item in args.env)
        self.system = BenchSystem(self.tmp / "data", args.base_port, self.infra.kafka_bootstrap, "cassandra", self.env, self.logs)
        self.system.fanout_replica, self.system.background_nice = args.fanout_replica, args.background_nice
        self.system.colocate = args.colocate
        self.api = self.system.url("api")
        self.http = httpx.AsyncClient(timeout=60.0, limits=httpx.Limits(max_connections=200, max_keepalive_connections=200))
        self.session: Any = None
        self.sync_proc: subprocess.Popen[bytes] | None = None
        self.tokens: dict[str, str] = {}
        self.graph = seed.Graph(self.tag)
        self.best: tuple[str, int] = ("bridge", 128)  # the ceiling's winning (path, window); its sweep sets it
        self.backlog_authors, self.lag_authors, self.read_authors = list[str](), list[str](), list[str]()
        self.readers, self.home_readers = list[str](), list[str]()  # pool followers who log in; readers of the read authors
        self.population: Any = None  # openloop.Population, seeded by the first open-loop scenario

    def system_env(self, run: str) -> dict[str, str]:
        """``[system.env]`` for a system named ``run``, pointed at the engines."""
        return {k: v.format(run=run) for k, v in self.params["system"]["env"].items()} | self.infra.settings_env()

    def topic_prefixes(self, run: str) -> tuple[str, ...]:
        """The prefixes of every topic a system named ``run`` creates (see :func:`topic_prefixes`)."""
        return topic_prefixes(self.params["system"]["env"], run)

    def post_author(self, round_: int, n: int) -> str:
        return f"a{self.tag}p{n}r{round_}"

    def lookup(self, scenario: str, name: str, /, **labels: object) -> float | None:
        """A figure of this run, else of the previous results (a partial run)."""
        this = Results(self.rec.rows).num(scenario, name, **labels)
        return this if this is not None else self.previous.num(scenario, name, **labels)

    async def setup(self) -> None:
        say(f"run {self.rec.run}; logs in {self.logs}")
        await asyncio.to_thread(self.infra.check_prerequisites)
        await asyncio.to_thread(self.infra.start)
        say(f"starting the system on ports {self.args.base_port}+ (keyspaces {self.prefix}_*)")
        await asyncio.to_thread(self.system.start_core)
        await asyncio.to_thread(self.system.start_workers, 1)
        self.session = await cql.open_session(storage(self.env))
        packages = ("fanline-api", "cassandra-driver", "faust-streaming", "httpx", "starlette", "uvicorn")
        versions = self.infra.versions() | {"python": platform.python_version()} | {p: metadata.version(p) for p in packages}
        for component, v in versions.items():
            self.rec.add(META, "version", v, component=component)
        for field, value in probes.machine().items():
            self.rec.add(META, "machine", value, field=field)
        deployment = f"fan-out replicas {self.args.fanout_replica}, nice {self.args.background_nice}"
        self.rec.add(META, "deployment", deployment + (", stores in the gateway's process" if self.args.colocate else ""))
        self.rec.add(META, "experiment", " ".join(self.args.env) or None)
        # The engines' timer slack (deploy/local/infra engine.timer_slack) moves their CPU per request 3x.
        for engine in ("cassandra", "kafka"):
            if (slack := probes.timer_slack_us(getattr(self.infra, engine).pid())) is not None:
                self.rec.add(META, "timer_slack_us", slack, engine=engine)

    async def teardown(self, partial: bool) -> None:
        await self.http.aclose()
        stop_process(self.sync_proc)
        await asyncio.to_thread(self.system.stop)
        for service, kib in sorted(self.system.peak_kib.items()) if not partial else ():  # peak memory describes a whole run
            self.rec.add("memory", "peak_rss_mb", kib / 1024, service=service)
        if self.session is not None:
            keyspaces = [self.social_ks, self.tweet_ks, self.sync_ks, f"{self.prefix}_stress", f"{self.prefix}_stress_home"]
            for ks in [] if self.args.keep else keyspaces:
                await cql.execute(self.session, f"DROP KEYSPACE IF EXISTS {ks}", name="bench_drop")
            await cql.close_session(self.session)
        if not self.args.keep:
            await delete_topics(self.infra.kafka_bootstrap, self.topic_prefixes(self.tag))
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- the API --------------------------------------------------------------------------------------
    async def sign_up(self, name: str) -> str:
        r = await self.http.post(f"{self.api}/v1/users", json={"username": name, "password": PASSWORD})
        if r.status_code >= 300:
            raise BenchError(f"sign-up of {name}: {r.status_code} {r.text[:200]}")
        return await self.login(name, PASSWORD)

    async def login(self, name: str, password: str) -> str:
        r = await self.http.post(f"{self.api}/v1/sessions", json={"username": name, "password": password})
        if r.status_code >= 300:
            raise BenchError(f"log-in of {name}: {r.status_code} {r.text[:200]}")
        self.tokens[name] = token = str(r.json()["token"])
        return token

    async def post(self, url: str, author: str, body: str) -> tuple[float, str, float]:
        """(latency ms, tweet id, wall-clock time of the answer); anything but 201 raises."""
        started = time.perf_counter()
        r = await self.http.post(url, json={"body": body}, headers={"authorization": f"Bearer {self.tokens[author]}"})
        elapsed, answered = (time.perf_counter() - started) * 1000, time.time()
        if r.status_code != 201:
            raise BenchError(f"POST {url} as {author}: {r.status_code} {r.text[:200]}")
        return elapsed, str(r.json()["id"]), answered

    async def post_ours(self, author: str, body: str) -> tuple[float, str, float]:
        return await self.post(f"{self.api}/v1/tweets", author, body)

    async def home(self, reader: str, limit: int = 20, path: str = "/v1/timeline") -> httpx.Response:
        auth = {"authorization": f"Bearer {self.tokens[reader]}"}
        return await self.http.get(f"{self.api}{path}", params={"limit": limit}, headers=auth)

    async def gather(self, coros: Sequence[Awaitable[T]], limit: int = 8) -> list[T]:
        sem = asyncio.Semaphore(limit)

        async def one(c: Awaitable[T]) -> T:
            async with sem:
                return await c

        return list(await asyncio.gather(*(one(c) for c in coros)))

    async def post_backlog(self, tweets: int, authors: Sequence[str]) -> list[tuple[str, str]]:
        """``tweets`` from ``authors`` in turn: (author, id)."""
        posted = await self.gather([self.post_ours(authors[i % len(authors)], f"backlog tweet {i}") for i in range(tweets)])
        return [(authors[i % len(authors)], tid) for i, (_, tid, _) in enumerate(posted)]

    # --- the workers and their rows -------------------------------------------------------------------
    async def restart_workers(self, env: dict[str, str] | None = None, count: int = 1) -> None:
        """Every worker stopped, then ``count`` with ``env`` on top (none: the system's own)."""
        await asyncio.to_thread(self.system.stop_workers)
        await asyncio.to_thread(self.system.start_workers, count, True, (lambda _i: env) if env else None)

    def rows_by_worker(self) -> dict[str, float]:
        """Each answering worker's ``fanline_timeline_rows_written_total``."""
        urls = {n: metrics_url_of(self.system.worker_ports[n]) for n in self.system.running_workers()}
        totals = {n: probes.total(probes.scrape(url), "fanline_timeline_rows_written_total") for n, url in urls.items()}
        return {n: v for n, v in totals.items() if v is not None}

    async def rows_written(self) -> float:
        return sum((await asyncio.to_thread(self.rows_by_worker)).values())

    async def wait_rows(self, target: float, timeout_s: float, label: str) -> list[tuple[float, float]]:
        """The workers' row counters every 0.25 s until their sum reaches ``target``: the
        (monotonic time, rows) series. A worker whose scrape fails keeps its last value."""
        series, last, started = list[tuple[float, float]](), dict[str, float](), time.monotonic()
        said = started
        while not series or series[-1][1] < target:
            for name, rows in (await asyncio.to_thread(self.rows_by_worker)).items():
                last[name] = max(rows, last.get(name, 0.0))
            if last:
                series.append((time.monotonic(), sum(last.values())))
            if time.monotonic() - said >= 10:
                said = time.monotonic()
                say(f"  {label}: {sum(last.values()):,.0f} / {target:,.0f} rows")
            if time.monotonic() - started > timeout_s:
                raise BenchError(f"{label}: only {sum(last.values()):,.0f} of {target:,.0f} rows after {timeout_s:.0f}s")
            await asyncio.sleep(0.25)
        return series

    async def _home_partitions(
        self, owners: Sequence[str], columns: str, also: str = "", extra: tuple[object, ...] = ()
    ) -> list[Any]:
        """``columns`` of the home-timeline rows of ``owners``, 100 partitions a statement
        (``also``: more of the WHERE clause, with ``extra`` its values). Only the keyspace and
        the callers' constant fragments are formatted into the CQL; the values are bound."""
        rows: list[Any] = []
        for i in range(0, len(owners), 100):
            chunk = list(owners[i : i + 100])
            where = f"owner_lc IN ({','.join(['%s'] * len(chunk))}){also}"
            text = f"SELECT owner_lc, {columns} FROM {self.tweet_ks}.home_timeline WHERE {where}"
            rows += await cql.execute(self.session, text, (*chunk, *extra), name="bench_verify")
        return rows

    async def home_rows(self, tweet_id: uuid.UUID, owners: Sequence[str]) -> dict[str, int]:
        """owner -> writetime (µs) of its home row for ``tweet_id``; owners without one absent."""
        rows = await self._home_partitions(owners, "WRITETIME(author_lc) AS wt", " AND tweet_id = %s", (tweet_id,))
        return {r.owner_lc: int(r.wt) for r in rows}

    async def trimmed(self, tweet_id: uuid.UUID, owners: Sequence[str]) -> set[str]:
        """Those of ``owners`` whose home timeline the row cap (``FANLINE_HOME_MAX_ROWS``) trimmed
        past ``tweet_id``: their horizon (the oldest row kept) is newer, so its row is gone by design."""
        rows = await self._home_partitions(owners, "horizon", " PER PARTITION LIMIT 1")
        return {r.owner_lc for r in rows if r.horizon is not None and r.horizon.time > tweet_id.time}

    async def delivered(self, posted: Sequence[tuple[str, str]]) -> bool:
        """Whether each (author, id) is in the author's and every follower's home timeline."""
        for author, tid in posted:
            owners = [author.lower(), *self.graph.followers_of(author)]
            if len(await self.home_rows(uuid.UUID(tid), owners)) < len(owners):
                return False
        return True

    async def seed(self) -> None:
        """Authors through the API, their followers bulk-loaded (``seed``) with the synchronous
        baseline's copy of the edges; readers with distinct follow sets; every reader logged in."""
        p, posts, s, started = self.params["seed"], self.params["post_latency"], self.rec.scope("seed"), time.monotonic()
        self.backlog_authors = balanced_authors(self.tag, p["backlog_authors"])
        self.lag_authors = [f"a{self.tag}l{j}" for j in range(p["lag_authors"])]
        post_authors = {self.post_author(r, n): n for r in range(posts["rounds"]) for n in posts["followers"]}
        curve_authors = {self.post_author(0, n): n for n in posts["curve"]}  # one per count, for every round
        self.read_authors = [f"a{self.tag}r{j:02d}" for j in range(p["read_authors"])]
        authors = [*self.backlog_authors, *self.lag_authors, *post_authors, *curve_authors, *self.read_authors]
        say(f"seeding: {len(authors)} authors through the API, their followers bulk-loaded")
        await self.gather([self.sign_up(a) for a in authors], 4)
        self.graph.followers |= dict.fromkeys(self.backlog_authors, p["backlog_followers"])
        self.graph.followers |= dict.fromkeys(self.lag_authors, p["lag_followers"])
        for a, n in post_authors.items():  # after every first-N author: these ranges come past all of theirs
            self.graph.add_disjoint(a, n)
        rows = await asyncio.to_thread(seed.bulk_load_social_graph, self.session, self.social_ks, self.graph)
        # The curve's followers are inactive: ours writes no fan-out rows for them (its post path never
        # reads followers); the synchronous baseline reads every one from its own table.
        curve = [(seed.follower(f"k{self.tag}", i), a) for a, n in curve_authors.items() for i in range(n)]
        rows += await asyncio.to_thread(seed.bulk_load_edges, self.session, self.social_ks, curve, [], False)
        self.readers = [seed.pool_name(self.tag, i) for i in range(p["readers"])]
        self.home_readers = [f"h{self.tag}_{i:03d}" for i in range(p["readers"])]
        follows = seed.distinct_follow_sets(self.home_readers, self.read_authors, p["reader_follows"])
        edges = [(r, a) for r, fs in follows.items() for a in fs]
        rows += await asyncio.to_thread(seed.bulk_load_edges, self.session, self.social_ks, edges, self.home_readers)
        await cql.migrate(self.session, self.sync_ks, 1, [SYNC_SCHEMA])
        sync_edges = self.graph.edges(list(post_authors)) + curve
        rows += await asyncio.to_thread(seed.bulk_load_followers, self.session, self.sync_ks, sync_edges)
        r = await self.http.get(f"{self.api}/v1/users/{self.post_author(0, max(posts['followers']))}")
        if r.status_code != 200 or r.json().get("followers_count") != max(posts["followers"]):
            raise BenchError(f"social-graph does not see the bulk-loaded edges: {r.text[:200]}")
        await self.gather([self.login(u, seed.POOL_PASSWORD) for u in [*self.readers, *self.home_readers]], 4)
        s("rows", rows, "rows")
        s("seed_s", time.monotonic() - started)
        say(f"seeded {rows:,} rows in {time.monotonic() - started:.0f}s")


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = 15) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


def topic_prefixes(env: dict[str, str], run: str) -> tuple[str, ...]:
    """The prefixes of the topics a system named ``run`` creates, from ``[system.env]``.

    Fanline's own topics (events, its chunks, the DLQ) share the events topic's
    prefix; faust names its own topics (``<group>-__assignor-__leader``, any
    changelog) after the worker's group. Deleting only the first left eleven
    leader topics behind each full run (run 2228).
    """
    events, group = env["FANLINE_EVENTS_TOPIC"].format(run=run), env["FANLINE_WORKER_GROUP"].format(run=run)
    return events.rsplit(".", 1)[0] + ".", group + "-"


async def delete_topics(bootstrap: str, prefixes: tuple[str, ...]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        await admin.start()
        if topics := [t for t in await admin.list_topics() if t.startswith(prefixes)]:
            await admin.delete_topics(topics)
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort
        say(f"could not delete topics: {exc}")
    finally:
        await admin.close()


async def skip_to_end(bootstrap: str, group: str, topic: str) -> int:
    """Commit ``topic``'s log ends as consumer ``group``'s offsets: the events published so far
    are never handed to its workers. Only while the group has no member (its workers stopped):
    the broker refuses a commit from outside a live group. Returns the events skipped."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    try:
        (described,) = await admin.describe_topics([topic])
        parts = [TopicPartition(topic, d["partition"]) for d in described["partitions"]]
        consumer.assign(parts)
        ends = await consumer.end_offsets(parts)
        before = {tp: await consumer.committed(tp) or 0 for tp in parts}
        await consumer.commit(ends)
        return sum(ends[tp] - before[tp] for tp in parts)
    finally:
        await consumer.stop()
        await admin.close()


def with_engines(ctx: Ctx, pids: Callable[[], dict[str, int]]) -> Callable[[], dict[str, int]]:
    """``pids`` and the engines' JVMs (their CPU is the physical floor of a request)."""
    return lambda: pids() | {e: pid for e in ("cassandra", "kafka") if (pid := getattr(ctx.infra, e).pid()) is not None}
