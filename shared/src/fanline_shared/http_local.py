"""In-process calls to a service hosted in the same process: the other
transport under ``http_client.PeerClient`` (the first is ``http_pool``).

A process started with ``FANLINE_HOSTED_SERVICES`` (``colocation.py``) runs
the gateway and the storage services it names on one event loop, each
still listening on its own port for the other processes (the fan-out
worker, tools). A ``PeerClient`` in that process whose peer is hosted here
hands the request to the peer's ASGI app directly: the same request line,
headers and JSON body, through the peer's own middlewares (internal
credential, admission control, metrics) and routes, and the same answer —
without the socket, the HTTP framing on both sides, and the wake-up of a
second process (issue 31: a request of the standard mix passed 2.56 HTTP
servers; at a low rate each hop's wake-up costs more than its work,
docs/benchmark-methods.md, "What the same code costs at a low rate").

What the peer sees is what uvicorn would have given it: an ``http`` scope
with the caller's headers, ``client`` 127.0.0.1, ``server`` the peer's
address, and the lifespan state uvicorn keeps for it. Each call runs in a
task of its own, so context variables the peer sets (its request id, its
log fields) never leak into the caller's, and the caller's timeout cancels
it as a dropped connection would. An exception the peer's app lets escape
becomes a 500, as uvicorn answers it.

A storage service (``storage_service.storage_app``) also offers its
in-process callers a shorter way in (``InProcess``): the steps of its
middleware chain done as plain calls — the internal credential checked, its
admission gate entered (background work exempt, as over a socket), the route
matched in the app's own routes — and the route's endpoint called with a
``Request``, its ``Response`` read as it is, without the ASGI messages of
the chain's six layers (request id, admission, credential, Starlette's
error and exception layers, the router) nor the ``send`` of the body. The
request id needs no binding: the task runs in a copy of the caller's
context, which holds the id the chain would bind (one is bound when the
caller has none). Anything the short way does not serve — a credential
refused, a path or method no route serves, a streamed answer — goes through
the whole app as before, so those answers are the chain's own (issue 31:
the chain was a fifth of a warm call's CPU, ``python -m bench.local_call``;
what that does to the whole system's cost was below what ``paired_cost``
resolves, docs/benchmarks.md).

Shorter still, a hosted service may offer an operation as a plain call
(``InProcess.calls``, a ``Direct``): its function is handed the request's
parameters as the route would read them and returns the route's answer as
its caller decodes it, with no request, response or JSON between them.
``LocalPeer.direct`` runs it through the same admission gate, the same
timeout (``PeerUnreachable``), and the route's metrics; its domain errors
are the route's (the caller rebuilds them as from the status). It runs in
the caller's task, so it must not set context variables. The tweet-store's
timeline pages are one (issue 31: the home read is half of the standard mix;
its JSON was encoded by the store, decoded and encoded again by the gateway).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Match, Route
from structlog.contextvars import bound_contextvars

from .errors import OVERLOADED_HEADER, DomainError, from_status, peer_overloaded, status_of
from .http_pool import Answer, PeerUnreachable
from .http_routes import RouteMetrics
from .internal_auth import presents, protected
from .logs import REQUEST_ID_HEADER, new_request_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hosted:
    """A service hosted in this process: its ASGI app (after its lifespan
    started), its address and the lifespan state uvicorn gives its requests."""

    app: Any
    server: tuple[str, int]
    state: Callable[[], Mapping[str, Any]]


class Admitting(Protocol):
    """What ``InProcess`` needs of ``admission.Admission`` (not imported:
    admission imports the peer client, which imports this module)."""

    async def around(
        self, scope: dict[str, Any], call: Callable[[], Awaitable[Answer]], refused: Callable[[Response], Awaitable[Answer]]
    ) -> Answer: ...


@dataclass(frozen=True)
class Direct:
    """An operation offered as a plain call (the module docstring): ``fn``
    answers what the route ``method template`` of ``service`` answers."""

    service: str
    method: str
    template: str
    fn: Callable[..., Awaitable[Any]]
    observed: RouteMetrics = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "observed", RouteMetrics(self.service, self.template))


@dataclass(frozen=True)
class InProcess:
    """A hosted service's short way in for callers in its process (the
    module docstring), set on its app as ``app.state.in_process``: the
    ``routes`` its router serves, its ``admission`` (None: none), its
    service credential ``token`` (None: every internal call refused) and the
    operations it offers as plain ``calls``."""

    routes: Sequence[BaseRoute]
    admission: Admitting | None
    token: bytes | None
    calls: Mapping[str, Direct] = field(default_factory=dict)

    def route(self, scope: dict[str, Any]) -> tuple[Route, Mapping[str, Any]] | None:
        """The route that serves this request and its part of the scope, as
        Starlette's router finds it (the first full match), or None."""
        for candidate in self.routes:
            match, child = candidate.matches(scope)
            if match is Match.FULL:
                return (candidate, child) if isinstance(candidate, Route) else None
        return None


