"""The open-loop workload: a Zipf-like population, the request list vegeta sends at a fixed
rate whatever the answers, and one step's figures (``run_step``; docs/benchmark-methods.md)."""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from . import probes, stats
from .rows import Scope

VEGETA = "v12.12.0"
PASSWORD = "open-loop-pw-1"
Mix = Mapping[str, float]
Request = dict[str, Any]  # in vegeta's JSON target format
Summary = dict[str, dict[str, Any]]  # route -> figures
Outcome = tuple[int, int, float, str, bool]  # start (ns), status, latency (ms), route, has Retry-After
MIX = {"post": 0.20, "home": 0.50, "userline": 0.20, "follow": 0.04, "unfollow": 0.04, "sign_in": 0.02}
ROUTES = {  # the gateway's (method, route label) of each kind of request
    "post": ("POST", "/v1/tweets"),
    "home": ("GET", "/v1/timeline"),
    "userline": ("GET", "/v1/users/{username}/tweets"),
    "follow": ("PUT", "/v1/users/{username}/following/{target}"),
    "unfollow": ("DELETE", "/v1/users/{username}/following/{target}"),
    "sign_in": ("POST", "/v1/sessions"),
}


@dataclass(frozen=True)
class Population:
    follows: Mapping[str, tuple[str, ...]]  # user -> followees, the most popular user first
    tokens: dict[str, str]


@dataclass
class Target:
    """A running system and its population, as the workload sees them."""

    api: str
    metrics: Callable[[], dict[str, str]]  # process -> its /metrics
    pids: Callable[[], dict[str, int]]  # process -> pid, the engines included
    pop: Population


def zipf_follows(prefix: str, users: int, mean_following: int, rng: random.Random) -> dict[str, tuple[str, ...]]:
    """User -> followees: k of them (uniform in 1..2 x mean - 1), picked by Zipf
    popularity (weight 1/rank), never itself; no two users share a set."""
    names = [f"{prefix}u{i}" for i in range(users)]
    if users < 3 or len(names[-1]) > 15:
        raise ValueError(f"need at least 3 users and names of at most 15 characters ({prefix!r})")
    weights, seen, follows = [1.0 / (i + 1) for i in range(users)], set(), {}
    for me in range(users):
        for _ in range(20):
            k, chosen = min(users - 1, rng.randint(1, max(1, 2 * mean_following - 1))), set[int]()
            while len(chosen) < k:
                if (pick := rng.choices(range(users), weights)[0]) != me:
                    chosen.add(pick)
            if frozenset(chosen) not in seen:
                break
        seen.add(frozenset(chosen))
        follows[names[me]] = tuple(names[i] for i in sorted(chosen))
    return follows


async def seed(api: str, prefix: str, users: int, mean_following: int, rng: random.Random) -> Population:
    """The population through the public API: sign-ups, log-ins, follows, two tweets each."""
    follows, tokens, sem = zipf_follows(prefix, users, mean_following, rng), {}, asyncio.Semaphore(8)
    async with httpx.AsyncClient(base_url=api, timeout=60) as client:

        async def call(method: str, url: str, token: str | None = None, body: Any = None) -> httpx.Response:
            """One request, honouring a 503's Retry-After (up to 10 tries); anything but 2xx/409 raises."""
            auth = {"authorization": f"Bearer {token}"} if token else {}
            async with sem:
                for _ in range(10):
                    r = await client.request(method, url, json=body, headers=auth)
                    if r.status_code != 503:
                        break
                    await asyncio.sleep(min(1.0, float(r.headers.get("retry-after", 1))) * rng.uniform(0.5, 1.0))
            if r.status_code >= 300 and r.status_code != 409:
                raise RuntimeError(f"{method} {url}: {r.status_code} {r.text[:200]}")
            return r

        async def sign_up(name: str) -> None:
            await call("POST", "/v1/users", body={"username": name, "password": PASSWORD})
            tokens[name] = (await call("POST", "/v1/sessions", body={"username": name, "password": PASSWORD})).json()["token"]

        await asyncio.gather(*(sign_up(u) for u in follows))
        await asyncio.gather(*(call("PUT", f"/v1/users/{me}/following/{o}", tokens[me]) for me in follows for o in follows[me]))
        await asyncio.gather(*(call("POST", "/v1/tweets", tokens[u], {"body": f"tweet {i}"}) for u in follows for i in range(2)))
    return Population(follows, tokens)


