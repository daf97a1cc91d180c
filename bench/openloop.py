"""The open-loop mixed workload (issue 18 items 3-5): its population, its
pre-generated request list, and what its results mean. Pure: no processes,
no network — the phases (``phases/mixed.py``, ``saturation.py``,
``overload.py``, ``mixed_embedded.py``) run it through ``workload.py`` and
``loadgen.py``, and tests/unit/test_bench_openloop.py checks every rule here.

* **Population**: ``users`` accounts whose popularity follows a Zipf law
  (the i-th most popular has weight 1/(i+1)^s): each user follows a number
  of others drawn around ``mean_following``, picked by popularity, so a few
  authors have most followers and every user's follow set is distinct.
* **Requests**: arrivals at a fixed rate whatever the answers (the
  generator, vegeta, sends on schedule); each one drawn from ``MIX`` —
  posts, home reads, userline reads (of popular authors, by the same Zipf
  weights), follows, unfollows and sign-ins — with the bearer tokens got
  while seeding.
* **Results**: per route p50/p99 of the accepted requests, refusals
  (``503`` + ``Retry-After``) and their latency, errors, and the rate the
  generator really achieved.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .stats import percentile

# Share of each kind of request (sums to 1). The issue's trial used 20 % posts,
# 60 % home reads, 20 % userline reads; follows, unfollows and sign-ins (argon2,
# the costliest request by far) take a few percent from the reads.
MIX: dict[str, float] = {"post": 0.20, "home": 0.50, "userline": 0.20, "follow": 0.04, "unfollow": 0.04, "sign_in": 0.02}
ROUTES = tuple(MIX)
ZIPF_EXPONENT = 1.0


@dataclass(frozen=True)
class Population:
    users: tuple[str, ...]  # most popular first
    follows: Mapping[str, tuple[str, ...]]  # follower -> followees

    def followers(self) -> dict[str, int]:
        counts = {u: 0 for u in self.users}
        for followees in self.follows.values():
            for f in followees:
                counts[f] += 1
        return counts

    def weights(self, exponent: float = ZIPF_EXPONENT) -> list[float]:
        return [1.0 / (i + 1) ** exponent for i in range(len(self.users))]


def zipf_population(
    prefix: str, users: int, mean_following: int, rng: random.Random, exponent: float = ZIPF_EXPONENT
) -> Population:
    """``users`` names ``<prefix>u<i>`` (at most 15 characters) and their
    follow sets: user ``u`` follows k others, k uniform in
    [1, 2 x mean_following - 1], each picked with probability ∝ popularity,
    without repeats and never itself; no two users share a follow set."""
    if users < 3:
        raise ValueError("a population needs at least 3 users")
    names = tuple(f"{prefix}u{i}" for i in range(users))
    if any(len(n) > 15 for n in names):
        raise ValueError(f"prefix {prefix!r} too long for usernames of at most 15 characters")
    weights = [1.0 / (i + 1) ** exponent for i in range(users)]
    follows: dict[str, tuple[str, ...]] = {}
    seen: set[frozenset[int]] = set()
    for me in range(users):
        for _attempt in range(20):
            k = min(users - 1, rng.randint(1, max(1, 2 * mean_following - 1)))
            chosen: set[int] = set()
            while len(chosen) < k:
                pick = rng.choices(range(users), weights)[0]
                if pick != me:
                    chosen.add(pick)
            key = frozenset(chosen)
            if key not in seen:
                break
        seen.add(key)
        follows[names[me]] = tuple(names[i] for i in sorted(chosen))
    return Population(names, follows)


# --- the request list ----------------------------------------------------------------------


def _target(method: str, url: str, token: str | None = None, body: Any = None) -> dict[str, Any]:
    """One request in vegeta's JSON target format."""
    header: dict[str, list[str]] = {}
    if token is not None:
        header["Authorization"] = [f"Bearer {token}"]
    target: dict[str, Any] = {"method": method, "url": url, "header": header}
    if body is not None:
        header["Content-Type"] = ["application/json"]
        target["body"] = base64.b64encode(json.dumps(body).encode()).decode()
    return target


