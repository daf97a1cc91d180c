"""Live streams (issue 16): many concurrent home streams on one gateway
process while authors post at a steady rate, each post reaching about 100
of the streams. Records ``streams`` (update latency p50/p99 from the post's
``201`` to the event at the client, memory per idle stream, CPU of idle
heartbeats) and ``details.streams``.

The measurement itself (``measure``) needs only a gateway URL and its pid, so
it also runs on its own against any running system (a smoke, not the
benchmark)::

    python -m bench.phases.streams --api http://127.0.0.1:8000 --pid <gateway pid> --streams 50
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from .. import stats
from ..common import BenchError, say
from ..harness import Bench

PASSWORD = "bench-streams-pw"
DELIVERY_WAIT_S = 10.0


@dataclass(frozen=True)
class StreamPlan:
    streams: int = 1000
    authors: int = 10  # each followed by streams / authors of the stream owners
    rate_per_s: float = 5.0
    duration_s: float = 60.0
    idle_s: float = 30.0  # CPU window, with and without the streams open


async def run(bench: Bench) -> None:
    p = bench.plan
    plan = StreamPlan(streams=p.streams, rate_per_s=p.stream_rate, duration_s=p.stream_duration_s,
                      idle_s=p.stream_idle_s)
    assert bench.system is not None
    result = await measure(bench.api, bench.system.procs["api"].pid, plan, bench.tag)
    bench.doc["streams"] = result["summary"]
    bench.details["streams"] = result["details"]


# --- the measurement ------------------------------------------------------------------


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise BenchError(f"no VmRSS for pid {pid}")


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


async def _cpu_share(pid: int, seconds: float) -> float:
    """CPU seconds per second the process used over ``seconds``."""
    c0, t0 = _cpu_s(pid), time.monotonic()
    await asyncio.sleep(seconds)
    return (_cpu_s(pid) - c0) / (time.monotonic() - t0)


class Client:
    """One home stream, read like an EventSource; records when updates arrive."""

    def __init__(self, session: aiohttp.ClientSession, url: str, token: str) -> None:
        self.session, self.url, self.token = session, url, token
        self.arrived: dict[str, float] = {}
        self.opened = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async with self.session.get(self.url, headers={"Authorization": f"Bearer {self.token}"}) as r:
                if r.status != 200:
                    raise BenchError(f"stream answered {r.status}: {(await r.text())[:200]}")
                self.opened.set_result(None)
                event, event_id = "", None
                async for raw in r.content:
                    line = raw.decode().rstrip("\r\n")
                    if line == "":
                        if event == "update" and event_id:
                            self.arrived.setdefault(event_id, time.time())
                        event, event_id = "", None
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("id:"):
                        event_id = line[3:].strip()
        except Exception as exc:  # noqa: BLE001 - reported to whoever waits for the stream to open
            if not self.opened.done():
                self.opened.set_exception(exc)

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def measure(api: str, pid: int, plan: StreamPlan, tag: str,
                  log: Callable[[str], None] = say) -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < plan.streams + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, plan.streams + 1000), hard))
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        async def sign_up(name: str) -> str:
            r = await http.post(f"{api}/v1/users", json={"username": name, "password": PASSWORD})
            if r.status != 201:
                raise BenchError(f"sign-up of {name}: {r.status} {(await r.text())[:200]}")
            r = await http.post(f"{api}/v1/sessions", json={"username": name, "password": PASSWORD})
            return str((await r.json())["token"])

        async def limited(coros: list[Any], limit: int = 8) -> list[Any]:
            sem = asyncio.Semaphore(limit)

            async def one(c: Any) -> Any:
                async with sem:
                    return await c

            return list(await asyncio.gather(*(one(c) for c in coros)))

        log(f"streams: signing up {plan.authors} authors and {plan.streams} stream owners")
        authors = [f"s{tag}a{j}" for j in range(plan.authors)]
        owners = [f"s{tag}o{i}" for i in range(plan.streams)]
        author_tokens = dict(zip(authors, await limited([sign_up(a) for a in authors]), strict=True))
        owner_tokens = await limited([sign_up(o) for o in owners])

        async def follow(i: int) -> None:
            r = await http.put(f"{api}/v1/users/{owners[i]}/following/{authors[i % plan.authors]}",
                               headers={"Authorization": f"Bearer {owner_tokens[i]}"})
            if r.status != 204:
                raise BenchError(f"follow: {r.status}")

        await limited([follow(i) for i in range(plan.streams)])
        audience = {a: [i for i in range(plan.streams) if i % plan.authors == j] for j, a in enumerate(authors)}

        gc.collect()
        await asyncio.sleep(2)
        rss_before = _rss_kib(pid)
        log(f"streams: gateway idle without streams for {plan.idle_s:.0f}s")
        cpu_without = await _cpu_share(pid, plan.idle_s)

        log(f"streams: opening {plan.streams} home streams")
        opened_at = time.monotonic()
        clients: list[Client] = []
        for start in range(0, plan.streams, 50):
            batch = [Client(http, f"{api}/v1/streaming/home", owner_tokens[i])
                     for i in range(start, min(start + 50, plan.streams))]
            clients.extend(batch)
            await asyncio.gather(*(c.opened for c in batch))
        open_s = time.monotonic() - opened_at
        await asyncio.sleep(3)  # let the gateway settle (following lists read, allocations done)
        rss_open = _rss_kib(pid)
        log(f"streams: all open in {open_s:.1f}s; idle with streams for {plan.idle_s:.0f}s")
        cpu_with = await _cpu_share(pid, plan.idle_s)
        rss_idle = _rss_kib(pid)

        total = int(plan.rate_per_s * plan.duration_s)
        log(f"streams: posting {total} tweets at {plan.rate_per_s:g}/s, each to ~{plan.streams // plan.authors} streams")
        answered: dict[str, tuple[float, str]] = {}
        begin = time.monotonic() + 0.2

        async def post(k: int) -> None:
            delay = begin + k / plan.rate_per_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            author = authors[k % plan.authors]
            r = await http.post(f"{api}/v1/tweets", json={"body": f"live {k} {uuid.uuid4().hex[:6]}"},
                                headers={"Authorization": f"Bearer {author_tokens[author]}"})
            done = time.time()
            if r.status != 201:
                raise BenchError(f"post: {r.status}")
            answered[str((await r.json())["id"])] = (done, author)

        await asyncio.gather(*(post(k) for k in range(total)))
        deadline = time.monotonic() + DELIVERY_WAIT_S
        expected = sum(len(audience[a]) for _, a in answered.values())

        def delivered() -> int:
            return sum(1 for tid, (_, a) in answered.items() for i in audience[a] if tid in clients[i].arrived)

        while delivered() < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        latencies: list[float] = []
        early = 0
        for tid, (done, a) in answered.items():
            for i in audience[a]:
                at = clients[i].arrived.get(tid)
                if at is not None:
                    early += at < done
                    latencies.append(max(0.0, at - done) * 1000)
        rss_after = _rss_kib(pid)
        await asyncio.gather(*(c.close() for c in clients))

    kib_per_stream = (rss_open - rss_before) / plan.streams
    idle_cpu = max(0.0, cpu_with - cpu_without)
    summary = {
        "streams": plan.streams,
        "rate_per_s": plan.rate_per_s,
        "update_latency_ms": stats.p50_p99(latencies, 1) or dict.fromkeys(("p50", "p99")),
        "kib_per_idle_stream": round(kib_per_stream, 1),
        "idle_heartbeat_cpu_percent": round(100 * idle_cpu, 2),
    }
    details = {
        "plan": asdict(plan),
        "deliveries": {"expected": expected, "received": len(latencies), "before_the_201": early},
        "latency_summary_ms": stats.summary(latencies, 1),
        "gateway_rss_kib": {"before": rss_before, "streams_open": rss_open, "after_idle": rss_idle,
                            "after_posting": rss_after},
        "gateway_cpu_per_s": {"idle_without_streams": round(cpu_without, 4), "idle_with_streams": round(cpu_with, 4)},
        "open_seconds": round(open_s, 1),
        "method": (
            f"{plan.streams} accounts each open one home stream (`GET /v1/streaming/home`, read by one asyncio "
            f"client process, aiohttp) on a single gateway process; each follows one of {plan.authors} authors, "
            f"so each post reaches {plan.streams // plan.authors} streams. Authors post in turn at a steady "
            f"{plan.rate_per_s:g} tweets/s (open loop) for {plan.duration_s:.0f} s. Update latency: for every "
            "(post, stream) pair, the wall-clock time the `update` event's blank line arrived at the client "
            "minus the time the post's `201` arrived at the poster (same machine, same clock); events that "
            "arrived before the poster had read its 201 count as 0. Memory per idle stream: the gateway's "
            "RSS (`VmRSS`) with every stream open and settled, minus before any was opened, divided by the "
            "streams. CPU of idle heartbeats: the gateway's CPU seconds per second (utime + stime) over "
            f"{plan.idle_s:.0f} s with every stream open and nothing posted, minus the same window before the "
            "streams were opened; the heartbeat is the default `FANLINE_STREAM_HEARTBEAT_S`."),
    }
    return {"summary": summary, "details": details}


def main() -> None:
    parser = argparse.ArgumentParser(description="the live-streams measurement on its own (a smoke)")
    parser.add_argument("--api", required=True)
    parser.add_argument("--pid", type=int, required=True, help="the gateway process")
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--authors", type=int, default=5)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--idle", type=float, default=16.0)
    args = parser.parse_args()
    plan = StreamPlan(streams=args.streams, authors=args.authors, rate_per_s=args.rate, duration_s=args.duration,
                      idle_s=args.idle)
    result = asyncio.run(measure(args.api, args.pid, plan, uuid.uuid4().hex[:4]))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
