"""Running the open-loop mixed workload against a started system: what the
four phases share (``phases/mixed.py``, ``saturation.py``, ``overload.py``,
``mixed_embedded.py``).

``seed`` creates the population (``openloop.zipf_population``) through the
public API — sign-ups, log-ins (the bearer tokens), follows, a few tweets
each — so it works the same on Cassandra and on the embedded default.
``run_step`` sends one pre-generated request list at one rate with vegeta
and returns the client's view (per route), the services' own histograms
over the same interval (two scrapes of every ``/metrics``), the delivery
lag from the worker's histogram, and the CPU-seconds of every Fanline
process and of the generator per 1,000 requests.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from . import loadgen, openloop, procs, prometheus
from .common import BenchError, say

PASSWORD = "open-loop-pw-1"
# The gateway's metric labels of each route of the mix.
GATEWAY_ROUTES = {
    "post": ("POST", "/v1/tweets"),
    "home": ("GET", "/v1/timeline"),
    "userline": ("GET", "/v1/users/{username}/tweets"),
    "follow": ("PUT", "/v1/users/{username}/following/{target}"),
    "unfollow": ("DELETE", "/v1/users/{username}/following/{target}"),
    "sign_in": ("POST", "/v1/sessions"),
}
SHEDDING = ("api", "tweet-store", "social-graph")


@dataclass
class Target:
    """A running system as the workload sees it."""

    api: str
    metrics: Callable[[], dict[str, str]]  # process name -> its /metrics URL (workers included)
    pids: Callable[[], dict[str, int]]  # process name -> pid, every Fanline process


@dataclass
class Seeded:
    population: openloop.Population
    tokens: dict[str, str]


async def _limited(coros: list[Any], limit: int) -> list[Any]:
    sem = asyncio.Semaphore(limit)

    async def one(c: Any) -> Any:
        async with sem:
            return await c

    return list(await asyncio.gather(*(one(c) for c in coros)))


async def seed(api: str, prefix: str, users: int, mean_following: int, rng: random.Random, tweets_each: int = 2) -> Seeded:
    """Create the population through the public API (idempotent follows)."""
    population = openloop.zipf_population(prefix, users, mean_following, rng)
    tokens: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=api, timeout=60) as client:

        class Polite:
            """A client that honours a 503's Retry-After (admission control
            sheds seeding too when the limit is small), up to 10 tries."""

            async def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
                for _ in range(10):
                    r = await client.request(method, url, **kw)
                    if r.status_code != 503 or "retry-after" not in r.headers:
                        return r
                    await asyncio.sleep(min(1.0, float(r.headers["retry-after"])) * rng.uniform(0.5, 1.0))
                return r

            async def post(self, url: str, **kw: Any) -> httpx.Response:
                return await self.request("POST", url, **kw)

            async def put(self, url: str, **kw: Any) -> httpx.Response:
                return await self.request("PUT", url, **kw)

        http = Polite()

        async def sign_up(name: str) -> None:
            r = await http.post("/v1/users", json={"username": name, "password": PASSWORD})
            if r.status_code not in (201, 409):
                raise BenchError(f"sign-up of {name}: {r.status_code} {r.text[:200]}")
            r = await http.post("/v1/sessions", json={"username": name, "password": PASSWORD})
            if r.status_code != 200:
                raise BenchError(f"log-in of {name}: {r.status_code} {r.text[:200]}")
            tokens[name] = r.json()["token"]

        async def follow(me: str, other: str) -> None:
            r = await http.put(f"/v1/users/{me}/following/{other}", headers={"authorization": f"Bearer {tokens[me]}"})
            if r.status_code != 204:
                raise BenchError(f"{me} follows {other}: {r.status_code} {r.text[:200]}")

        async def post(me: str, i: int) -> None:
            r = await http.post("/v1/tweets", json={"body": f"seed tweet {i}"}, headers={"authorization": f"Bearer {tokens[me]}"})
            if r.status_code != 201:
                raise BenchError(f"seed post of {me}: {r.status_code} {r.text[:200]}")

        started = time.monotonic()
        await _limited([sign_up(u) for u in population.users], 4)
        edges = [(me, other) for me, followees in population.follows.items() for other in followees]
        await _limited([follow(me, other) for me, other in edges], 8)
        await _limited([post(u, i) for u in population.users for i in range(tweets_each)], 8)
        counts = sorted(population.followers().values(), reverse=True)
        say(
            f"  open-loop population: {users} users, {len(edges)} follows (most followed: {counts[:3]}, "
            f"median {counts[len(counts) // 2]}), seeded in {time.monotonic() - started:.0f}s"
        )
    return Seeded(population, tokens)


def scrape_everything(urls: dict[str, str]) -> dict[str, dict[str, float]]:
    return {name: prometheus.scrape_all(url) for name, url in urls.items()}


def _drain(urls: dict[str, str], timeout_s: float) -> None:
    """Wait until the workers report no consumer lag (so the lag histogram
    holds the tweets posted near the end), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    workers = [u for n, u in urls.items() if n.startswith("fanout-worker")]
    while time.monotonic() < deadline:
        lags = [prometheus.scrape(u, "fanline_consumer_lag_messages") for u in workers]
        if all(v is not None and v <= 0 for v in lags):
            return
        time.sleep(0.5)


