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

from fanline_shared.clients.tweet_store import TweetStoreClient
from fanline_shared.errors import OVERLOADED_HEADER, Overloaded
from fanline_shared.http_client import TIMEOUT_HEADER, caller_budget_s
from fanline_shared.policies import FANOUT_PAGE
from fanline_tweet_store.limiter import AdaptiveLimit, LimitPolicy


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        (None, 8.0),  # no header: the policy's own bound
        ("10000", 8.0),  # 80 % of 10 s
        ("2000", 1.6),
        ("60000", 8.0),  # never past the policy
        ("1", 0.1),  # never below 0.1 s
        ("soon", 8.0),  # unreadable: the policy's bound
    ],
)
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

    async def queued_forever(tweet_id: uuid.UUID, author: str, owners: list[str], **_: object) -> None:
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


# --- a page's budget shapes how it is written (limiter.page_budget) ----------------


def _limit(latency_s: float, limit: float = 100.0) -> AdaptiveLimit:
    lim = AdaptiveLimit(LimitPolicy(initial=int(limit), maximum=256), busy=lambda: False)
    lim.latency = latency_s
    return lim


def test_a_far_cassandra_widens_a_pages_window_so_its_round_trips_fit_a_quarter_of_the_budget() -> None:
    near, far = _limit(0.003), _limit(0.4)
    assert near.page_window(100, 4, 8.0) == 4  # 25 round trips of 3 ms: as configured
    assert far.page_window(100, 4, 8.0) == 20  # 2 s / 0.4 s = 5 round trips of 20
    assert far.page_window(100, 4, None) == 4  # no budget: as configured
    assert _limit(2.0, limit=30).page_window(100, 4, 8.0) == 30  # never past the limit
    assert AdaptiveLimit(LimitPolicy(), busy=lambda: False).page_window(100, 4, 8.0) == 4  # nothing timed yet


async def test_a_page_that_cannot_finish_in_its_budget_is_refused_before_any_write() -> None:
    from fanline_tweet_store.write_context import PageRefused, page_budget

    lim = _limit(0.4, limit=10)
    written: list[int] = []

    async def write(i: int) -> None:
        written.append(i)

    lim.pending = 150  # 150 writes queued ahead: 15 rounds of 0.4 s = 6 s > half of 8 s
    with page_budget(8.0), pytest.raises(PageRefused) as refused:
        await lim.write_all(range(10), write, 4)
    assert written == [] and lim.pending == 150
    assert refused.value.expected_s == pytest.approx(6.4)
    lim.pending = 50  # 6 rounds of 0.4 s: admitted
    with page_budget(8.0):
        await lim.write_all(range(10), write, 4)
    assert sorted(written) == list(range(10)) and lim.pending == 50
    lim.pending = 0  # nothing pending: always admitted, however slow (else nothing would ever start)
    lim.latency = 10.0
    with page_budget(8.0):
        await lim.write_all(range(10, 13), write, 4)
    lim.pending = 10_000  # without a budget nothing is refused (tests, the SQLite path)
    await lim.write_all(range(3), write, 4)
    assert len(written) == 16


async def test_pending_writes_are_counted_until_done_and_given_back_on_failure() -> None:
    lim = _limit(0.001)
    seen: list[int] = []
    gate = asyncio.Event()

    async def write(i: int) -> None:
        seen.append(lim.pending)
        await gate.wait()
        if i == 1:
            raise RuntimeError("boom")

    task = asyncio.create_task(lim.write_all(range(6), write, 2))
    await asyncio.sleep(0.01)
    assert lim.pending == 6
    gate.set()
    with pytest.raises(RuntimeError):
        await task
    assert lim.pending == 0  # the ones never started are given back too


async def test_a_refused_page_is_refused_before_its_rows_are_grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refusals are most of the calls while a backlog drains; grouping a
    page's 1,000 rows by replica was two thirds of a replica's CPU (py-spy,
    latency-scaling phase) when it ran before the refusal."""
    from fanline_tweet_store.adapters import cassandra_home
    from fanline_tweet_store.write_context import PageRefused, page_budget

    grouped: list[int] = []

    def keyed_batches(session: object, statement: object, keys: list[str], shared: tuple[object, ...], rows: int) -> list[object]:
        grouped.append(len(keys))
        return []

    monkeypatch.setattr(cassandra_home, "keyed_batches", keyed_batches)
    home = object.__new__(cassandra_home.CassandraHomeTimeline)
    lim = _limit(0.4, limit=10)
    lim.pending = 150
    home._limit, home._window, home._batch_rows = lim, 4, 10
    with page_budget(8.0), pytest.raises(PageRefused):
        await home._write_each(None, [f"u{i}" for i in range(1000)], (), "home_add")  # type: ignore[arg-type]
    assert grouped == [] and lim.pending == 150


async def test_before_any_write_is_timed_only_the_first_page_is_admitted() -> None:
    from fanline_tweet_store.write_context import PageRefused, page_budget

    lim = AdaptiveLimit(LimitPolicy(), busy=lambda: False)
    with page_budget(8.0):
        lim.admit(100)  # nothing pending: the probe
        lim.pending = 100
        with pytest.raises(PageRefused, match="still being timed"):
            lim.admit(100)
        lim.latency, lim.limit = 0.4, 64.0  # timed: admitted by the pace from now on
        lim.admit(100)
