"""Running a service: logging set-up and uvicorn with uvloop, on two ports:
the service's own (its API and probes) and its metrics port (``/metrics``
only, ``MetricsPort``)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

from . import logs, stalls
from .config import Env, HttpSettings, LogSettings
from .http_coalesce import CoalescingHttpToolsProtocol
from .http_routes import error_body, json_response, metrics_response

log = logging.getLogger(__name__)


def configure_logging(service: str) -> None:
    """Structured logs for ``service`` per ``FANLINE_LOG_LEVEL`` and
    ``FANLINE_LOG_FORMAT`` (``logs.py``)."""
    settings = LogSettings.from_env(Env(os.environ))
    logs.configure_logging(service, settings.format, settings.level)


def tune_gc_after_startup() -> None:
    """Freeze everything start-up created (``gc.freeze``): the driver's
    metadata, prepared statements and modules — ~70k objects, 25 ms per full
    collection on the bench machine — are never scanned again.

    Measured in the bench's post-latency phase with GC callbacks: tweet-store
    ran 121 full collections of 60-140 ms in under three minutes, each a stall
    of every request in flight; frozen, they took a median 14 ms. (Raising
    the young-generation threshold to 10,000 was tried too: more total GC time,
    so the thresholds stay Python's.) Most of that garbage was the driver's
    per-request reference cycles, which ``cassandra.callbacks._release`` now breaks."""
    gc.collect()
    gc.freeze()


def after_startup() -> None:
    """What every service process does once started, on its running loop:
    the GC freeze (``tune_gc_after_startup``) and the loop's stall watch
    (``stalls.watch``)."""
    tune_gc_after_startup()
    stalls.watch()


class AfterStartup:
    """ASGI wrapper: runs ``hook`` once the app's lifespan start-up completed
    (clients connected, statements prepared), before the first request."""

    def __init__(self, app: Any, hook: Callable[[], None]) -> None:
        self._app = app
        self._hook = hook

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self._app(scope, receive, send)
            return

        async def send_after(message: Any) -> None:
            if message.get("type") == "lifespan.startup.complete":
                self._hook()
            await send(message)

        await self._app(scope, receive, send_after)


class MetricsPort:
    """ASGI wrapper: a request that came in on the metrics port gets
    ``/metrics`` (and nothing else); every other request goes to the app,
    which serves no ``/metrics`` (so the API port, the one a proxy or an
    Ingress exposes, never shows them)."""

    def __init__(self, app: Any, port: int) -> None:
        self.app = app
        self.port = port

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (scope.get("server") or ("", None))[1] == self.port:
            if scope["path"] == "/metrics" and scope["method"] in ("GET", "HEAD"):
                response = metrics_response()
            else:
                response = json_response(error_body("not_found", "the metrics port serves /metrics only"), 404)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (as uvicorn binds its own)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        log.error("cannot listen on %s:%d: %s", host, port, exc)
        sys.exit(1)
    sock.set_inheritable(True)
    return sock


# How every service's HTTP server handles a request (``serve``); the benchmark's
# hop floor (bench/hop.py) serves with these too, so it measures the same server.
UVICORN_SETTINGS: dict[str, Any] = {
    "loop": "uvloop",
    # httptools (C) parses requests for a fraction of h11's (pure Python) CPU;
    # its protocol here sends an answer's head and body in one write
    # (http_coalesce.py).
    "http": CoalescingHttpToolsProtocol,
    "access_log": False,
    # The client address is the socket's: X-Forwarded-For is honoured only by
    # the gateway, only from FANLINE_TRUSTED_PROXIES (uvicorn would otherwise
    # trust it from any loopback caller).
    "proxy_headers": False,
    "log_level": "warning",
    # Longer than any client's idle keep-alive (peers: 15 s), so the client
    # always closes an idle connection first; equal timeouts race and a
    # request sent on a connection the server is closing fails.
    "timeout_keep_alive": 75,
}


class Server(uvicorn.Server):
    """uvicorn's server, awake once a second when idle instead of ten times.

    uvicorn's main loop sleeps 0.1 s between ticks, only to notice a
    shutdown request and to refresh the ``Date`` header once a second. Each
    of those wake-ups of an otherwise idle process costs a system call and a
    trip through the loop with cold caches: an idle uvicorn measured 0.27 %
    of a core with the 0.1 s tick and 0.05 % with a 1 s one (issue 31;
    docs/benchmark-methods.md, "uvicorn's tick"), beside the benchmark's
    load. Here the loop waits for a second *or* a signal: SIGTERM/SIGINT wake
    it at once, so a shutdown starts as soon as before; ``Date`` is refreshed
    on every tick, once a second, as before."""

    TICK_S = 1.0

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._tick_loop: asyncio.AbstractEventLoop | None = None
        self._woken: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._tick_loop, self._woken = asyncio.get_running_loop(), asyncio.Event()
        # on_tick(0): uvicorn refreshes the default headers on counters that are multiples of 10.
        while not await self.on_tick(0):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), self.TICK_S)
            self._woken.clear()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self.wake()

    def wake(self) -> None:
        """End the current tick now (safe from a signal handler or a thread)."""
        if self._tick_loop is not None and self._woken is not None and not self._tick_loop.is_closed():
            self._tick_loop.call_soon_threadsafe(self._woken.set)


def server_config(app: Any, http: HttpSettings, *, last: bool = True) -> tuple[uvicorn.Config, list[socket.socket]]:
    """uvicorn's config for ``app`` and its two bound sockets (``http.port``,
    ``http.metrics_port``); ``last``: the process's last service to start,
    after whose start-up the GC freezes what start-up made."""
    sockets = [bind(http.host, http.port), bind(http.host, http.metrics_port)]
    wrapped: Any = MetricsPort(app, sockets[1].getsockname()[1])
    if last:
        wrapped = AfterStartup(wrapped, after_startup)
    config = uvicorn.Config(
        wrapped, host=http.host, port=http.port, timeout_graceful_shutdown=10, lifespan="on", **UVICORN_SETTINGS
    )
    return config, sockets


def serve(app: Any, http: HttpSettings, service: str) -> None:
    """Serve ``app`` on ``http.port`` and ``/metrics`` on ``http.metrics_port``
    until SIGINT/SIGTERM; uvicorn runs the lifespan."""
    configure_logging(service)
    config, sockets = server_config(app, http)
    server = Server(config)
    server.run(sockets=sockets)
    if not server.started:
        sys.exit(3)  # uvicorn's own exit status for a failed start-up