def make_targets(
    population: Population,
    tokens: Mapping[str, str],
    base_url: str,
    count: int,
    rng: random.Random,
    password: str,
    mix: Mapping[str, float] = MIX,
) -> list[dict[str, Any]]:
    """``count`` requests drawn from ``mix``, in vegeta's JSON target format
    (vegeta sends them in this order, one per tick of the rate)."""
    users = list(population.users)
    weights = population.weights()
    kinds = list(mix)
    out = []
    for i, kind in enumerate(rng.choices(kinds, [mix[k] for k in kinds], k=count)):
        me = rng.choice(users)
        if kind == "post":
            out.append(_target("POST", f"{base_url}/v1/tweets", tokens[me], {"body": f"open-loop tweet {i}"}))
        elif kind == "home":
            out.append(_target("GET", f"{base_url}/v1/timeline?limit=20", tokens[me]))
        elif kind == "userline":
            author = rng.choices(users, weights)[0]
            out.append(_target("GET", f"{base_url}/v1/users/{author}/tweets?limit=20"))
        elif kind in ("follow", "unfollow"):
            other = me
            while other == me:
                other = rng.choices(users, weights)[0]
            method = "PUT" if kind == "follow" else "DELETE"
            out.append(_target(method, f"{base_url}/v1/users/{me}/following/{other}", tokens[me]))
        elif kind == "sign_in":
            out.append(_target("POST", f"{base_url}/v1/sessions", None, {"username": me, "password": password}))
        else:
            raise ValueError(f"unknown request kind {kind!r}")
    return out


def targets_jsonl(targets: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(t, separators=(",", ":")) + "\n" for t in targets)


_ROUTES = (
    ("POST", re.compile(r"^/v1/tweets$"), "post"),
    ("GET", re.compile(r"^/v1/timeline$"), "home"),
    ("GET", re.compile(r"^/v1/users/[^/]+/tweets$"), "userline"),
    ("PUT", re.compile(r"^/v1/users/[^/]+/following/[^/]+$"), "follow"),
    ("DELETE", re.compile(r"^/v1/users/[^/]+/following/[^/]+$"), "unfollow"),
    ("POST", re.compile(r"^/v1/sessions$"), "sign_in"),
)


