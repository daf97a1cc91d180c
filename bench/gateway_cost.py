"""What the gateway's own Python costs per request, with nothing else running.

A focused measurement beside the scenarios (issue 31): the gateway's ASGI
app (every middleware, the route, the handler, its client's side of the hop)
driven in this process without uvicorn, against a canned peer in a process of
its own that answers every internal call at once (a 20-tweet page, a live
session). No engine is needed: the session cache is told its revocation tap
is connected, so a signed-in read makes one peer call, as in a running
system. What it prints is CPU per request of this process only, back to back
(warm caches): the floor under the gateway's share of ``mixed``, where each
request also wakes a sleeping process and passes uvicorn.

``--rate`` sends the same requests one at a time at that rate instead, the
process asleep in between, as at the standard mix's 60/s: the difference to
back to back is what the same code costs more when each request starts on a
loop that has to be woken, with caches that other processes have cooled.

    python -m bench.gateway_cost                 # 3,000 requests per route, 3 rounds
    python -m bench.gateway_cost --requests 20000 --rounds 1
    python -m bench.gateway_cost --requests 600 --rate 30
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from deploy.local.system import free_port

from .system import wait_ready

PAGE_TWEETS = 20
TOKEN = "alice.bench-gateway-cost-token-0123456789"


def _answers() -> dict[bytes, bytes]:
    """Path prefix -> the whole HTTP answer the canned peer sends."""
    from fanline_shared.domain import new_timeuuid, timeuuid_rfc3339

    items = []
    for i in range(PAGE_TWEETS):
        t = new_timeuuid()
        body = "a tweet of the bench, about as long as the mixed scenario's"
        items.append({"id": str(t), "username": f"author{i}", "body": body, "created_at": timeuuid_rfc3339(t), "sid": str(i + 1)})
    page = {"items": items, "next": items[-1]["id"], "next_sid": str(PAGE_TWEETS)}
    session: dict[str, Any] = {"username": "alice", "kind": "user", "scopes": "read write follow", "client_id": None}
    session |= {"returned_at": None, "expires_at": None, "cache_s": 3600}

    def answer(body: Any) -> bytes:
        raw = orjson.dumps(body)
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw)

    return {
        b"/internal/home/": answer(page),
        b"/internal/userline/": answer(page),
        b"/internal/sessions/current": answer(session),
        b"": answer({"events": []}),  # anything else (the relay's sweeps)
    }


def serve_peer(port: int) -> None:
    """The canned peer: keep-alive HTTP/1.1, an answer per request by path prefix."""
    import uvloop

    from .hop import RawHop

    answers = _answers()

    def answer(head: bytes) -> bytes:
        path = head.split(b" ", 2)[1]
        return next(a for prefix, a in answers.items() if path.startswith(prefix))

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(lambda: RawHop(answer, bodies=True), "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


async def measure(requests: int, rounds: int, peer_port: int, rate: float = 0.0) -> None:
    from fanline_api.app import create_app
    from fanline_api.config import Settings
    from fanline_shared import logs

    logs.configure_logging("api", "json", "WARNING")
    env = {
        **os.environ,
        "FANLINE_INTERNAL_TOKEN": "bench-gateway-cost-internal-token",
        "FANLINE_SOCIAL_GRAPH_URL": f"http://127.0.0.1:{peer_port}",
        "FANLINE_TWEET_STORE_URL": f"http://127.0.0.1:{peer_port}",
        "FANLINE_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port('127.0.0.1')}",  # nothing there: no event is produced
        "FANLINE_LOG_LEVEL": "WARNING",
        "FANLINE_CURSOR_SECRET": "bench-gateway-cost-cursor-secret",
        # The limits stay on (their cost is measured), far above the load, as in make bench.
        "FANLINE_RATE_LIMIT_PER_USER": "1000000000 per minute",
        "FANLINE_RATE_LIMIT_PER_ADDRESS": "1000000000 per minute",
    }
    app = create_app(Settings.from_env(env))
    started: list[Any] = []

    async def life_receive() -> dict[str, str]:
        if not started:
            return {"type": "lifespan.startup"}
        await asyncio.Event().wait()
        raise AssertionError

    async def life_send(message: Any) -> None:
        started.append(message)

    lifespan = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, life_receive, life_send))
    while not started:
        await asyncio.sleep(0.01)
    if started[0]["type"] != "lifespan.startup.complete":
        raise SystemExit(f"the gateway did not start: {started[0]}")
    sessions = app.state.gateway.sessions
    sessions.connected()  # as if the revocation tap read the topic
    # and stays so: the tap's retries against the absent broker would turn the
    # cache off within seconds, and every read then verified its token with a
    # second peer call (until 2026-12-07, a sixth of the home read's figure).
    sessions.disconnected = lambda: None

    def request(path: str) -> Callable[[], Awaitable[None]]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"fanline"), (b"authorization", f"Bearer {TOKEN}".encode()), (b"user-agent", b"bench")],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000),
        }
        sent: list[Any] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Any) -> None:
            sent.append(message)

        async def once() -> None:
            sent.clear()
            await app(dict(scope, state={}), receive, send)
            if sent[0]["status"] != 200:
                raise SystemExit(f"{path}: {sent[0]['status']} {sent[-1].get('body', b'')[:200]!r}")

        return once

    routes = {"GET /v1/timeline": request("/v1/timeline"), "GET /v1/users/{username}/tweets": request("/v1/users/bob/tweets")}
    pace = f"one at a time at {rate:g}/s" if rate > 0 else "back to back"
    print(f"the gateway's CPU per request in this process ({requests:,} {pace} per route, {PAGE_TWEETS} tweets a page)")
    # The app's background tasks (the relay's sweeps, the tap's reconnects to the absent broker)
    # cost CPU per second, not per request: measured alone first, subtracted from paced rounds.
    background = 0.0  # cores
    if rate > 0:
        cpu, began = time.process_time(), time.monotonic()
        await asyncio.sleep(10.0)
        background = (time.process_time() - cpu) / (time.monotonic() - began)
        print(f"  background, no requests: {background * 100:.2f} % of a core (subtracted below)")
    for round_no in range(1, rounds + 1):
        for name, once in routes.items():
            for _ in range(min(500, requests)):
                await once()  # warm-up: connections, caches
            cpu, began = time.process_time(), time.monotonic()
            for k in range(requests):
                if rate > 0 and (delay := began + k / rate - time.monotonic()) > 0:
                    await asyncio.sleep(delay)
                await once()
            used = time.process_time() - cpu - background * (time.monotonic() - began)
            print(f"  round {round_no}: {name:32s} {used / requests * 1e6:5.0f} µs")
    lifespan.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_cost", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=0.0, help="requests per second, one at a time (0: back to back)")
    parser.add_argument("--serve-peer", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_peer:
        serve_peer(args.serve_peer)
        return
    import uvloop

    port = free_port("127.0.0.1")
    peer = subprocess.Popen([sys.executable, "-m", "bench.gateway_cost", "--serve-peer", str(port)])
    try:
        wait_ready(f"http://127.0.0.1:{port}/", peer, 20, "the canned peer")  # it answers any path
        uvloop.run(measure(args.requests, args.rounds, port, args.rate))
    finally:
        peer.terminate()
        peer.wait()
    os._exit(0)  # the gateway's background tasks (relay, tap) have nothing left to do


if __name__ == "__main__":
    main()
