"""Running a service: logging set-up and uvicorn with uvloop."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import Any

import uvicorn

from . import logs
from .config import Env, HttpSettings, LogSettings


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


class _AfterStartup:
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


def serve(app: Any, http: HttpSettings, service: str) -> None:
    """Serve ``app`` until SIGINT/SIGTERM; uvicorn runs the lifespan."""
    configure_logging(service)
    uvicorn.run(
        _AfterStartup(app, tune_gc_after_startup),
        host=http.host,
        port=http.port,
        loop="uvloop",
        # httptools (C) parses requests for a fraction of h11's (pure Python) CPU.
        http="httptools",
        access_log=False,
        # The client address is the socket's: X-Forwarded-For is honoured
        # only by the gateway, only from FANLINE_TRUSTED_PROXIES (uvicorn
        # would otherwise trust it from any loopback caller).
        proxy_headers=False,
        log_level="warning",
        timeout_graceful_shutdown=10,
        # Longer than any client's idle keep-alive (peers: 15 s), so the client
        # always closes an idle connection first; equal timeouts race and a
        # request sent on a connection the server is closing fails.
        timeout_keep_alive=75,
        lifespan="on",
    )
