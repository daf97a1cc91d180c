"""The gateway answers within its request deadline (api/deadline.py,
``policies.RequestDeadline``) and a client that goes away mid-body is no
server error (shared/http_routes.py). Fakes only: a TCP server that accepts and never
answers stands in for a storage service stuck on a paused Cassandra;
tests/e2e/test_stalled_cassandra.py does it with the real engines."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from fanline_api.deadline import bounded
from fanline_shared import metrics
from fanline_shared.clients.tweet_store import TweetStoreClient
from fanline_shared.http_routes import json_response, read_json_object, route
from fanline_shared.policies import RequestDeadline


@pytest.fixture
async def stalled_peer() -> AsyncIterator[str]:
    """A service that accepts connections and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    for writer in held:
        writer.close()
    server.close()


async def test_a_stalled_peer_is_answered_503_with_retry_after_within_the_deadline(stalled_peer: str) -> None:
    peer = TweetStoreClient("api", stalled_peer, timeout_s=10.0)  # the production peer timeout

    async def read(_: Request) -> Response:
        return json_response(await peer.call("GET", "/internal/tweets/x", operation="get_tweet"))

    app = Starlette(routes=[route("api", "/v1/x", bounded(read, RequestDeadline("test", 0.5)), ["GET"])])
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            started = time.monotonic()
            response = await client.get("/v1/x")
            elapsed = time.monotonic() - started
    finally:
        await peer.close()
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "unavailable"
    assert 0.45 <= elapsed < 1.5, elapsed


async def test_a_timeout_that_is_not_the_deadline_is_not_disguised() -> None:
    async def own_timeout(_: Request) -> Response:
        raise TimeoutError("a bug's own timeout")

    app = Starlette(routes=[route("api", "/v1/y", bounded(own_timeout, RequestDeadline("test", 5)), ["GET"])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.get("/v1/y")
    assert response.status_code == 500


def requests_counted(status: str) -> float:
    value = metrics.HTTP_REQUESTS.labels("api", "POST", "/v1/tweets-disconnect", status)._value.get()  # type: ignore[attr-defined]
    return float(value)


async def test_a_client_disconnecting_mid_body_is_no_error_and_no_500(caplog: pytest.LogCaptureFixture) -> None:
    async def post(request: Request) -> Response:
        await read_json_object(request)
        return Response(status_code=201)

    endpoint = route("api", "/v1/tweets-disconnect", post, ["POST"])
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": "/v1/tweets-disconnect",
        "raw_path": b"/v1/tweets-disconnect",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"40")],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("t", 80),
        "client": ("c", 1),
        "root_path": "",
        "path_params": {},
    }
    messages = [{"type": "http.request", "body": b'{"body": "half', "more_body": True}, {"type": "http.disconnect"}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    before_500, before_499 = requests_counted("500"), requests_counted("499")
    with caplog.at_level(logging.INFO):
        await endpoint.handle(scope, receive, send)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert requests_counted("500") == before_500
    assert requests_counted("499") == before_499 + 1