def route_of(method: str, url: str) -> str:
    path = re.sub(r"^https?://[^/]+", "", url).split("?", 1)[0]
    for m, pattern, name in _ROUTES:
        if m == method and pattern.match(path):
            return name
    return "other"


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One request as the generator saw it."""

    started_ns: int
    status: int  # 0: no answer (timeout, connection refused)
    latency_ms: float
    route: str
    retry_after: bool  # the answer carried Retry-After
    error: str = ""


def parse_vegeta_csv(text: str) -> list[Outcome]:
    """``vegeta encode --to csv`` rows: timestamp (ns), code, latency (ns),
    bytes out, bytes in, error, body (base64), attack, seq, method, url,
    headers (base64 of the HTTP header block)."""
    out = []
    for row in csv.reader(io.StringIO(text)):
        if len(row) < 11:
            continue
        headers = ""
        if len(row) > 11 and row[11]:
            try:
                headers = base64.b64decode(row[11]).decode(errors="replace").lower()
            except ValueError:
                headers = ""
        out.append(
            Outcome(
                started_ns=int(row[0]),
                status=int(row[1]),
                latency_ms=int(row[2]) / 1e6,
                route=route_of(row[9], row[10]),
                retry_after="retry-after" in headers,
                error=row[5],
            )
        )
    return out


def _pct(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": round(percentile(values, 50), 2), "p99": round(percentile(values, 99), 2), "max": round(max(values), 2)}


def summarize(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """What a run of the generator measured, per route and in all:
    ``accepted_ms`` (2xx), ``refused_ms`` (503; ``refused_without_retry_after``
    counts those lacking the header), ``errors`` (anything else: other
    statuses, no answer), the offered count and the rate achieved."""

    def block(rows: Sequence[Outcome]) -> dict[str, Any]:
        ok = [o.latency_ms for o in rows if 200 <= o.status < 300]
        refused = [o for o in rows if o.status == 503]
        errors = [o for o in rows if not (200 <= o.status < 300 or o.status == 503)]
        statuses: dict[str, int] = {}
        for o in errors:
            key = str(o.status) if o.status else "no answer"
            statuses[key] = statuses.get(key, 0) + 1
        return {
            "requests": len(rows),
            "accepted": len(ok),
            "accepted_ms": _pct(ok),
            "refused": len(refused),
            "refused_ms": _pct([o.latency_ms for o in refused]),
            "refused_without_retry_after": sum(1 for o in refused if not o.retry_after),
            "errors": len(errors),
            "error_statuses": statuses,
        }

    by_route = {r: block([o for o in outcomes if o.route == r]) for r in (*ROUTES, "other")}
    by_route = {r: b for r, b in by_route.items() if b["requests"]}
    total = block(outcomes)
    starts = sorted(o.started_ns for o in outcomes)
    span_s = (starts[-1] - starts[0]) / 1e9 if len(starts) > 1 else 0.0
    total["achieved_rate_per_s"] = round((len(starts) - 1) / span_s, 1) if span_s > 0 else None
    return {"total": total, "routes": by_route}


# --- saturation and overload -----------------------------------------------------------------

POST_P99_BOUND_MS = 100.0
LAG_P99_BOUND_MS = 2000.0


def step_held(
    summary: Mapping[str, Any], lag_p99_ms: float | None, offered_rate: float, min_achieved: float = 0.9
) -> tuple[bool, str]:
    """Whether the system held one saturation step: post p99 ≤ 100 ms, lag
    p99 ≤ 2 s, no more than 1 % of requests refused or failed, and the
    generator achieved at least ``min_achieved`` of the offered rate (else
    the step measured the generator, not the system). The reason if not."""
    total = summary["total"]
    post = (summary["routes"].get("post") or {}).get("accepted_ms", {}).get("p99")
    if post is None:
        return False, "no post accepted"
    if post > POST_P99_BOUND_MS:
        return False, f"post p99 {post:.0f} ms > {POST_P99_BOUND_MS:.0f} ms"
    if lag_p99_ms is None:
        return False, "no delivery lag measured"
    if lag_p99_ms > LAG_P99_BOUND_MS:
        return False, f"delivery lag p99 {lag_p99_ms:.0f} ms > {LAG_P99_BOUND_MS:.0f} ms"
    bad = total["refused"] + total["errors"]
    if total["requests"] and bad / total["requests"] > 0.01:
        return False, f"{bad} of {total['requests']} requests refused or failed"
    achieved = total.get("achieved_rate_per_s")
    if achieved is None or achieved < min_achieved * offered_rate:
        return False, f"generator achieved {achieved} of {offered_rate:g}/s"
    return True, "held"


def capacity(steps: Sequence[Mapping[str, Any]]) -> float | None:
    """The highest offered rate that held before the first step that did
    not (``steps`` in the order run, each with ``rate_per_s`` and ``held``)."""
    best = None
    for step in steps:
        if not step.get("held"):
            break
        best = float(step["rate_per_s"])
    return best


def saturation_rates(start: float, factor: float, steps: int) -> list[float]:
    """Offered rates of the saturation curve: ``start`` x ``factor``^i."""
    if start <= 0 or factor <= 1 or steps < 1:
        raise ValueError("need start > 0, factor > 1, steps >= 1")
    return [round(start * factor**i, 1) for i in range(steps)]


# --- the services' own histograms (Prometheus text, two scrapes) ----------------------------

_LE = re.compile(r'le="([^"]+)"')


def histogram_quantile(
    before: Mapping[str, float], after: Mapping[str, float], metric: str, q: float, must_contain: Sequence[str] = ()
) -> float | None:
    """Prometheus' ``histogram_quantile`` over the increase of every
    ``metric`` series (summed per bucket) between two scrapes whose labels
    contain all of ``must_contain``; linear inside a bucket. Seconds, or
    None without observations."""
    buckets: dict[float, float] = {}
    prefix = f"{metric}_bucket{{"
    for series, value in after.items():
        if not series.startswith(prefix) or not all(m in series for m in must_contain):
            continue
        found = _LE.search(series)
        if found is None:
            continue
        le = float(found.group(1))  # "+Inf" parses as inf
        buckets[le] = buckets.get(le, 0.0) + value - before.get(series, 0.0)
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if le == float("inf"):
                return lower_bound  # Prometheus: the highest finite bound
            if count == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = le, count
    return bounds[-1]


def counter_increase(
    before: Mapping[str, float], after: Mapping[str, float], metric: str, must_contain: Sequence[str] = ()
) -> float:
    """The summed increase of every ``metric`` series with those labels."""
    total = 0.0
    for series, value in after.items():
        name = series.split("{", 1)[0]
        if name == metric and all(m in series for m in must_contain):
            total += value - before.get(series, 0.0)
    return total


def cpu_per_1k(cpu_before: Mapping[str, float], cpu_after: Mapping[str, float], requests: int) -> dict[str, float]:
    """CPU-seconds per 1,000 requests of each process (and ``total``)."""
    if requests <= 0:
        return {}
    out = {name: round((cpu_after[name] - cpu_before.get(name, 0.0)) * 1000 / requests, 3) for name in sorted(cpu_after)}
    out["total"] = round(sum(out.values()), 3)
    return out