def _target(method: str, url: str, token: str | None = None, body: Any = None) -> Request:
    """One request in vegeta's JSON target format."""
    header = {"Authorization": [f"Bearer {token}"]} if token else {}
    if body is None:
        return {"method": method, "url": url, "header": header}
    header["Content-Type"] = ["application/json"]
    return {"method": method, "url": url, "header": header, "body": base64.b64encode(json.dumps(body).encode()).decode()}


def make_targets(pop: Population, api: str, count: int, rng: random.Random, mix: Mix = MIX) -> list[Request]:
    """``count`` requests drawn from ``mix``, in the order vegeta sends them. A follow-only
    mix follows pairs not followed yet, each once, so every request writes."""
    users = list(pop.follows)
    weights = [1.0 / (i + 1) for i in range(len(users))]
    fresh = [(me, o) for me in users for o in users if o != me and o not in pop.follows[me]]
    rng.shuffle(fresh)
    out = []
    for i, kind in enumerate(rng.choices(list(mix), list(mix.values()), k=count)):
        me, popular = rng.choice(users), rng.choices(users, weights)[0]
        if kind == "post":
            out.append(_target("POST", f"{api}/v1/tweets", pop.tokens[me], {"body": f"open-loop tweet {i}"}))
        elif kind == "home":
            out.append(_target("GET", f"{api}/v1/timeline?limit=20", pop.tokens[me]))
        elif kind == "userline":
            out.append(_target("GET", f"{api}/v1/users/{popular}/tweets?limit=20"))
        elif kind in ("follow", "unfollow"):
            me, other = fresh.pop() if len(mix) == 1 and fresh else (me, popular if popular != me else users[users.index(me) - 1])
            out.append(_target("PUT" if kind == "follow" else "DELETE", f"{api}/v1/users/{me}/following/{other}", pop.tokens[me]))
        else:
            out.append(_target("POST", f"{api}/v1/sessions", None, {"username": me, "password": PASSWORD}))
    return out


def route_of(method: str, url: str) -> str:
    path = re.sub(r"^https?://[^/]+", "", url).split("?", 1)[0]
    matches = (k for k, (m, r) in ROUTES.items() if m == method and re.fullmatch(re.sub(r"\{\w+\}", "[^/]+", r), path))
    return next(matches, "other")


def parse_csv(text: str) -> list[Outcome]:
    """``vegeta encode --to csv`` rows (timestamp ns, code, latency ns, bytes out, bytes in, error, body,
    attack, seq, method, url, headers base64) as (start ns, status, latency ms, route, has Retry-After)."""
    out = []
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 11:
            headers = base64.b64decode(row[11]).decode(errors="replace").lower() if len(row) > 11 else ""
            out.append((int(row[0]), int(row[1]), int(row[2]) / 1e6, route_of(row[9], row[10]), "retry-after" in headers))
    return out


def rate_flag(rate: float) -> str:
    """vegeta's ``-rate``: whole requests per whole seconds (``37.5/1s`` is a usage error)."""
    if not rate > 0:
        raise ValueError(f"rate must be positive: {rate!r}")
    pers = (1, 2, 4, 5, 8, 10, 16, 32, 64, 100, 128, 256, 512, 1000, 1024)
    per = next((p for p in pers if abs(rate * p - round(rate * p)) < 1e-9), 1000)
    return f"{round(rate * per)}/{per}s"


def attack(targets: Path, rate: float, seconds: float) -> tuple[list[Outcome], float]:
    """Send the targets at ``rate``/s for ``seconds``: the outcomes and vegeta's own CPU-seconds."""
    local = Path(__file__).with_name(".tools") / f"vegeta-{VEGETA}"
    if not (binary := str(local) if local.exists() else shutil.which("vegeta")):
        raise FileNotFoundError(f"vegeta not found: run `make bench-tools` (installs {VEGETA} into {local.parent})")
    results = targets.with_suffix(".bin")
    argv = [binary, "attack", "-format=json", f"-targets={targets}", f"-rate={rate_flag(rate)}", f"-duration={seconds:g}s"]
    proc = subprocess.Popen([*argv, "-timeout=30s", "-max-workers=2000", f"-output={results}"], stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"vegeta attack failed: {proc.stderr.read().decode()[-500:] if proc.stderr else status}")
    encoded = subprocess.run([binary, "encode", "--to=csv", str(results)], capture_output=True, text=True, check=True)
    return parse_csv(encoded.stdout), usage.ru_utime + usage.ru_stime


