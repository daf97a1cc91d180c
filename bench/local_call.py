"""What one in-process call to a hosted storage service costs, through its
whole middleware chain and by the short way (``http_local.InProcess``).

A focused measurement beside the scenarios (issue 31): a storage app built
with the kit's own ``guard`` (request id, admission, credential, and the
short way), hosted in this process, one ``route`` handler answering a
20-tweet page (the size of a home read's answer); the services'
``PeerClient`` calls it, as the gateway and the worker call their hosted
stores. No engine, no socket: what differs between the two ways is only
the chain. Rounds alternate the two ways; it prints the CPU of this process
per call (``time.process_time``) and the short way's ratio to the chain's.

``--rate`` paces the calls one at a time at that rate, the process asleep in
between (as the standard mix's calls are), instead of back to back.

    python -m bench.local_call                          # 5,000 calls a round, 4 rounds of each way
    python -m bench.local_call --calls 600 --rate 60 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

PAGE_TWEETS = 20
TOKEN = "bench-local-call-credential"


def store(short: bool) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from fanline_shared.domain import new_timeuuid, timeuuid_rfc3339
    from fanline_shared.http_routes import EXCEPTION_HANDLERS, json_response, route
    from fanline_shared.policies import AdmissionPolicy
    from fanline_shared.storage_service.app import guard

    page = {
        "items": [
            {
                "id": str(t),
                "username": "alice",
                "body": "a tweet of the bench, about as long as a mixed one",
                "created_at": timeuuid_rfc3339(t),
            }
            for t in (new_timeuuid() for _ in range(PAGE_TWEETS))
        ],
        "next": None,
    }

    async def timeline(request: Request) -> Response:
        return json_response({**page, "owner": request.path_params["owner"]})

    routes = [route("bench-store", "/internal/home/{owner}", timeline, ["GET"])]
    app = Starlette(routes=routes, exception_handlers=EXCEPTION_HANDLERS)
    guard(app, "bench-store", AdmissionPolicy(name="bench_local", max_in_flight=64, queue_deadline_s=0.5, max_queue=64), TOKEN)
    if not short:
        del app.state.in_process
    return app


async def round_of(short: bool, calls: int, rate: float | None) -> float:
    """CPU seconds of this process per call, over ``calls`` calls."""
    from fanline_shared import http_local
    from fanline_shared.http_client import PeerClient

    http_local.host("tweet-store", http_local.Hosted(store(short), ("127.0.0.1", 9), dict))
    try:
        # A port nothing listens on: a call that left the process would fail.
        peer = PeerClient("bench", "tweet-store", "http://127.0.0.1:9", 2.0, token=TOKEN)
        for i in range(50):  # warm-up: label children, first-call look-ups
            await peer.call("GET", f"/internal/home/u{i}", operation="home")
        gap = 1.0 / rate if rate else 0.0
        started = time.process_time()
        for i in range(calls):
            await peer.call("GET", f"/internal/home/u{i % 300}", operation="home")
            if gap:
                await asyncio.sleep(gap)
        return (time.process_time() - started) / calls
    finally:
        http_local.unhost("tweet-store")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.local_call", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each way, alternating")
    parser.add_argument("--rate", type=float, default=None, help="calls per second, one at a time (default: back to back)")
    args = parser.parse_args(argv)

    import uvloop

    cost: dict[str, list[float]] = {"chain": [], "short": []}
    for _ in range(args.rounds):
        for way in ("chain", "short"):
            cost[way].append(uvloop.run(round_of(way == "short", args.calls, args.rate)))
    med = {way: statistics.median(v) for way, v in cost.items()}
    print(
        json.dumps(
            {
                "calls_per_round": args.calls,
                "rate": args.rate,
                "us_per_call": {way: [round(x * 1e6, 1) for x in v] for way, v in cost.items()},
                "median_us": {way: round(m * 1e6, 1) for way, m in med.items()},
                "short_over_chain": round(med["short"] / med["chain"], 3),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
