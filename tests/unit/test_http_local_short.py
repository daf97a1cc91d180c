"""The short way into a hosted storage service (``http_local.InProcess``):
a call made by the short way gets the answer, error, admission and request
id that the same call gets through the service's whole middleware chain,
and only what the short way does not serve (a credential refused, a path or
method no route serves) passes through the chain.

Every test runs both ways: ``chain`` hosts the app without ``in_process``
(every call through the ASGI chain, as before), ``short`` with it."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from structlog.contextvars import bound_contextvars

from fanline_shared import http_local
from fanline_shared.errors import BadRequest, NotFound, Overloaded, Unavailable
from fanline_shared.http_client import PeerClient
from fanline_shared.http_routes import EXCEPTION_HANDLERS, json_response, read_json_object, route
from fanline_shared.logs import current_request_id
from fanline_shared.policies import AdmissionPolicy, RetryPolicy
from fanline_shared.storage_service.app import guard

from .test_http_local import streamed

SERVICE = "unit-short-store"
TOKEN = "unit-short-credential"
NO_RETRY = RetryPolicy("test_no_retry", attempts=1, base_delay_s=0.0, max_delay_s=0.0)
MARK: contextvars.ContextVar[str] = contextvars.ContextVar("short_mark", default="caller")


class Counting:
    """Outermost middleware: how many requests passed through the chain."""

    def __init__(self, app: ASGIApp, *, seen: list[str]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.append(scope["path"])
        await self.app(scope, receive, send)


def store(short: bool, hold: asyncio.Event, max_in_flight: int = 1) -> tuple[Starlette, list[str]]:
    """A storage service's app as ``storage_service.storage_app`` builds it:
    ``route`` handlers behind the kit's ``guard``."""

    async def echo(request: Request) -> Response:
        MARK.set("peer")  # must not leak into the caller's context
        body = await read_json_object(request)
        return json_response(
            {
                "id": request.path_params["id"],
                "query": dict(request.query_params),
                "body": body,
                "request_id": current_request_id(),
                "priority": request.headers.get("x-fanline-priority"),
            },
            201,
        )

    async def missing(_: Request) -> Response:
        raise NotFound("no such tweet", code="tweet_not_found")

    async def invalid(_: Request) -> Response:
        raise BadRequest("limit must be 1..100", code="invalid_limit")

    async def crash(_: Request) -> Response:
        raise RuntimeError("boom")

    async def held(_: Request) -> Response:
        await hold.wait()
        return Response(status_code=204)

    async def whoami(_: Request) -> Response:
        return json_response({"request_id": current_request_id()})

    routes = [
        route(SERVICE, "/internal/echo/{id}", echo, ["POST"]),
        route(SERVICE, "/internal/missing", missing, ["GET"]),
        route(SERVICE, "/internal/invalid", invalid, ["GET"]),
        route(SERVICE, "/internal/held", held, ["GET"]),
        route(SERVICE, "/internal/streamed", streamed, ["GET"]),
        route(SERVICE, "/internal/whoami", whoami, ["GET"]),
    ]
    # Not a ``route`` handler: the short way's own 500 for what escapes an endpoint.
    routes.append(Route("/internal/crash", crash, methods=["GET"]))
    app = Starlette(routes=routes, exception_handlers=EXCEPTION_HANDLERS)
    policy = AdmissionPolicy(name="unit_short", max_in_flight=max_in_flight, queue_deadline_s=0.0, max_queue=0)
    guard(app, SERVICE, policy, TOKEN)
    seen: list[str] = []
    app.add_middleware(Counting, seen=seen)
    if not short:
        del app.state.in_process  # every call through the chain
    return app, seen


@pytest.fixture(params=["chain", "short"])
def way(request: pytest.FixtureRequest) -> Iterator[tuple[str, asyncio.Event, list[str]]]:
    hold = asyncio.Event()
    hold.set()
    app, seen = store(request.param == "short", hold)
    http_local.host("tweet-store", http_local.Hosted(app, ("127.0.0.1", 9), lambda: {}))
    yield request.param, hold, seen
    http_local.unhost("tweet-store")


def client(token: str = TOKEN, background: bool = False, timeout_s: float = 2.0) -> PeerClient:
    # A port nothing listens on: any call that left the process would fail.
    return PeerClient("api", "tweet-store", "http://127.0.0.1:9", timeout_s, token=token, background=background)


