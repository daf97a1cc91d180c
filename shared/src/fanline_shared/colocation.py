"""Several services in one process: the gateway with the storage services it
hosts (``FANLINE_HOSTED_SERVICES``; docs/operations/scale.md, "One process
or one per service"), or the fan-out worker with the stores it writes
through (``Hosting``: no ports, the role of its fan-out replicas).

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
import importlib
import logging
import signal
import sys
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

import uvloop

from . import http_local, logs
from .config import ConfigError, Env, HttpSettings
from .http_server import Server, configure_logging, server_config

log = logging.getLogger(__name__)

# The storage services a process may host, in start order, and their entry
# points (each names its ``SERVICE``, a ``StorageService``): imported by name,
# so this library depends on no service.
ENTRY_POINTS = {"social-graph": "fanline_social_graph.__main__", "tweet-store": "fanline_tweet_store.__main__"}
HOSTABLE = tuple(ENTRY_POINTS)


def hosted_services(env: Env) -> tuple[str, ...]:
    """FANLINE_HOSTED_SERVICES: a comma-separated subset of ``HOSTABLE`` this
    process runs beside its own service; empty (the default): none, each
    service is a process of its own."""
    names = [n.strip() for n in env.string("FANLINE_HOSTED_SERVICES", "").split(",") if n.strip()]
    unknown = sorted(set(names) - set(HOSTABLE))
    if unknown:
        raise ConfigError(f"FANLINE_HOSTED_SERVICES: {', '.join(unknown)} cannot be hosted (only {', '.join(HOSTABLE)})")
    return tuple(n for n in HOSTABLE if n in names)


@dataclass(frozen=True)
class Part:
    """One service of the process: its name, its ASGI app, where it listens."""

    name: str
    app: Any
    http: HttpSettings


def hosted_part(name: str, environ: Mapping[str, str]) -> Part:
    """``name``'s app as its own process would build it from ``environ``
    (importing its entry point loads cassandra-driver the way it always
    does, ``fanline_shared.driver_sources``); its log lines keep its name."""
    entry = ENTRY_POINTS[name]
    service = importlib.import_module(entry).SERVICE
    logs.name_hosted_package(entry.partition(".")[0], name)
    settings = service.settings.from_env(environ)
    return Part(name, service.create_app(settings), settings.http)


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
        config, sockets = server_config(part.app, part.http, last=part is primary)  # the gateway starts last
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
            task = asyncio.create_task(_serve(server, sockets))
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
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return started


async def _serve(server: _PartServer, sockets: list[Any]) -> None:
    # uvicorn ends a failed start-up with sys.exit(3): here that would end the
    # loop before the services already started were stopped.
    with contextlib.suppress(SystemExit):
        await server.serve(sockets=sockets)


def _hosted(part: Part, server: _PartServer) -> http_local.Hosted:
    lifespan = server.lifespan
    return http_local.Hosted(
        part.app,
        (part.http.host, part.http.port),
        lambda: getattr(lifespan, "state", {}),
    )


class Hosting:
    """Stores hosted in a process that serves no HTTP of its own for them
    (the fan-out worker): their lifespans run in order on the running loop,
    each registered in ``http_local`` once started, and stop in reverse.
    A lifespan that fails raises from ``start``, after the ones started
    were stopped."""

    def __init__(self, parts: list[Part]) -> None:
        self._parts = parts
        self._running: list[tuple[Part, _Lifespan]] = []

    async def start(self) -> None:
        for part in self._parts:
            lifespan = _Lifespan(part.app)
            try:
                await lifespan.startup()
            except BaseException:
                await self.stop()
                raise
            self._running.append((part, lifespan))
            http_local.host(part.name, http_local.Hosted(part.app, (part.http.host, part.http.port), lifespan.current_state))

    async def stop(self) -> None:
        while self._running:
            part, lifespan = self._running.pop()
            http_local.unhost(part.name)
            await lifespan.shutdown()


class _Lifespan:
    """One ASGI app's lifespan protocol, driven as a server drives it."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self.state: dict[str, Any] = {}
        self._to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._from_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def current_state(self) -> dict[str, Any]:
        """What the app's lifespan put in its state (each request gets a copy)."""
        return self.state

    async def _answer(self) -> dict[str, Any]:
        assert self._task is not None
        answer = asyncio.ensure_future(self._from_app.get())
        await asyncio.wait([answer, self._task], return_when=asyncio.FIRST_COMPLETED)
        if answer.done():
            return answer.result()
        answer.cancel()
        self._task.result()  # the app's own exception, if it raised one
        raise RuntimeError("the app's lifespan ended without answering")

    async def startup(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        self._task = asyncio.create_task(self._app(scope, self._to_app.get, self._from_app.put))
        await self._to_app.put({"type": "lifespan.startup"})
        answer = await self._answer()
        if answer["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"start-up failed: {answer.get('message', answer['type'])}")

    async def shutdown(self) -> None:
        if self._task is None or self._task.done():
            return
        await self._to_app.put({"type": "lifespan.shutdown"})
        with contextlib.suppress(Exception):
            await self._answer()
            await self._task