_HOSTED: dict[str, Hosted] = {}  # service name -> where it is served in this process


def host(service: str, hosted: Hosted) -> None:
    """Route this process's calls to ``service`` to ``hosted`` (``colocation``)."""
    _HOSTED[service] = hosted


def unhost(service: str) -> None:
    _HOSTED.pop(service, None)


def hosted(service: str) -> Hosted | None:
    """The in-process ``service``, if this process hosts it."""
    return _HOSTED.get(service)


class LocalPeer:
    """Requests to a hosted service's ASGI app, answered as ``http_pool``'s."""

    def __init__(self, target: Hosted) -> None:
        self._target = target
        found = getattr(getattr(target.app, "state", None), "in_process", None)
        self._short: InProcess | None = found if isinstance(found, InProcess) else None

    async def request(
        self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes | None, timeout_s: float
    ) -> Answer:
        path, _, query = target.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": unquote(path),
            "raw_path": path.encode("latin-1"),
            "query_string": query.encode("latin-1"),
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 0),
            "server": self._target.server,
            "state": dict(self._target.state()),
        }
        exchange = _Exchange(body or b"")
        run = self._run if self._short is None else self._run_short
        task = asyncio.create_task(run(scope, exchange))
        try:
            async with asyncio.timeout(timeout_s):
                return await task
        except TimeoutError:
            raise PeerUnreachable(f"no answer within {timeout_s:g} s") from None
        finally:
            if not task.done():
                task.cancel()

    def offers(self, name: str) -> bool:
        """Whether the hosted service offers ``name`` as a plain call."""
        return self._short is not None and name in self._short.calls

    async def direct(self, name: str, path: str, timeout_s: float, *args: Any) -> Any:
        """The plain call ``name`` (``offers``) for a request to ``path``: its
        answer, or the route's domain error; ``Overloaded`` when the gate
        sheds it, ``PeerUnreachable`` past ``timeout_s``."""
        assert self._short is not None
        short, call = self._short, self._short.calls[name]
        scope = {"type": "http", "method": call.method, "path": path, "headers": [], "app": self._target.app}
        started, status, shed = time.perf_counter(), 200, False

        async def refused(response: Response) -> Any:
            nonlocal shed
            shed = True  # counted by the gate, as over HTTP
            raise peer_overloaded(call.service, response.headers.get("retry-after", ""))

        timer = asyncio.timeout(timeout_s)  # the wait for a slot included, as over HTTP
        try:
            try:
                async with timer:
                    if short.admission is None:
                        return await call.fn(*args)
                    return await short.admission.around(scope, lambda: call.fn(*args), refused)
            except TimeoutError:
                if not timer.expired():
                    raise  # the function's own: a failure of the route, below
                raise PeerUnreachable(f"no answer within {timeout_s:g} s") from None
        except PeerUnreachable:
            status = 0  # cancelled, as a route whose caller hung up: no answer counted
            raise
        except DomainError as exc:
            if shed:
                status = 0
                raise
            # As the route answers it and the caller rebuilds it from the answer.
            status = status_of(exc)
            if OVERLOADED_HEADER in (getattr(exc, "headers", None) or {}):
                raise peer_overloaded(call.service, str(getattr(exc, "retry_after", ""))) from None
            raise from_status(status, exc.code, exc.message) from None
        except Exception:
            log.exception("hosted service %s failed on %s %s", call.service, call.method, path)
            status = 500
            raise from_status(500, "internal", "internal error") from None
        finally:
            if status:
                call.observed.record(call.method, status, time.perf_counter() - started)

    async def _run(self, scope: dict[str, Any], exchange: _Exchange) -> Answer:
        try:
            await self._target.app(scope, exchange.receive, exchange.send)
        except Exception:
            # As uvicorn: logged; the answer sent stands (Starlette sends its
            # 500 and re-raises), a half-sent one is a broken connection, and
            # none at all is a 500.
            log.exception("hosted service %s failed on %s %s", self._target.server, scope["method"], scope["path"])
            if not exchange.started:
                return Answer(500, {"content-type": "application/json"}, b"")
            if not exchange.complete:
                raise PeerUnreachable("the hosted service failed while answering") from None
        finally:
            exchange.finish()
        if not exchange.complete:
            raise PeerUnreachable("the hosted service returned without a complete answer")
        return Answer(exchange.status, exchange.headers, b"".join(exchange.body))

    async def _run_short(self, scope: dict[str, Any], exchange: _Exchange) -> Answer:
        """The request by the short way (the module docstring), or through the
        whole app where the short way does not serve it."""
        short = self._short
        assert short is not None
        if protected(scope["path"]) and not presents(scope, short.token):
            return await self._run(scope, exchange)  # the chain's own 401, counted there
        found = short.route(scope)
        if found is None:
            return await self._run(scope, exchange)  # a 404 or 405, or a Mount
        route, child = found
        app = self._target.app
        scope["app"] = app
        scope["router"] = app.router
        scope.update(child)
        if not any(name == _REQUEST_ID for name, _ in scope["headers"]):
            with bound_contextvars(request_id=new_request_id()):  # as the chain's RequestIdMiddleware
                return await self._admitted(short, route, scope, exchange)
        return await self._admitted(short, route, scope, exchange)

    async def _admitted(self, short: InProcess, route: Route, scope: dict[str, Any], exchange: _Exchange) -> Answer:
        if short.admission is None:
            return await self._endpoint(route, scope, exchange)

        async def refused(response: Response) -> Answer:
            return _answer_of(response)

        return await short.admission.around(scope, lambda: self._endpoint(route, scope, exchange), refused)

    async def _endpoint(self, route: Route, scope: dict[str, Any], exchange: _Exchange) -> Answer:
        try:
            response = await route.endpoint(Request(scope, exchange.receive))
            if isinstance(response, StreamingResponse) or not hasattr(response, "body"):
                await response(scope, exchange.receive, exchange.send)
                if not exchange.complete:
                    raise PeerUnreachable("the hosted service returned without a complete answer")
                return Answer(exchange.status, exchange.headers, b"".join(exchange.body))
            if response.background is not None:
                await response.background()  # after the answer, as Starlette runs it
        except PeerUnreachable:
            raise
        except Exception:
            # As the chain's ServerErrorMiddleware and uvicorn: logged, a 500.
            log.exception("hosted service %s failed on %s %s", self._target.server, scope["method"], scope["path"])
            return Answer(500, {"content-type": "text/plain; charset=utf-8"}, b"Internal Server Error")
        finally:
            exchange.finish()
        return _answer_of(response)


_REQUEST_ID = REQUEST_ID_HEADER.encode()


def _answer_of(response: Response) -> Answer:
    """A whole ``Response`` as ``http_pool``'s answers are: lower-case
    names, a repeated header keeps its last value."""
    headers = {bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1") for k, v in response.raw_headers}
    return Answer(response.status_code, headers, bytes(response.body))


class _Exchange:
    """One request's ``receive`` and ``send``."""

    def __init__(self, body: bytes) -> None:
        self._request: bytes | None = body
        self._done = asyncio.Event()
        self.started = False
        self.complete = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []

    async def receive(self) -> dict[str, Any]:
        if self._request is not None:
            body, self._request = self._request, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self._done.wait()  # as a connection that stays open until the answer is sent
        return {"type": "http.disconnect"}

    async def send(self, message: Mapping[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.started = True
            self.status = int(message["status"])
            # Lower-case names, a repeated header keeps its last value: as http_pool's answers.
            self.headers = {bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1") for k, v in message.get("headers", ())}
        elif kind == "http.response.body":
            chunk = message.get("body", b"")
            if chunk:
                self.body.append(bytes(chunk))
            if not message.get("more_body", False):
                self.complete = True
                self._done.set()

    def finish(self) -> None:
        self._done.set()
