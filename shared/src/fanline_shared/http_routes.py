"""The HTTP edge shared by every service: routes with metrics, the error body,
JSON in and out, and the operations endpoints (/healthz, /readyz; /metrics is
served on a port of its own, ``http_server.MetricsPort``).

Domain errors become status codes here and only here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match, Route

from . import metrics
from .errors import BadRequest, DomainError, PayloadTooLarge, status_of

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
CLIENT_CLOSED_REQUEST = 499
Handler = Callable[[Request], Awaitable[Response]]
ReadinessCheck = Callable[[], Awaitable[None]]


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, headers=headers, media_type="application/json")


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def error_response(error: DomainError) -> Response:
    status = status_of(error)
    headers = dict(getattr(error, "headers", None) or {})
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return json_response(error_body(error.code, error.message), status, headers)


class RouteMetrics:
    """The HTTP metrics of one route of ``service`` (``template``: its path
    template), with their label children resolved once per method and status
    (``labels()`` validates and locks on every call). Recorded by ``route``'s
    handlers and by the plain calls that stand for them (``http_local.Direct``)."""

    def __init__(self, service: str, template: str) -> None:
        self._service, self._template = service, template
        self._latency: dict[str, Any] = {}
        self._counts: dict[tuple[str, int], Any] = {}

    def record(self, method: str, status: int, elapsed: float) -> None:
        observer = self._latency.get(method)
        if observer is None:
            observer = self._latency[method] = metrics.HTTP_LATENCY.labels(self._service, method, self._template)
        observer.observe(elapsed)
        counter = self._counts.get((method, status))
        if counter is None:
            counter = self._counts[method, status] = metrics.HTTP_REQUESTS.labels(
                self._service, method, self._template, str(status)
            )
        counter.inc()


def route(service: str, path: str, handler: Handler, methods: list[str], name: str | None = None) -> Route:
    """A Starlette route whose handler is timed, counted and error-mapped.

    Metrics are labelled by the path *template* so cardinality stays bounded;
    their label children are resolved once per method (and status), not per
    request (``labels()`` validates and locks on every call).
    """
    observed = RouteMetrics(service, path)

    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        try:
            response = await handler(request)
        except DomainError as exc:
            response = error_response(exc)
        except ClientDisconnect:
            # The client went away mid-body: not our error, nothing to answer.
            # Counted as 499 (nginx's "client closed request"), never a 500.
            log.info("client disconnected during %s %s", request.method, path)
            response = Response(status_code=CLIENT_CLOSED_REQUEST)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, path)
            response = json_response(error_body("internal", "internal error"), 500)
        observed.record(request.method, response.status_code, time.perf_counter() - started)
        return response

    return Route(path, endpoint, methods=methods, name=name)


async def read_body(request: Request, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """The request body, or ``PayloadTooLarge`` past ``max_bytes`` (streamed, so
    a lying or missing Content-Length cannot make us buffer more)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > max_bytes:
                raise PayloadTooLarge(f"request body over {max_bytes // 1024} KiB", code="payload_too_large")
        except ValueError:
            raise BadRequest("invalid Content-Length", code="invalid_json") from None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"request body over {max_bytes // 1024} KiB", code="payload_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_object(request: Request, max_bytes: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The body parsed as a JSON object, or ``invalid_json`` (400)."""
    raw = await read_body(request, max_bytes)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadRequest("body is not valid JSON", code="invalid_json") from None
    if not isinstance(value, dict):
        raise BadRequest("body must be a JSON object", code="invalid_json")
    return value


class Degraded(Exception):
    """Raised by a readiness check whose dependency is unavailable but not
    needed to serve: ``/readyz`` stays ``200`` and reports it under
    ``degraded`` (e.g. the gateway's Kafka: posts wait in the outbox)."""


def ops_routes(service: str, checks: Mapping[str, ReadinessCheck], *, public: bool = False) -> list[Route]:
    """``/healthz`` (process alive) and ``/readyz`` (every dependency
    answers). ``checks`` maps a dependency name to a coroutine that raises
    when that dependency is unavailable (``Degraded``: unavailable, but the
    service is ready without it). ``/metrics`` is not here: it is served on
    the service's metrics port only (``http_server.serve``, ``MetricsPort``).

    ``public``: the port faces the Internet (the gateway). ``/readyz`` then
    names a failing dependency but not why (error texts can carry internal
    host names and ports); the details go to the log instead. The internal
    services' ports answer with the details."""

    async def healthz(_: Request) -> Response:
        return json_response({"status": "ok", "service": service})

    def shown(problems: dict[str, str]) -> dict[str, str]:
        return {name: "unavailable" for name in problems} if public else problems

    async def readyz(_: Request) -> Response:
        failing: dict[str, str] = {}
        degraded: dict[str, str] = {}
        for name, check in checks.items():
            try:
                await check()
            except Degraded as exc:
                degraded[name] = str(exc) or type(exc).__name__
            except Exception as exc:  # noqa: BLE001 - any failure means not ready
                failing[name] = str(exc) or type(exc).__name__
        if public and (failing or degraded):
            log.warning("not ready: %s; degraded: %s", failing, degraded)
        if failing:
            names = ", ".join(sorted(failing))
            body = error_body("unavailable", f"not ready: {names} unavailable")
            body["dependencies"] = shown(failing)
            if degraded:
                body["degraded"] = shown(degraded)
            return json_response(body, 503, {"Retry-After": "1"})
        ready: dict[str, Any] = {"status": "ready", "service": service, "dependencies": sorted(checks)}
        if degraded:
            ready["degraded"] = shown(degraded)
        return json_response(ready)

    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]


def metrics_response() -> Response:
    """The exposition text of every metric (``metrics.render``)."""
    payload, content_type = metrics.render()
    return Response(payload, media_type=content_type)


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 (unknown route or method) in our error shape."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return json_response(error_body("not_found", f"no route {request.url.path}"), 404)
    if exc.status_code == 405:
        allow = ", ".join(allowed_methods(request))
        return json_response(error_body("method_not_allowed", f"{request.method} not allowed here"), 405, {"Allow": allow})
    return json_response(error_body("error", str(exc.detail)), exc.status_code, exc.headers)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (RFC 9110: a 405 lists
    them in ``Allow``). Starlette's own ``Allow`` names only the first route
    that matched the path, and our routes are one per method."""
    methods: set[str] = set()
    for candidate in getattr(request.app, "routes", ()):
        match, _ = candidate.matches(request.scope)
        if match != Match.NONE:
            methods.update(getattr(candidate, "methods", None) or ())
    return sorted(methods)


async def internal_error_handler(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", exc_info=exc)
    return json_response(error_body("internal", "internal error"), 500)


EXCEPTION_HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    HTTPException: http_exception_handler,
    Exception: internal_error_handler,
}