class GateSampler:
    """Samples each service's admission gate (``fanline_admission_limit``,
    ``_in_flight``, ``_waiting``) every ``every_s`` while a load runs, in a
    thread: how the adaptive limit moved, beside the latencies it caused."""

    GAUGES = ("fanline_admission_limit", "fanline_admission_in_flight", "fanline_admission_waiting")

    def __init__(self, urls: dict[str, str], every_s: float = 1.0) -> None:
        self._urls = {n: u for n, u in urls.items() if not n.startswith("fanout-worker")}
        self._every = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.samples: list[dict[str, Any]] = []

    def _loop(self) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(self._every):
            row: dict[str, Any] = {"t": round(time.monotonic() - t0, 1)}
            for name, url in self._urls.items():
                scraped = prometheus.scrape_all(url)
                row[name] = [next((v for k, v in scraped.items() if k.startswith(g + "{")), None) for g in self.GAUGES]
            self.samples.append(row)

    def __enter__(self) -> GateSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def server_view(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The services' own figures over the step: the gateway's latency per
    route (admitted requests only: a shed request never reaches a route),
    sheds and queue waits per service, and the delivery lag."""
    api_b, api_a = before.get("api", {}), after.get("api", {})
    metric = "fanline_http_request_duration_seconds"
    routes = {}
    for name, (method, path) in GATEWAY_ROUTES.items():
        labels = (f'method="{method}"', f'route="{path}"', 'service="api"')
        routes[name] = {f"p{q}": _ms(openloop.histogram_quantile(api_b, api_a, metric, q / 100, labels)) for q in (50, 99)}
    shed = {}
    for service in SHEDDING:
        b, a = before.get(service, {}), after.get(service, {})
        shed[service] = {
            "shed": int(openloop.counter_increase(b, a, "fanline_admission_shed_total")),
            "queue_wait_p99_ms": _ms(
                openloop.histogram_quantile(b, a, "fanline_admission_queue_wait_seconds", 0.99, ('outcome="admitted"',))
            ),
            "shed_wait_max_bucket_ms": _ms(
                openloop.histogram_quantile(b, a, "fanline_admission_queue_wait_seconds", 1.0, ('outcome="shed"',))
            ),
        }
    # Every worker's buckets, kept apart by a suffix after the labels (the
    # quantile sums them per bucket bound).
    lag_b: dict[str, float] = {}
    lag_a: dict[str, float] = {}
    for name in after:
        if name.startswith("fanout-worker"):
            lag_b.update({f"{k}@{name}": v for k, v in before.get(name, {}).items()})
            lag_a.update({f"{k}@{name}": v for k, v in after[name].items()})
    lag = {f"p{q}": _ms(openloop.histogram_quantile(lag_b, lag_a, "fanline_delivery_lag_seconds", q / 100)) for q in (50, 99)}
    lag["tweets"] = int(
        sum(
            openloop.counter_increase(before.get(name, {}), after[name], "fanline_delivery_lag_seconds_count")
            for name in after
            if name.startswith("fanout-worker")
        )
    )
    return {"gateway_route_ms": routes, "admission": shed, "delivery_lag_ms": lag}


def run_step(
    target: Target, seeded: Seeded, rate: float, duration_s: float, workdir: Path, rng: random.Random, drain_s: float = 30.0
) -> dict[str, Any]:
    """One open-loop run at ``rate`` for ``duration_s``: the client's and the
    services' figures, delivery lag, CPU per 1,000 requests."""
    workdir.mkdir(parents=True, exist_ok=True)
    count = max(1, int(rate * duration_s))
    targets = openloop.make_targets(seeded.population, seeded.tokens, target.api, count, rng, PASSWORD)
    targets_file = workdir / f"targets-{rate:g}.jsonl"
    targets_file.write_text(openloop.targets_jsonl(targets))
    urls = {name: url for name, url in target.metrics().items()}
    # Whatever came before (the population's sign-ups, thousands of follow
    # merges and its first tweets; the previous step) is delivered first:
    # otherwise its lag lands in this step's histogram (the first full run
    # reported a lag p99 of 4.5 s at 60 requests/s that way).
    _drain(urls, max(drain_s, 120.0))
    before = scrape_everything(urls)
    cpu_before = loadgen.cpu_clocks(target.pids())
    with GateSampler(urls) as gates:
        run = loadgen.attack(targets_file, rate, duration_s, workdir)
    cpu_after = loadgen.cpu_clocks(target.pids())  # before the drain: the load's own CPU
    _drain(urls, drain_s)
    after = scrape_everything(urls)
    outcomes = openloop.parse_vegeta_csv(run.csv)
    summary = openloop.summarize(outcomes)
    server = server_view(before, after)
    sent = summary["total"]["requests"]
    step = {
        "rate_per_s": rate,
        "duration_s": duration_s,
        "achieved_rate_per_s": summary["total"]["achieved_rate_per_s"],
        "client": summary,
        "server": server,
        "delivery_lag_ms": server["delivery_lag_ms"],
        "cpu_s_per_1k_requests": openloop.cpu_per_1k(cpu_before, cpu_after, sent),
        "generator": {
            "tool": f"vegeta {loadgen.VEGETA_VERSION}",
            "cpu_s": round(run.cpu_s, 2),
            "cpu_s_per_1k_requests": round(run.cpu_s * 1000 / sent, 3) if sent else None,
            "wall_s": round(run.wall_s, 1),
        },
        # Per second: {"t": s, service: [limit, in flight, waiting]}.
        "admission_gates": gates.samples,
    }
    t = summary["total"]
    say(
        f"  {rate:g}/s for {duration_s:g}s: achieved {t['achieved_rate_per_s']}/s, accepted {t['accepted']} "
        f"(p50 {t['accepted_ms']['p50']} / p99 {t['accepted_ms']['p99']} ms), refused {t['refused']} "
        f"(max {t['refused_ms']['max']} ms), errors {t['errors']}, lag p99 {server['delivery_lag_ms']['p99']} ms, "
        f"vegeta CPU {run.cpu_s:.1f}s"
    )
    return step


def target_of(system: procs.BenchSystem) -> Target:
    """The workload's view of a started ``BenchSystem`` (real or embedded)."""

    def metrics() -> dict[str, str]:
        urls = {s: f"{system.url(s)}/metrics" for s in ("api", "social-graph", "tweet-store")}
        for name in system.running_workers():
            port = system.worker_ports.get(name, system.ports["fanout-worker"])
            urls[name] = f"http://127.0.0.1:{port}/metrics"
        return urls

    return Target(api=system.url("api"), metrics=metrics, pids=system.pids)


async def seeded(bench: Any) -> Seeded:
    """The real-engine population, seeded once per run by the first
    open-loop phase that needs it."""
    if bench.open_loop is None:
        p = bench.plan
        say(f"open loop: seeding {p.open_users} users (Zipf-like follows, mean {p.open_mean_following})")
        bench.open_loop = await seed(
            bench.api, f"o{bench.tag}", p.open_users, p.open_mean_following, random.Random(f"{bench.tag}-population")
        )
    return bench.open_loop  # type: ignore[no-any-return]


def method_note() -> str:
    return (
        f"Open loop: vegeta {loadgen.VEGETA_VERSION} (Go, compiled) sends a pre-generated request list at a fixed "
        "rate whatever the answers, adding workers as answers lag; the rate it achieved and its own CPU "
        "(wait4 resource usage) are reported beside each figure. The mix: "
        + ", ".join(f"{int(v * 100)} % {k.replace('_', '-')}" for k, v in openloop.MIX.items())
        + ". Latencies from the client (vegeta, per request) and from the gateway's own histogram "
        "(fanline_http_request_duration_seconds, admitted requests only, bucket-interpolated); delivery lag "
        "from the workers' fanline_delivery_lag_seconds over the same interval (bucket-interpolated); CPU from "
        "/proc/<pid>/stat of every Fanline process (the engines, Cassandra and Kafka, not included)."
    )
