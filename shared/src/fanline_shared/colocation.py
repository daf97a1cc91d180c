"""Several services in one process: the gateway with the storage services it
hosts (``FANLINE_HOSTED_SERVICES``; docs/operations/scale.md, "One process
or one per service").

Each service keeps everything it has as a process of its own: its settings,
its composition root and lifespan (its storage, its outbox relay), its port
and metrics port, its middlewares and routes; the fan-out worker and any
tool reach it at the same address. What changes is the gateway's calls to
it: ``http_client.PeerClient`` finds it in ``http_local``'s registry and
calls its ASGI app in this process, not over a socket. The trade, measured
in issue 31: one process per machine costs less CPU per request (no framing
on either side, one process to wake instead of two or three per request);
the services then share one event loop and one core, and scale, restart and
fail together. Where they must scale apart, run them as processes of their
own (the default).

Start-up is in order — the hosted services first, each ready (its lifespan
done) before the next, the gateway last — and shutdown the reverse, on
SIGTERM or SIGINT: the gateway drains its requests while the services it
calls still answer. A service that fails to start stops the ones started,
and the process exits with 3 (uvicorn's own status for a failed start-up).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import uvicorn
import uvloop

from . import http_local
from .config import HttpSettings
from .http_server import UVICORN_SETTINGS, AfterStartup, MetricsPort, Server, bind, configure_logging, tune_gc_after_startup

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Part:
    """One service of the process: its name, its ASGI app, where it listens."""

    name: str
    app: Any
    http: HttpSettings


class _PartServer(Server):
    """A ``Server`` that leaves the signals to ``serve_together`` (uvicorn's
    own handlers would stop only the server installed last)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def serve_together(primary: Part, hosted: list[Part]) -> None:
    """Serve ``hosted`` (in order) and then ``primary`` in this process until
    SIGINT/SIGTERM; calls to a hosted service stay in the process."""
    configure_logging(primary.name)
    parts = [*hosted, primary]
    servers: list[tuple[Part, _PartServer, list[Any]]] = []
    for part in parts:
        sockets = [bind(part.http.host, part.http.port), bind(part.http.host, part.http.metrics_port)]
        app: Any = MetricsPort(part.app, sockets[1].getsockname()[1])
        if part is primary:  # everything is started once the gateway is
            app = AfterStartup(app, tune_gc_after_startup)
        config = uvicorn.Config(
            app, host=part.http.host, port=part.http.port, timeout_graceful_shutdown=10, lifespan="on", **UVICORN_SETTINGS
        )
        servers.append((part, _PartServer(config), sockets))
    if not uvloop.run(_run(servers)):
        sys.exit(3)


async def _run(servers: list[tuple[Part, _PartServer, list[Any]]]) -> bool:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    running: list[tuple[Part, _PartServer, asyncio.Task[None]]] = []
    started = True
    try:
        for part, server, sockets in servers:
            task = asyncio.create_task(server.serve(sockets=sockets))
            while not server.started and not task.done() and not stop.is_set():
                await asyncio.sleep(0.02)
            running.append((part, server, task))
            if not server.started:
                started = stop.is_set()
                if not stop.is_set():
                    log.error("%s did not start: stopping the process", part.name)
                break
            http_local.host(part.name, _hosted(part, server))
        else:
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait([stopped, *(t for _, _, t in running)], return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            # A server that ended on its own (its lifespan failed) is a failure.
            started = not any(t.done() for _, _, t in running) or stop.is_set()
    finally:
        for part, server, task in reversed(running):  # the gateway first, then what it calls
            server.should_exit = True
            server.wake()
            with contextlib.suppress(Exception):
                await task
            http_local.unhost(part.name)
    return started


def _hosted(part: Part, server: _PartServer) -> http_local.Hosted:
    lifespan = server.lifespan
    return http_local.Hosted(
        part.app,
        (part.http.host, part.http.port),
        lambda: getattr(lifespan, "state", {}),
    )
