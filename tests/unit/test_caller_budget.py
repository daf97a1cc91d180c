"""A fan-out page the worker has given up on is not written anyway.

The worker sends its timeout on every peer request (``TIMEOUT_HEADER``);
tweet-store works on a page at most ``CALLER_BUDGET_SHARE`` of it (and at most
``policies.FANOUT_PAGE``), then cancels the rest and answers 503 with
``X-Fanline-Overloaded`` and ``Retry-After``, so the worker backs off instead of
retrying at once. Before, a benchmark run with 4 workers on 2 cores queued
pages for ~300 s each while their retries queued behind them.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from aiohttp import web

from fanline_shared.errors import OVERLOADED_HEADER, Overloaded
from fanline_shared.peers import TIMEOUT_HEADER, TweetStoreClient, caller_budget_s
from fanline_shared.policies import FANOUT_PAGE
from fanline_tweet_store.limiter import AdaptiveLimit, LimitPolicy


@pytest.mark.parametrize(("sent", "expected"), [
    (None, 8.0),  # no header: the policy's own bound
    ("10000", 8.0),  # 80 % of 10 s
    ("2000", 1.6),
    ("60000", 8.0),  # never past the policy
    ("1", 0.1),  # never below 0.1 s
    ("soon", 8.0),  # unreadable: the policy's bound
])
def test_caller_budget(sent: str | None, expected: float) -> None:
    headers = {TIMEOUT_HEADER: sent} if sent is not None else {}
    assert caller_budget_s(headers, default_s=8.0) == pytest.approx(expected)


async def test_peer_requests_carry_the_callers_timeout() -> None:
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get(TIMEOUT_HEADER))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/internal/home/add", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = TweetStoreClient("fanout-worker", f"http://127.0.0.1:{port}", 2.5)
    try:
        await client.home_add(str(uuid.uuid1()), "alice", ["bob"])
    finally:
        await client.close()
        await runner.cleanup()
    assert seen == ["2500"]


async def test_a_write_given_up_on_frees_its_slot_and_teaches_the_limit_nothing() -> None:
    limit = AdaptiveLimit(LimitPolicy(initial=2), busy=lambda: False)
    started = asyncio.Event()

    async def hangs() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(limit.run(hangs))
    await started.wait()
    assert limit.in_flight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limit.in_flight == 0
    assert limit.limit == 2  # a failure would have shrunk it to 1.6


def test_tweet_store_abandons_a_page_past_the_callers_budget(tmp_path: Any) -> None:
    from starlette.testclient import TestClient

    from fanline_tweet_store.app import create_app
    from fanline_tweet_store.config import Settings

    token = "unit-test-internal-token"
    app = create_app(Settings.from_env({"FANLINE_DATA_DIR": str(tmp_path), "FANLINE_INTERNAL_TOKEN": token}))
    cancelled: list[bool] = []

    async def queued_forever(tweet_id: uuid.UUID, author: str, owners: list[str]) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with TestClient(app, headers={"X-Fanline-Internal-Token": token}) as client:
        page = {"tweet_id": str(uuid.uuid1()), "author": "alice", "owners": ["bob", "carol"]}
        assert client.post("/internal/home/add", json=page).status_code == 204
        real = app.state.store.home_add
        app.state.store.home_add = queued_forever
        refused = client.post("/internal/home/add", json=page, headers={TIMEOUT_HEADER: "250"})
        assert refused.status_code == 503
        assert refused.headers[OVERLOADED_HEADER] == "tweet-store"
        assert refused.headers["Retry-After"] == str(FANOUT_PAGE.retry_after_s)
        assert refused.json()["error"]["code"] == "unavailable"
        assert cancelled == [True]  # the work stopped with the answer
        app.state.store.home_add = real
        assert client.post("/internal/home/add", json=page).status_code == 204


def test_overloaded_names_the_service_only_when_asked() -> None:
    assert Overloaded("x").headers == {}
    assert Overloaded("x", shed_by="tweet-store").headers == {OVERLOADED_HEADER: "tweet-store"}
