"""In-process calls to a hosted service (``fanline_shared.http_local``) through
``PeerClient``: the peer's Starlette app sees what uvicorn would give it, and
the caller gets the same answers and errors as over a socket."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fanline_shared import http_local
from fanline_shared.errors import NotFound, Overloaded, Unavailable
from fanline_shared.http_client import PeerClient
from fanline_shared.policies import RetryPolicy

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="caller")
NO_RETRY = RetryPolicy("test_no_retry", attempts=1, base_delay_s=0.0, max_delay_s=0.0)


async def echo(request: Request) -> Response:
    MARK.set("peer")  # must not leak into the caller's context
    body = await request.body()
    return JSONResponse(
        {
            "method": request.method,
            "path": request.url.path,
            "raw_path": request.scope["raw_path"].decode(),
            "query": dict(request.query_params),
            "headers": dict(request.headers),
            "body": body.decode(),
            "client": request.client.host if request.client else None,
            "server": list(request.scope["server"]),
            "state": request.scope["state"].get("from_lifespan"),
        },
        status_code=201 if request.method == "POST" else 200,
    )


async def missing(_: Request) -> Response:
    return JSONResponse({"error": {"code": "not_found", "message": "no such tweet"}}, status_code=404)


async def busy(_: Request) -> Response:
    refused = {"error": {"code": "overloaded", "message": "busy"}}
    return JSONResponse(refused, 503, headers={"x-fanline-overloaded": "1", "retry-after": "3"})


async def crash(_: Request) -> Response:
    raise RuntimeError("boom")


SLOW: list[str] = []


async def slow(_: Request) -> Response:
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        SLOW.append("cancelled")
        raise
    return Response(status_code=204)


async def empty(_: Request) -> Response:
    return Response(status_code=204)


async def streamed(_: Request) -> Response:
    async def parts() -> AsyncIterator[bytes]:
        yield b'{"a":'
        yield b"1}"

    return StreamingResponse(parts(), media_type="application/json")


APP = Starlette(
    routes=[
        Route("/echo/{rest:path}", echo, methods=["GET", "POST"]),
        Route("/missing", missing),
        Route("/busy", busy),
        Route("/crash", crash),
        Route("/slow", slow),
        Route("/empty", empty),
        Route("/streamed", streamed),
    ]
)


@pytest.fixture
def hosted() -> Any:
    http_local.host("tweet-store", http_local.Hosted(APP, ("127.0.0.1", 9), lambda: {"from_lifespan": "ready"}))
    yield
    http_local.unhost("tweet-store")


def client(timeout_s: float = 2.0) -> PeerClient:
    # A port nothing listens on: any call that left the process would fail.
    return PeerClient("api", "tweet-store", "http://127.0.0.1:9", timeout_s, token="s3cret")


async def test_the_peer_sees_what_uvicorn_would_give_it(hosted: None) -> None:
    peer = client()
    got = await peer.call(
        "POST", "/echo/a b/é", operation="echo", json={"x": 1}, params={"q": "1 2"}, headers={"x-extra": "yes"}, policy=None
    )
    assert got["method"] == "POST"
    assert got["path"] == "/echo/a b/é"
    assert got["raw_path"] == "/echo/a%20b/%C3%A9"
    assert got["query"] == {"q": "1 2"}
    assert got["body"] == '{"x":1}'
    assert got["headers"]["x-fanline-internal-token"] == "s3cret"
    assert got["headers"]["content-type"] == "application/json"
    assert got["headers"]["content-length"] == "7"
    assert got["headers"]["x-extra"] == "yes"
    assert got["headers"]["x-fanline-timeout-ms"] == "2000"
    assert got["client"] == "127.0.0.1"
    assert got["server"] == ["127.0.0.1", 9]
    assert got["state"] == "ready"
    assert MARK.get() == "caller"  # the peer's context variables stayed the peer's


async def test_errors_come_back_as_the_same_domain_errors(hosted: None) -> None:
    peer = client()
    with pytest.raises(NotFound, match="no such tweet"):
        await peer.call("GET", "/missing", operation="missing")
    with pytest.raises(Overloaded) as refused:
        await peer.call("GET", "/busy", operation="busy", policy=None)
    assert refused.value.retry_after == 3
    # An exception the app lets escape is a 500, as uvicorn answers it: Unavailable to the caller.
    with pytest.raises(Unavailable):
        await peer.call("GET", "/crash", operation="crash", policy=NO_RETRY)
    assert await peer.call("GET", "/empty", operation="empty") is None
    assert await peer.call("GET", "/streamed", operation="streamed") == {"a": 1}


async def test_the_callers_timeout_cancels_the_peers_work(hosted: None) -> None:
    peer = client(timeout_s=0.1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(Unavailable, match="no answer within"):
        await peer.call("GET", "/slow", operation="slow", policy=NO_RETRY)
    assert loop.time() - started < 1.0
    await asyncio.sleep(0.01)
    assert SLOW == ["cancelled"]  # as a dropped connection would, the caller's give-up ends the peer's work


async def test_header_values_that_could_break_a_request_are_refused_in_process_too(hosted: None) -> None:
    with pytest.raises(ValueError, match="invalid character"):
        await client().call("GET", "/empty", operation="empty", headers={"x-bad": "a\r\nb"})


async def test_without_a_hosted_peer_the_call_goes_over_the_network() -> None:
    # Nothing hosted and nothing listening: the socket transport's failure.
    with pytest.raises(Unavailable, match="tweet-store unavailable"):
        await client(timeout_s=0.5).call("GET", "/empty", operation="empty", policy=NO_RETRY)


def test_hosted_services_setting() -> None:
    from fanline_api.config import Settings
    from fanline_shared.config import ConfigError

    settings: Callable[[dict[str, str]], Settings] = Settings.from_env
    assert settings({}).hosted_services == ()
    assert settings({"FANLINE_HOSTED_SERVICES": "tweet-store, social-graph"}).hosted_services == ("social-graph", "tweet-store")
    with pytest.raises(ConfigError, match="fanout-worker cannot be hosted"):
        settings({"FANLINE_HOSTED_SERVICES": "tweet-store,fanout-worker"})


async def test_hosting_runs_each_lifespan_in_order_and_stops_them_in_reverse() -> None:
    from contextlib import asynccontextmanager

    from fanline_shared.colocation import Hosting, Part
    from fanline_shared.config import HttpSettings

    seen: list[str] = []

    def store(name: str, fail: bool = False) -> Part:
        @asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[dict[str, str]]:
            if fail:
                raise RuntimeError(f"{name} cannot reach its storage")
            seen.append(f"start {name}")
            yield {"from_lifespan": name}
            seen.append(f"stop {name}")

        app = Starlette(routes=[Route("/echo/{rest:path}", echo)], lifespan=lifespan)
        return Part(name, app, HttpSettings(host="127.0.0.1", port=9, metrics_port=0))

    hosting = Hosting([store("social-graph"), store("tweet-store")])
    await hosting.start()
    try:
        assert seen == ["start social-graph", "start tweet-store"]
        got = await client().call("GET", "/echo/x", operation="echo")  # the hosted tweet-store, with its lifespan's state
        assert got["state"] == "tweet-store"
    finally:
        await hosting.stop()
    assert seen[2:] == ["stop tweet-store", "stop social-graph"]
    assert http_local.hosted("tweet-store") is None

    seen.clear()
    broken = Hosting([store("social-graph"), store("tweet-store", fail=True)])
    with pytest.raises(RuntimeError, match="cannot reach its storage"):
        await broken.start()
    assert seen == ["start social-graph", "stop social-graph"]  # what had started is stopped
    assert http_local.hosted("social-graph") is None
