"""One HTTP hop with nothing behind it: the floor of what a call between two
Fanline processes costs in CPU (``hop_floor``, docs/benchmark-methods.md).

    python -m bench.hop server starlette PORT   # uvicorn + Starlette, the services' settings
    python -m bench.hop server raw PORT         # a bare uvloop protocol: the floor of any Python HTTP server
    python -m bench.hop client PORT RATE COUNT  # the services' PeerClient, open loop; prints JSON

Each answers ``GET /hop`` with the same small JSON body, so what is measured is
framing, routing and the event loop, not any handler's work.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

BODY = b'{"items":[],"next":null}'
RAW_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(BODY), BODY)


def starlette_app() -> Any:
    """One route, no middleware: what uvicorn and Starlette cost on their own."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def hop(request: Request) -> Response:
        return Response(BODY, media_type="application/json")

    return Starlette(routes=[Route("/hop", hop)])


class RawHop(asyncio.Protocol):
    """HTTP/1.1 keep-alive: a canned answer per request head (no parser).

    By default GET only with the fixed ``RAW_ANSWER`` (the hop floor's
    server). ``answer`` picks the answer from the request head instead, and
    ``bodies`` skips each request's ``Content-Length`` bytes
    (``bench.gateway_cost``'s peer)."""

    def __init__(self, answer: Callable[[bytes], bytes] | None = None, *, bodies: bool = False) -> None:
        self.answer = answer
        self.bodies = bodies

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head, rest = self.buffer[:end], self.buffer[end + 4 :]
            length = _content_length(head) if self.bodies else 0
            if len(rest) < length:
                return  # the rest of the body is still on its way
            self.buffer = rest[length:]
            self.transport.write(RAW_ANSWER if self.answer is None else self.answer(head))


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def serve(kind: str, port: int) -> None:
    import uvloop

    if kind == "starlette":
        import uvicorn

        from fanline_shared.http_server import UVICORN_SETTINGS, Server

        # The services' own server and settings (fanline_shared.http_server.serve), less the
        # lifespan and the metrics port.
        Server(uvicorn.Config(starlette_app(), host="127.0.0.1", port=port, lifespan="off", **UVICORN_SETTINGS)).run()
        return
    if kind != "raw":
        raise SystemExit(f"unknown server {kind!r}")

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(RawHop, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


async def load(port: int, rate: float, count: int) -> dict[str, float]:
    """``count`` calls of the services' own client at ``rate``/s, each from its
    scheduled start: this process's CPU (user + system) over them, and the p50."""
    from fanline_shared.http_client import PeerClient

    client = PeerClient("bench", "hop", f"http://127.0.0.1:{port}", 5.0)
    await client.call("GET", "/hop", operation="hop", policy=None)  # the connection, opened once
    latencies: list[float] = []

    async def one(at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        started = time.perf_counter()
        await client.call("GET", "/hop", operation="hop", policy=None)
        latencies.append((time.perf_counter() - started) * 1000)

    cpu0, t0 = time.process_time(), time.monotonic()
    await asyncio.gather(*(one(t0 + i / rate) for i in range(count)))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
    await client.close()
    latencies.sort()
    return {"requests": count, "cpu_s": cpu, "wall_s": wall, "p50_ms": latencies[len(latencies) // 2]}


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "server":
        serve(argv[1], int(argv[2]))
        return 0
    if len(argv) == 4 and argv[0] == "client":
        import uvloop

        print(json.dumps(uvloop.run(load(int(argv[1]), float(argv[2]), int(argv[3])))))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
