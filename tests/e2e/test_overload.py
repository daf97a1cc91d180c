"""Overload sheds, never queues (issue #18 item 4; docs/operations/scale.md "Overload").

A whole system is started with a tiny admission limit (2 requests in flight
per service, 20 ms queue deadline, 2 waiting) and flooded through the public
API with many more concurrent requests than that — posts, home and userline
reads — while the probes and a live stream stay open. Then:

* every answer is a success or a ``503 unavailable`` with ``Retry-After``
  and api.md's error body: no 500, no other 5xx, no request left hanging;
* the refusals are fast: the gateway's own queue-wait histogram has 95 % of
  them within 100 ms and every one within 1 s, and the client saw half of
  them answered within 100 ms and every one within 1 s. (The test's Python
  client shares two cores with five processes, and CI machines are busy:
  the strict "every refusal within 100 ms" is the benchmark's overload
  target, measured with a compiled generator, docs/benchmarks.md.)
  Queueing instead of shedding would take seconds;
* some requests were refused and some served (the limit is real, and it
  does not refuse everything);
* ``/healthz`` and a live stream are not refused while the limit is full,
  and once the flood is over the system serves normally again;
* at twice the gateway's capacity, public requests that mark themselves as
  background work (``X-Fanline-Priority: background``, the fan-out worker's
  mark between services) are shed like any other (issue #29 item 1).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import orjson
import pytest

from deploy.local.system import System

from .client import Api
from .conftest import make_system

pytestmark = [pytest.mark.e2e]
TINY = {
    "FANLINE_ADMISSION_MAX_IN_FLIGHT": "2",
    "FANLINE_ADMISSION_QUEUE_DEADLINE_S": "0.02",
    "FANLINE_ADMISSION_MAX_QUEUE": "2",
}
FLOOD = 300  # requests, over CONCURRENCY connections at once
CONCURRENCY = 30
# What the gateway holds at once under TINY: in flight plus waiting.
CAPACITY = int(TINY["FANLINE_ADMISSION_MAX_IN_FLIGHT"]) + int(TINY["FANLINE_ADMISSION_MAX_QUEUE"])


@pytest.fixture(scope="module", params=["embedded", pytest.param("real", marks=pytest.mark.real_infra)])
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    kind = request.param
    infra = request.getfixturevalue("real_infra") if kind == "real" else None
    system = make_system(kind, 19800 if kind == "embedded" else 29800, tmp_path_factory.mktemp(f"tiny-{kind}"), infra, **TINY)
    system.start(timeout=180 if kind == "real" else 90)
    yield system
    system.stop()


def shed_waits(metrics_text: str, service: str) -> tuple[float, float, float]:
    """(refusals, those that waited at most 100 ms, at most 1 s) from a /metrics page."""

    def value(le: str) -> float:
        pattern = (
            rf'^fanline_admission_queue_wait_seconds_bucket\{{(?=[^}}]*le="{re.escape(le)}")'
            rf'(?=[^}}]*outcome="shed")(?=[^}}]*service="{service}")[^}}]*\}} (\S+)$'
        )
        found = re.search(pattern, metrics_text, re.M)
        return float(found.group(1)) if found else 0.0

    return value("+Inf"), value("0.1"), value("1.0")


async def flood(base_url: str, users: list[tuple[str, str]]) -> list[tuple[int, float, dict[str, str], Any]]:
    # aiohttp: a quarter of httpx's client CPU per request, so on these shared
    # cores the client's own slowness weighs less in the latencies it sees.
    connector = aiohttp.TCPConnector(limit=CONCURRENCY + 1)
    async with aiohttp.ClientSession(base_url, connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as client:

        async def one(i: int) -> tuple[int, float, dict[str, str], Any]:
            name, token = users[i % len(users)]
            auth = {"Authorization": f"Bearer {token}"}
            started = time.perf_counter()
            if i % 3 == 0:
                call = client.post("/v1/tweets", json={"body": f"flood {i}"}, headers=auth)
            elif i % 3 == 1:
                call = client.get("/v1/timeline", headers=auth)
            else:
                call = client.get(f"/v1/users/{name}/tweets")
            async with call as r:
                raw = await r.read()
                elapsed = time.perf_counter() - started
                headers = {k.lower(): v for k, v in r.headers.items()}
                body = orjson.loads(raw) if headers.get("content-type", "").startswith("application/json") else None
                return r.status, elapsed, headers, body

        async def worker(w: int) -> list[tuple[int, float, dict[str, str], Any]]:
            # Each connection sends its next request as soon as it has an
            # answer: the time measured is the server's, not a wait for a
            # free connection in the client's pool.
            return [await one(i) for i in range(w, FLOOD, CONCURRENCY)]

        async def probe() -> list[int]:
            codes = []
            for _ in range(5):
                async with client.get("/healthz") as r:
                    codes.append(r.status)
                await asyncio.sleep(0.05)
            return codes

        per_worker, health = await asyncio.gather(asyncio.gather(*(worker(w) for w in range(CONCURRENCY))), probe())
    assert set(health) == {200}, health
    return [answer for answers in per_worker for answer in answers]


def test_a_flood_past_a_tiny_limit_gets_fast_503s_with_retry_after_and_nothing_else_fails(tiny: System) -> None:
    api = Api(tiny.url())
    try:
        users = [api.user("shed") for _ in range(4)]
        api.follow(users[0][1], users[0][0], users[1][0])
        with (
            httpx.Client(base_url=tiny.url(), timeout=30) as sse,
            sse.stream("GET", "/v1/streaming/home", headers={"Authorization": f"Bearer {users[0][1]}"}) as stream,
        ):
            assert stream.status_code == 200  # streams are not counted ...
            answers = asyncio.run(flood(tiny.url(), users))
            # ... and still open after the flood: a heartbeat arrives (1 s in tests).
            assert next(stream.iter_lines(), None) is not None
        statuses = [status for status, *_ in answers]
        refused = [(elapsed, headers, body) for status, elapsed, headers, body in answers if status == 503]
        others_5xx = sorted({s for s in statuses if s >= 500 and s != 503})
        assert not others_5xx, f"5xx other than 503: {others_5xx}"
        served = [s for s in statuses if s < 300]
        assert len(served) + len(refused) == FLOOD, sorted(set(statuses))
        assert refused, "a flood 30 times the limit refused nothing"
        assert served, "the limit refused everything"
        for _elapsed, headers, body in refused:
            assert headers.get("retry-after") == "1"
            assert body["error"]["code"] == "unavailable" and body["error"]["message"]
        latencies = sorted(elapsed for elapsed, *_ in refused)
        p95 = latencies[int(0.95 * (len(latencies) - 1))]
        print(
            f"flood: {len(served)} served, {len(refused)} refused; refusals p50 {latencies[len(latencies) // 2]:.3f} s, "
            f"p95 {p95:.3f} s, max {latencies[-1]:.3f} s"
        )
        assert latencies[len(latencies) // 2] < 0.1 and latencies[-1] < 1.0, (p95, latencies[-1])
        # The gateway's own view: refusals waited their 20 ms deadline, plus
        # what the loop lagged on these shared cores; none waited seconds.
        shed, within_100ms, within_1s = shed_waits(httpx.get(tiny.metrics_url("api"), timeout=10).text, "api")
        assert shed >= len([h for _e, h, _b in refused if h.get("x-fanline-overloaded") == "api"]) > 0
        assert within_100ms >= 0.95 * shed and within_1s == shed, (shed, within_100ms, within_1s)
        # Over: served normally again.
        assert api.request("GET", f"/v1/users/{users[0][0]}/tweets").status_code == 200
        assert api.post(users[1][1], "after the flood")["body"] == "after the flood"
    finally:
        api.close()


async def marked_flood(base_url: str, name: str, rounds: int) -> dict[str, list[tuple[int, str]]]:
    """Twice the gateway's capacity in connections, each sending ``rounds``
    requests back to back: half of them marked as background work (both
    values tweet-store knows), half not. Returns (status, who shed it) per group."""
    marks = [{"X-Fanline-Priority": "background"}, {"X-Fanline-Priority": "bulk"}, {}, {}]
    connector = aiohttp.TCPConnector(limit=2 * CAPACITY + 1)
    async with aiohttp.ClientSession(base_url, connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as client:

        async def worker(w: int) -> tuple[str, list[tuple[int, str]]]:
            headers = marks[w % len(marks)]
            answers = []
            for _ in range(rounds):
                async with client.get(f"/v1/users/{name}/tweets", headers=headers) as r:
                    await r.read()
                    answers.append((r.status, r.headers.get("X-Fanline-Overloaded", "")))
            return ("marked" if headers else "plain"), answers

        results = await asyncio.gather(*(worker(w) for w in range(2 * CAPACITY)))
    groups: dict[str, list[tuple[int, str]]] = {"marked": [], "plain": []}
    for group, answers in results:
        groups[group] += answers
    return groups


def test_public_requests_marked_as_background_work_are_shed_like_any_other(tiny: System) -> None:
    api = Api(tiny.url())
    try:
        name, _ = api.user("mark")
        groups = asyncio.run(marked_flood(tiny.url(), name, rounds=40))
    finally:
        api.close()
    shed = {g: sum(1 for status, by in answers if status == 503 and by == "api") for g, answers in groups.items()}
    other = {g: sorted({s for s, _ in answers if s not in (200, 503)}) for g, answers in groups.items()}
    print(f"twice the capacity ({2 * CAPACITY} connections): shed by the gateway {shed} of {len(groups['plain'])} each")
    assert other == {"marked": [], "plain": []}, other
    assert shed["plain"] > 0, "twice the capacity shed nothing: the flood did not reach the limit"
    # Before issue #29 the marked half was never counted, so never shed (0).
    # Shed like any other: the same order of refusals as the unmarked half.
    assert shed["marked"] >= shed["plain"] / 3, shed