def summarize(outcomes: Sequence[Outcome]) -> Summary:
    """Per route and ``all``: requests, accepted (2xx) latencies, refusals (503) and their
    latencies, refusals without Retry-After, errors (anything else, no answer included)."""
    out = {}
    for route in ("all", *ROUTES, "other"):
        if rows := [o for o in outcomes if route in ("all", o[3])]:
            refused = [o for o in rows if o[1] == 503]
            out[route] = {
                "requests": len(rows),
                "accepted": [o[2] for o in rows if 200 <= o[1] < 300],
                "refused": [o[2] for o in refused],
                "refused_without_retry_after": sum(1 for o in refused if not o[4]),
                "errors": sum(1 for o in rows if not (200 <= o[1] < 300 or o[1] == 503)),
            }
    starts = sorted(o[0] for o in outcomes)
    span = (starts[-1] - starts[0]) / 1e9 if len(starts) > 1 else 0.0
    out["all"]["achieved_per_s"] = (len(starts) - 1) / span if span > 0 else None
    return out


def held(summary: Mapping[str, Any], lag_p99_ms: float | None, offered: float) -> tuple[bool, str]:
    """Whether a saturation step held: post p99 <= 100 ms, lag p99 <= 2 s, <= 1 % refused
    or failed, and the generator achieved >= 90 % of the offered rate; else why not."""
    total, post = summary["all"], (summary.get("post") or {}).get("accepted")
    bad, achieved = len(total["refused"]) + total["errors"], total.get("achieved_per_s")
    for failed, why in (
        (not post, "no post accepted"),
        (post and stats.percentile(post, 99) > 100, f"post p99 {stats.percentile(post or [0], 99):.0f} ms > 100 ms"),
        (lag_p99_ms is None or lag_p99_ms > 2000, f"delivery lag p99 {lag_p99_ms} ms > 2,000 ms"),
        (bad > 0.01 * total["requests"], f"{bad} of {total['requests']} requests refused or failed"),
        (achieved is None or achieved < 0.9 * offered, f"generator achieved {achieved} of {offered:g}/s"),
    ):
        if failed:
            return False, why
    return True, "held"


def rates(start: float, factor: float, steps: int) -> list[float]:
    """The saturation curve's offered rates: ``start`` x ``factor``^i."""
    if start <= 0 or factor <= 1 or steps < 1:
        raise ValueError("need start > 0, factor > 1, steps >= 1")
    return [round(start * factor**i, 1) for i in range(steps)]


def between(low: float, high: float) -> float:
    """The rate a refining step tries between one that held and one that did not: their
    geometric mean (the curve's steps are geometric), to 0.1 requests/s."""
    if not 0 < low < high:
        raise ValueError("need 0 < low < high")
    return round((low * high) ** 0.5, 1)


# How often a worker refreshes its lag gauge (fanline_fanout.app, report_lag).
LAG_REPORT_S = 5.0


def drain_workers(urls: Mapping[str, str], timeout_s: float, unreported_s: float = 60.0, after_s: float = 0.0) -> None:
    """Until the workers report no consumer lag (at most ``timeout_s``). A worker reports its
    lag only once it has its partitions and their log ends (every 5 s): until one of them does,
    no lag is not an empty queue, and the wait goes on for up to ``unreported_s``. (A fresh
    system, joined but not yet fetching, passed for drained: a step of ``baseline_ref`` then
    met its ~500 seeding tweets, delivery lag p99 3.5 s at 25/s, run 4c97 of 2026-12-06.)
    ``after_s``: first wait that long, so that each gauge read postdates what was just
    published (right after a seeding, the last report said 0: run 731e, 2026-12-07)."""
    time.sleep(after_s)
    started, workers = time.monotonic(), [u for n, u in urls.items() if n.startswith("fanout-worker")]
    while (waited := time.monotonic() - started) < timeout_s:
        lags = [lag for u in workers if (lag := probes.total(probes.scrape(u), "fanline_consumer_lag_messages")) is not None]
        if not any(lags) and (lags or not workers or waited >= unreported_s):
            return
        time.sleep(0.5)


def idle(s: Scope, target: Target, seconds: float, rate: float) -> None:
    """Each process's CPU with no requests for ``seconds`` (the workers drained first), recorded
    in ``s`` as % of a core and as what it adds to each of ``rate`` requests per second: the part
    of a cost per request that is time, not work (docs/benchmark-methods.md, "mixed")."""
    drain_workers(target.metrics(), 120.0)
    pids = target.pids()
    cpu0, started = probes.cpu_clocks(pids), time.monotonic()
    time.sleep(seconds)
    cpu1, elapsed = probes.cpu_clocks(pids), time.monotonic() - started
    s("idle_s", elapsed)
    # cpu_per_1k over 1,000 x elapsed "requests": CPU-seconds per second, i.e. cores
    for process, cores in probes.cpu_per_1k(cpu0, cpu1, 1000 * elapsed).items():
        s("idle_cpu_percent", 100 * cores, process=process)
        s("idle_cpu_s_per_1k", 1000 * cores / rate, process=process)


