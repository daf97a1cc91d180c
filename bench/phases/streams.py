"""Live streams (issue 16): many concurrent home streams on one gateway
process while authors post at a steady rate, each post reaching about 100
of the streams. Records ``streams`` (update latency p50/p99 from the post's
``201`` to the event at the client, memory per idle stream, CPU of idle
heartbeats) and ``details.streams``.

The measurement itself (``measure``) needs only a gateway URL and its pid, so
it also runs on its own against any running system (a smoke, not the
benchmark)::

    python -m bench.phases.streams --api http://127.0.0.1:8000 --pid <gateway pid> --streams 50

The streams are held by separate client processes (``bench/stream_reader.py``,
two by default), whose CPU and event-loop lag are reported beside the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from .. import stats
from ..common import BenchError, say
from ..harness import Bench
from ..procs import REPO

PASSWORD = "bench-streams-pw"
DELIVERY_WAIT_S = 10.0


@dataclass(frozen=True)
class StreamPlan:
    streams: int = 1000
    authors: int = 10  # each followed by streams / authors of the stream owners
    rate_per_s: float = 5.0
    duration_s: float = 60.0
    idle_s: float = 30.0  # CPU window, with and without the streams open
    readers: int = 2  # client processes holding the streams
    heartbeat_s: float = 12.0  # the gateway's FANLINE_STREAM_HEARTBEAT_S (the default)


async def run(bench: Bench) -> None:
    p = bench.plan
    plan = StreamPlan(streams=p.streams, rate_per_s=p.stream_rate, duration_s=p.stream_duration_s, idle_s=p.stream_idle_s)
    assert bench.system is not None
    started, load_before = datetime.now(UTC), os.getloadavg()[0]
    result = await measure(bench.api, bench.system.procs["api"].pid, plan, bench.tag)
    bench.doc["streams"] = result["summary"]
    bench.details["streams"] = result["details"]
    only = getattr(bench.args, "only", None)
    bench.details["streams"]["run"] = {
        "started_at": started.strftime("%Y-%m-%d %H:%M UTC"),
        "command": f"python -m bench.run --only {only}" if only else bench.details.get("command"),
        "cores": os.cpu_count(),
        "load_average_1m": {"start": round(load_before, 2), "end": round(os.getloadavg()[0], 2)},
    }


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


class Readers:
    """The stream clients: ``count`` processes of ``bench.stream_reader``, the
    streams split evenly between them (line protocol in that module)."""

    def __init__(self, procs: list[asyncio.subprocess.Process]) -> None:
        self.procs = procs

    @classmethod
    async def open(cls, api: str, tokens: list[str], count: int) -> tuple[Readers, float]:
        """Start the processes and wait until every stream answered 200;
        the readers and the seconds that took."""
        started = time.monotonic()
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.stream_reader",
                cwd=REPO,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=1 << 28,
            )
            for _ in range(count)
        ]
        readers = cls(procs)
        try:
            for k, proc in enumerate(procs):
                readers._send(proc, json.dumps({"api": api, "tokens": tokens[k::count]}))
            for proc in procs:
                opened = await readers._line(proc, wait_s=300)
                if "opened" not in opened:
                    raise BenchError(f"stream reader failed: {opened}")
        except BaseException:
            readers.kill()
            raise
        return readers, time.monotonic() - started

    def _send(self, proc: asyncio.subprocess.Process, line: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line.encode() + b"\n")

    async def _line(self, proc: asyncio.subprocess.Process, wait_s: float = 120) -> dict[str, Any]:
        assert proc.stdout is not None
        raw = await asyncio.wait_for(proc.stdout.readline(), wait_s)
        if not raw:
            raise BenchError(f"stream reader {proc.pid} exited ({await proc.wait()})")
        return dict(json.loads(raw))

    def cpu_s(self) -> float:
        return sum(_cpu_s(p.pid) for p in self.procs)

    async def received(self) -> int:
        for proc in self.procs:
            self._send(proc, "count")
        total = 0
        for proc in self.procs:
            total += int((await self._line(proc))["received"])
        return total

    async def report(self, count: int) -> dict[str, Any]:
        """Every arrival (stream indexes mapped back to the full list), the
        heartbeat comments per stream, streams that ended, loop lag per process."""
        arrivals: list[tuple[int, str, float]] = []
        by_index: dict[int, list[float]] = {}
        ended: list[str] = []
        lags: list[dict[str, Any]] = []
        for k, proc in enumerate(self.procs):
            self._send(proc, "report")
            rep = await self._line(proc, wait_s=300)
            arrivals += [(i * count + k, tid, t) for i, tid, t in rep["arrivals"]]
            for i, times in enumerate(rep["comments"]):
                by_index[i * count + k] = times
            ended += rep["ended"]
            lags.append(rep["loop_lag_ms"])
        comments = [by_index[i] for i in sorted(by_index)]
        for proc in self.procs:
            await proc.wait()
        return {"arrivals": arrivals, "comments": comments, "ended": ended, "loop_lag_ms": lags}

    def kill(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()


async def _cpu_shares(pids: dict[str, list[int]], seconds: float) -> dict[str, float]:
    """CPU seconds per second each group of processes used over ``seconds``."""
    c0 = {k: sum(_cpu_s(p) for p in v) for k, v in pids.items()}
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    dt = time.monotonic() - t0
    return {k: (sum(_cpu_s(p) for p in v) - c0[k]) / dt for k, v in pids.items()}


def _in_window(comments: list[list[float]], t0: float, t1: float) -> int:
    return sum(1 for times in comments for t in times if t0 <= t < t1)


def _max_gap_s(comments: list[list[float]], t0: float, t1: float) -> float | None:
    """The longest wait for a heartbeat on any stream between ``t0`` and ``t1``."""
    gaps = [b - a for times in comments for a, b in itertools.pairwise([t0, *(t for t in times if t0 <= t < t1)])]
    return round(max(gaps), 2) if gaps else None


async def measure(api: str, pid: int, plan: StreamPlan, tag: str, log: Callable[[str], None] = say) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:

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
            r = await http.put(
                f"{api}/v1/users/{owners[i]}/following/{authors[i % plan.authors]}",
                headers={"Authorization": f"Bearer {owner_tokens[i]}"},
            )
            if r.status != 204:
                raise BenchError(f"follow: {r.status}")

        await limited([follow(i) for i in range(plan.streams)])
        audience = {a: [i for i in range(plan.streams) if i % plan.authors == j] for j, a in enumerate(authors)}

        await asyncio.sleep(2)
        rss_before = _rss_kib(pid)
        log(f"streams: gateway idle without streams for {plan.idle_s:.0f}s")
        cpu_without = (await _cpu_shares({"gateway": [pid]}, plan.idle_s))["gateway"]

        log(f"streams: opening {plan.streams} home streams from {plan.readers} client processes")
        readers, open_s = await Readers.open(api, owner_tokens, plan.readers)
        try:
            await asyncio.sleep(3)  # let the gateway settle (following lists read, allocations done)
            rss_open = _rss_kib(pid)
            groups = {"gateway": [pid], "clients": [p.pid for p in readers.procs]}
            log(f"streams: all open in {open_s:.1f}s; idle with streams for {plan.idle_s:.0f}s")
            idle_t0 = time.time()
            cpu_idle = await _cpu_shares(groups, plan.idle_s)
            idle_t1 = time.time()
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
                r = await http.post(
                    f"{api}/v1/tweets",
                    json={"body": f"live {k} {uuid.uuid4().hex[:6]}"},
                    headers={"Authorization": f"Bearer {author_tokens[author]}"},
                )
                done = time.time()
                if r.status != 201:
                    raise BenchError(f"post: {r.status}")
                answered[str((await r.json())["id"])] = (done, author)

            cpu_posting_task = asyncio.create_task(_cpu_shares(groups, plan.duration_s))
            await asyncio.gather(*(post(k) for k in range(total)))
            cpu_posting = await cpu_posting_task
            expected = sum(len(audience[a]) for _, a in answered.values())
            deadline = time.monotonic() + DELIVERY_WAIT_S
            while await readers.received() < expected and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            rss_after = _rss_kib(pid)
            rep = await readers.report(plan.readers)
        finally:
            readers.kill()

    arrived: dict[tuple[int, str], float] = {}
    for i, tid, t in rep["arrivals"]:
        arrived.setdefault((i, tid), t)
    latencies: list[float] = []
    early = 0
    for tid, (done, a) in answered.items():
        for i in audience[a]:
            at = arrived.get((i, tid))
            if at is not None:
                early += at < done
                latencies.append(max(0.0, at - done) * 1000)

    heartbeats = _in_window(rep["comments"], idle_t0, idle_t1)
    idle_cpu = max(0.0, cpu_idle["gateway"] - cpu_without)
    kib_per_stream = (rss_open - rss_before) / plan.streams
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
        "gateway_rss_kib": {"before": rss_before, "streams_open": rss_open, "after_idle": rss_idle, "after_posting": rss_after},
        "gateway_cpu_per_s": {
            "idle_without_streams": round(cpu_without, 4),
            "idle_with_streams": round(cpu_idle["gateway"], 4),
            "posting": round(cpu_posting["gateway"], 4),
        },
        "heartbeats": {
            "received_in_idle_window": heartbeats,
            "expected_in_idle_window": round(plan.streams * (idle_t1 - idle_t0) / plan.heartbeat_s),
            "gateway_cpu_us_per_heartbeat": round(idle_cpu * (idle_t1 - idle_t0) / heartbeats * 1e6, 1) if heartbeats else None,
            "longest_wait_s": _max_gap_s(rep["comments"], idle_t0, idle_t1),
        },
        "clients": {
            "processes": plan.readers,
            "cpu_per_s": {"idle": round(cpu_idle["clients"], 4), "posting": round(cpu_posting["clients"], 4)},
            "loop_lag_ms": rep["loop_lag_ms"],
            "streams_ended_early": len(rep["ended"]),
            "first_errors": rep["ended"][:3],
        },
        "open_seconds": round(open_s, 1),
        "method": (
            f"{plan.streams} accounts each open one home stream (`GET /v1/streaming/home`) on a single gateway "
            f"process, read by {plan.readers} separate client processes (aiohttp, asyncio; `bench/stream_reader.py`) "
            f"so that reading never competes with the poster; each account follows one of {plan.authors} authors, "
            f"so each post reaches {plan.streams // plan.authors} streams. Authors post in turn at a steady "
            f"{plan.rate_per_s:g} tweets/s (open loop) for {plan.duration_s:.0f} s. Update latency: for every "
            "(post, stream) pair, the wall-clock time the `update` event's blank line arrived at the client "
            "minus the time the post's `201` arrived at the poster (same machine, same clock); events that "
            "arrived before the poster had read its 201 count as 0. Memory per idle stream: the gateway's "
            "RSS (`VmRSS`) with every stream open and settled, minus before any was opened, divided by the "
            "streams. CPU of idle heartbeats: the gateway's CPU seconds per second (utime + stime) over "
            f"{plan.idle_s:.0f} s with every stream open and nothing posted, minus the same window before the "
            f"streams were opened, with a heartbeat every {plan.heartbeat_s:g} s (`FANLINE_STREAM_HEARTBEAT_S`, "
            "default 15 s); the clients count the comment lines that arrived in that window, which gives the "
            "gateway's CPU per heartbeat and the longest wait for one. The client processes' own CPU and "
            "event-loop lag are reported to show they were not the bottleneck."
        ),
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
    parser.add_argument("--readers", type=int, default=2, help="client processes")
    parser.add_argument("--heartbeat", type=float, default=12.0, help="the gateway's FANLINE_STREAM_HEARTBEAT_S")
    args = parser.parse_args()
    plan = StreamPlan(
        streams=args.streams,
        authors=args.authors,
        rate_per_s=args.rate,
        duration_s=args.duration,
        idle_s=args.idle,
        readers=args.readers,
        heartbeat_s=args.heartbeat,
    )
    result = asyncio.run(measure(args.api, args.pid, plan, uuid.uuid4().hex[:4]))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