async def test_answers_and_errors_are_the_chains(way: tuple[str, asyncio.Event, list[str]]) -> None:
    name, _, seen = way
    peer = client()
    with bound_contextvars(request_id="ab" * 16):
        got = await peer.call("POST", "/internal/echo/t1", operation="echo", json={"x": 1}, params={"q": "1 2"}, policy=None)
    assert got == {"id": "t1", "query": {"q": "1 2"}, "body": {"x": 1}, "request_id": "ab" * 16, "priority": None}
    assert MARK.get() == "caller"  # the peer's context variables stayed the peer's
    with pytest.raises(NotFound, match="no such tweet") as missing:
        await peer.call("GET", "/internal/missing", operation="missing")
    assert missing.value.code == "tweet_not_found"
    with pytest.raises(BadRequest, match="limit must be") as invalid:
        await peer.call("GET", "/internal/invalid", operation="invalid")
    assert invalid.value.code == "invalid_limit"
    with pytest.raises(BadRequest) as not_json:  # the body check of the handler itself
        await peer.call("POST", "/internal/echo/t1", operation="echo", json=[1], policy=None)
    assert not_json.value.code == "invalid_json"
    assert await peer.call("GET", "/internal/streamed", operation="streamed") == {"a": 1}
    with pytest.raises(Unavailable):  # what escapes an endpoint is a 500
        await peer.call("GET", "/internal/crash", operation="crash", policy=NO_RETRY)
    # Through the chain either way: no route, or not this method.
    with pytest.raises(NotFound, match="no route"):
        await peer.call("GET", "/internal/nothing", operation="nothing")
    with pytest.raises(Exception, match="not allowed") as wrong_method:
        await peer.call("GET", "/internal/echo/t1", operation="echo")
    assert wrong_method.value.code == "method_not_allowed"  # type: ignore[attr-defined]
    through_chain = {"/internal/nothing", "/internal/echo/t1"} if name == "short" else set(seen)
    assert set(seen) == through_chain
    if name == "short":
        assert seen == ["/internal/nothing", "/internal/echo/t1"]  # the rest never entered the chain


async def test_a_refused_credential_is_refused_either_way(way: tuple[str, asyncio.Event, list[str]]) -> None:
    _, _, seen = way
    # The caller's misconfiguration: Unavailable (the worker waits), never the user's 401.
    with pytest.raises(Unavailable, match="service credential refused"):
        await client(token="wrong").call("GET", "/internal/whoami", operation="whoami", policy=NO_RETRY)
    assert seen == ["/internal/whoami"]  # answered by the chain's own middleware


async def test_admission_counts_in_process_calls_and_exempts_background_work(
    way: tuple[str, asyncio.Event, list[str]],
) -> None:
    _, hold, _ = way
    hold.clear()
    peer = client()
    first = asyncio.create_task(peer.call("GET", "/internal/held", operation="held", policy=None))
    await asyncio.sleep(0.01)
    with pytest.raises(Overloaded):  # the one slot is taken: shed at once, as over a socket
        await peer.call("GET", "/internal/whoami", operation="whoami", policy=None)
    # Background work (the fan-out worker's) is not counted against the limit.
    assert await client(background=True).call("GET", "/internal/whoami", operation="whoami", policy=None) is not None
    hold.set()
    assert await first is None
    assert await peer.call("GET", "/internal/whoami", operation="whoami", policy=None) is not None  # the slot is free again


async def test_a_call_without_a_request_id_gets_a_fresh_one(way: tuple[str, asyncio.Event, list[str]]) -> None:
    got: dict[str, Any] = await client().call("GET", "/internal/whoami", operation="whoami")
    assert isinstance(got["request_id"], str) and len(got["request_id"]) == 32
    assert current_request_id() is None  # and it stayed the peer's


async def test_the_callers_timeout_ends_the_call_and_frees_the_slot(way: tuple[str, asyncio.Event, list[str]]) -> None:
    _, hold, _ = way
    hold.clear()
    with pytest.raises(Unavailable, match="no answer within"):
        await client(timeout_s=0.1).call("GET", "/internal/held", operation="held", policy=NO_RETRY)
    await asyncio.sleep(0.01)
    hold.set()
    # The cancelled call left the admission gate: the one slot is free.
    assert await client().call("GET", "/internal/whoami", operation="whoami", policy=None) is not None