def run_step(
    s: Scope, target: Target, rate: float, seconds: float, mix: Mix = MIX, together: threading.Barrier | None = None
) -> tuple[Summary, float | None]:
    """One open-loop run, recorded in ``s``: the client's summary and the delivery lag p99 (ms).
    ``together``: the load starts once every run step sharing this barrier is ready for it
    (two systems under load at once, ``paired_cost``)."""
    rng, workdir = random.Random(f"{s.scenario}-{rate}-{s.labels}"), Path(tempfile.mkdtemp(prefix="fanline-vegeta-"))
    requests = make_targets(target.pop, target.api, max(1, int(rate * seconds)), rng, mix)
    (targets := workdir / "targets.jsonl").write_text("".join(json.dumps(t) + "\n" for t in requests))
    urls = target.metrics()
    drain_workers(urls, 120.0)  # what came before (seeding, the previous step) is delivered first
    if together is not None:
        together.wait(timeout=600)
    before, cpu0 = {n: probes.scrape(u) for n, u in urls.items()}, probes.cpu_clocks(target.pids())
    outcomes, vegeta_cpu = attack(targets, rate, seconds)
    shutil.rmtree(workdir, ignore_errors=True)
    cpu1 = probes.cpu_clocks(target.pids())  # before the drain: the load's own CPU
    drain_workers(urls, 30.0)
    after, summary = {n: probes.scrape(u) for n, u in urls.items()}, summarize(outcomes)
    s("offered_per_s", rate)
    s("duration_s", seconds)
    s("achieved_per_s", summary["all"]["achieved_per_s"])
    s("refused_without_retry_after", summary["all"]["refused_without_retry_after"])
    for route, got in summary.items():
        for name in ("requests", "errors"):
            s(name, got[name], route=route)
        s("refused", len(got["refused"]), route=route)
        s.dist("accepted_ms", got["accepted"], ("p50", "p99", "max"), route=route)
        s.dist("refused_ms", got["refused"], ("max",), route=route)
    for route, (method, path) in ROUTES.items():
        for q in (50, 99):
            labels = (f'method="{method}"', f'route="{path}"')
            v = probes.quantile(before.get("api", {}), after.get("api", {}), probes.HTTP, q / 100, *labels)
            s("gateway_ms", None if v is None else 1000 * v, route=route, stat=f"p{q}")
    for service in ("api", "tweet-store", "social-graph"):
        # filtered by service: with the stores in the gateway's process (--colocate) each page has all three
        b, a, mine = before.get(service, {}), after.get(service, {}), f'service="{service}"'
        s("shed", probes.increase(b, a, "fanline_admission_shed_total", mine), service=service)
        wait = probes.quantile(b, a, "fanline_admission_queue_wait_seconds", 0.99, 'outcome="admitted"', mine)
        s("queue_wait_p99_ms", None if wait is None else 1000 * wait, service=service)
    # every worker's lag histogram, summed per bucket bound (series kept apart by a suffix)
    workers = [n for n in after if n.startswith("fanout-worker")]
    lag_b, lag_a = ({f"{k}@{n}": v for n in workers for k, v in page.get(n, {}).items()} for page in (before, after))
    lag = {q: probes.quantile(lag_b, lag_a, "fanline_delivery_lag_seconds", q / 100) for q in (50, 99)}
    for q, v in lag.items():
        s("lag_ms", None if v is None else 1000 * v, stat=f"p{q}")
    s("lag_tweets", sum(probes.increase(before.get(n, {}), after[n], "fanline_delivery_lag_seconds_count") for n in workers), "")
    # Statements per request (the drain's included: the fan-out's are the post's), each process once.
    sent = summary["all"]["requests"]
    if sent and (ran := probes.statements(before, after)):  # none: no metrics pages
        s("statements_per_request", sum(ran.values()) / sent, "", statement="all")
        for name, count in ran.items():
            s("statements_per_request", count / sent, "", statement=name)
    for process, v in probes.cpu_per_1k(cpu0, cpu1, sent).items():
        s("cpu_s_per_1k", v, process=process)
    s("generator_cpu_s_per_1k", 1000 * vegeta_cpu / sent)
    return summary, None if lag[99] is None else 1000 * lag[99]
