"""Several services in one process (``fanline_shared.colocation.serve_together``),
run as a real child process with real sockets: the hosted services start
first and stop last, SIGTERM stops them all in that order, and a hosted
service that cannot start stops the ones started and exits 3."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx

CHILD = textwrap.dedent(
    """
    import sys
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from fanline_shared.clients.tweet_store import TweetStoreClient
    from fanline_shared.colocation import Part, serve_together
    from fanline_shared.config import HttpSettings

    ports = [int(p) for p in sys.argv[1].split(",")]
    failing = sys.argv[2]

    def app(name, handler=None):
        @asynccontextmanager
        async def lifespan(_):
            if name == failing:
                raise RuntimeError(name + " cannot start")
            print("start", name, flush=True)
            yield
            print("stop", name, flush=True)

        async def hello(_):
            return JSONResponse({"service": name})

        return Starlette(routes=[Route("/hello", handler or hello)], lifespan=lifespan)

    async def through(_):
        # the gateway's call to the hosted tweet-store: in the process
        peer = TweetStoreClient("api", f"http://127.0.0.1:{ports[2]}", 2.0)
        return JSONResponse({"via": await peer.call("GET", "/hello", operation="hello")})

    names = ["social-graph", "tweet-store", "api"]
    parts = [Part(n, app(n, through if n == "api" else None), HttpSettings("127.0.0.1", p, 0)) for n, p in zip(names, ports)]
    serve_together(parts[2], parts[:2])
    """
)


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start(tmp_path: Path, ports: list[int], failing: str = "") -> subprocess.Popen[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    argv = [sys.executable, str(script), ",".join(map(str, ports)), failing]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_all_start_in_order_answer_and_stop_in_reverse_on_sigterm(tmp_path: Path) -> None:
    sg, ts, api = ports = free_ports(3)
    proc = start(tmp_path, ports)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                got = httpx.get(f"http://127.0.0.1:{api}/hello", timeout=1).json()
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.1)
        assert got == {"via": {"service": "tweet-store"}}
        # each hosted service still answers on its own port
        assert httpx.get(f"http://127.0.0.1:{sg}/hello", timeout=2).json() == {"service": "social-graph"}
        assert httpx.get(f"http://127.0.0.1:{ts}/hello", timeout=2).json() == {"service": "tweet-store"}
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    order = [line for line in out.splitlines() if line.startswith(("start ", "stop "))]
    assert order == [
        "start social-graph",
        "start tweet-store",
        "start api",
        "stop api",
        "stop tweet-store",
        "stop social-graph",
    ], out
    assert proc.returncode == 0, out


def test_a_hosted_service_that_cannot_start_stops_the_process(tmp_path: Path) -> None:
    proc = start(tmp_path, free_ports(3), failing="tweet-store")
    out, _ = proc.communicate(timeout=60)
    order = [line for line in out.splitlines() if line.startswith(("start ", "stop "))]
    assert order == ["start social-graph", "stop social-graph"], out  # the gateway never started
    assert proc.returncode == 3, out
