"""Plain calls into a hosted service (``http_local.Direct``): the caller gets
the answer, the error, the admission, the timeout and the route metrics that
the same request gets from the route — without a request or JSON."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from fanline_shared import http_local
from fanline_shared.errors import BadRequest, DomainError, NotFound, Overloaded, PeerFailed, Unavailable

from .test_http_local_short import NO_RETRY, SERVICE, client, store


def _calls(hold: asyncio.Event) -> dict[str, http_local.Direct]:
    async def missing() -> Any:
        raise NotFound("no such tweet", code="tweet_not_found")

    async def invalid() -> Any:
        raise BadRequest("limit must be 1..100", code="invalid_limit")

    async def crash() -> Any:
        raise RuntimeError("boom")

    async def held() -> Any:
        await hold.wait()
        return None

    async def echo(value: str) -> Any:
        return {"value": value}

    def direct(template: str, fn: Any) -> http_local.Direct:
        return http_local.Direct(SERVICE, "GET", template, fn)

    return {
        "missing": direct("/internal/missing", missing),
        "invalid": direct("/internal/invalid", invalid),
        "crash": direct("/internal/crash", crash),
        "held": direct("/internal/held", held),
        "echo": direct("/internal/echo/{id}", echo),
    }


@pytest.fixture
def hold() -> Iterator[asyncio.Event]:
    hold = asyncio.Event()
    hold.set()
    app, _ = store(True, hold)
    app.state.in_process = dataclasses.replace(app.state.in_process, calls=_calls(hold))
    http_local.host("tweet-store", http_local.Hosted(app, ("127.0.0.1", 9), lambda: {}))
    yield hold
    http_local.unhost("tweet-store")


def _requests(template: str, status: str) -> float:
    labels = {"service": SERVICE, "method": "GET", "route": template, "status": status}
    return REGISTRY.get_sample_value("fanline_http_requests_total", labels) or 0.0


async def _error(call: Any) -> DomainError:
    with pytest.raises(DomainError) as caught:
        await call
    return caught.value


async def test_only_what_the_service_offers_is_a_plain_call(hold: asyncio.Event) -> None:
    peer = client()
    assert peer.offers("echo") and not peer.offers("nothing")
    http_local.unhost("tweet-store")
    assert not client().offers("echo")  # not hosted here: over HTTP


async def test_answers_and_errors_are_the_routes(hold: asyncio.Event) -> None:
    peer = client()
    before = _requests("/internal/echo/{id}", "200")
    assert await peer.direct("echo", "/internal/echo/t1", "t1", operation="echo") == {"value": "t1"}
    assert _requests("/internal/echo/{id}", "200") == before + 1  # counted as the route counts its answers
    for name in ("missing", "invalid"):
        over_http = await _error(peer.call("GET", f"/internal/{name}", operation=name))
        plain = await _error(peer.direct(name, f"/internal/{name}", operation=name))
        assert (type(plain), plain.code, plain.message) == (type(over_http), over_http.code, over_http.message)
    crashed = _requests("/internal/crash", "500")
    # What escapes the function is the route's 500, rebuilt by the caller as a failed peer.
    assert isinstance(await _error(peer.direct("crash", "/internal/crash", operation="crash", policy=NO_RETRY)), PeerFailed)
    assert _requests("/internal/crash", "500") == crashed + 1


async def test_admission_sheds_a_plain_call_as_it_sheds_a_request(hold: asyncio.Event) -> None:
    hold.clear()
    peer = client()
    first = asyncio.create_task(peer.direct("held", "/internal/held", operation="held", policy=None))
    await asyncio.sleep(0.01)
    with pytest.raises(Overloaded):  # the one slot is taken, as over HTTP
        await peer.call("GET", "/internal/whoami", operation="whoami", policy=None)
    with pytest.raises(Overloaded, match="over its capacity"):
        await peer.direct("echo", "/internal/echo/t2", "t2", operation="echo", policy=None)
    hold.set()
    assert await first is None
    assert await peer.direct("echo", "/internal/echo/t3", "t3", operation="echo", policy=None) == {"value": "t3"}


async def test_the_callers_timeout_ends_the_call_and_frees_the_slot(hold: asyncio.Event) -> None:
    hold.clear()
    with pytest.raises(Unavailable, match="no answer within"):
        await client(timeout_s=0.1).direct("held", "/internal/held", operation="held", policy=NO_RETRY)
    hold.set()
    assert await client().direct("echo", "/internal/echo/t4", "t4", operation="echo", policy=None) == {"value": "t4"}


async def test_a_timeout_of_the_function_itself_is_a_failure_not_the_callers(hold: asyncio.Event) -> None:
    async def times_out() -> Any:
        raise TimeoutError  # e.g. the store's own budget on some work, not the caller's

    app = http_local.hosted("tweet-store")
    assert app is not None
    calls = dict(app.app.state.in_process.calls, own=http_local.Direct(SERVICE, "GET", "/internal/held", times_out))
    app.app.state.in_process = dataclasses.replace(app.app.state.in_process, calls=calls)
    with pytest.raises(PeerFailed):
        await client().direct("own", "/internal/held", operation="own", policy=NO_RETRY)
