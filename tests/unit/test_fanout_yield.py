"""Fan-out yields to user-facing requests: the tracker that picks the window,
and the driver window that follows a shrinking/growing limit.

The window is driven here by a fake session whose requests complete on a
timer thread, like the driver's callbacks; the real driver runs the same code
in the Cassandra contract and end-to-end tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

from fanline_shared.cassandra import execute_concurrent
from fanline_shared.policies import FanoutYield
from fanline_tweet_store.priority import ForegroundActivity


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_busy_during_and_shortly_after_a_user_facing_request() -> None:
    clock = Clock()
    activity = ForegroundActivity(FanoutYield(quiet_s=0.5), clock)
    assert not activity.busy()  # nothing served yet

    seen: list[bool] = []

    async def handler(request: Request) -> Response:
        clock.now += 3.0  # a slow request: still busy at its end
        seen.append(activity.busy())
        return Response()

    asyncio.run(activity.foreground(handler)(Request({"type": "http", "method": "GET", "headers": []})))
    assert seen == [True]
    assert activity.busy()  # just finished
    clock.now += 0.49
    assert activity.busy()
    clock.now += 0.02
    assert not activity.busy()


class FakeResponse:
    has_more_pages = False

    def __init__(self, session: FakeSession) -> None:
        self._session = session

    def add_callbacks(
        self,
        callback: Callable[..., Any],
        errback: Callable[..., Any],
        callback_args: tuple[Any, ...] = (),
        errback_args: tuple[Any, ...] = (),
    ) -> None:
        def complete() -> None:
            with self._session.lock:
                self._session.in_flight -= 1
            callback(None, *callback_args)

        threading.Timer(0.002, complete).start()


class FakeSession:
    """Counts requests in flight; each completes 2 ms later on another thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peaks: list[int] = []  # in-flight count at each submission
        self.executed = 0

    def execute_async(self, statement: Any, params: Any) -> FakeResponse:
        with self.lock:
            self.in_flight += 1
            self.executed += 1
            self.peaks.append(self.in_flight)
        return FakeResponse(self)

    def submit(self, fn: Callable[[], None]) -> None:
        threading.Thread(target=fn).start()


async def test_window_follows_its_limit_as_it_changes() -> None:
    session = FakeSession()
    limit = {"value": 32}
    rows = [(i,) for i in range(4000)]

    task = asyncio.ensure_future(
        execute_concurrent(
            session,
            object(),
            rows,
            name="test_window",  # type: ignore[arg-type]
            concurrency=lambda: limit["value"],
        )
    )
    while session.executed < 150:
        await asyncio.sleep(0.001)
    limit["value"] = 4  # user-facing traffic arrives: the window shrinks
    mark = session.executed
    while session.executed < mark + 300:
        await asyncio.sleep(0.001)
    shrunk = session.peaks[mark + 100 : mark + 300]  # once the in-flight ones drained
    grow_from = session.executed
    limit["value"] = 64  # quiet again: it grows back
    results = await asyncio.wait_for(task, 30)

    assert len(results) == 4000 and session.executed == 4000  # every row written exactly once
    assert max(session.peaks[:mark]) <= 32
    assert max(shrunk) <= 4
    assert max(session.peaks) <= 64
    assert max(session.peaks[grow_from:]) > 32  # grew again


async def test_a_zero_limit_still_makes_progress() -> None:
    session = FakeSession()
    results = await asyncio.wait_for(
        execute_concurrent(
            session,
            object(),
            [(i,) for i in range(20)],
            name="test_window",  # type: ignore[arg-type]
            concurrency=lambda: 0,
        ),
        10,
    )
    assert len(results) == 20 and max(session.peaks) == 1


def test_fixed_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError):
        asyncio.run(execute_concurrent(FakeSession(), object(), [(1,)], name="t", concurrency=0))  # type: ignore[arg-type]


def test_the_workers_tweet_check_does_not_make_the_fanout_yield(tmp_path: Any) -> None:
    """The worker checks each tweet before fanning it out; if that counted as
    user-facing, the fan-out would yield to itself at every event (measured:
    one worker at 0.6 of the bare-driver rate). The gateway's lookup counts."""
    import time

    from starlette.testclient import TestClient

    from fanline_shared.http_client import BACKGROUND, PRIORITY_HEADER
    from fanline_tweet_store.app import create_app
    from fanline_tweet_store.config import Settings

    token = "unit-test-internal-token"
    settings = Settings.from_env(
        {"FANLINE_DATA_DIR": str(tmp_path), "FANLINE_FANOUT_YIELD_S": "0.05", "FANLINE_INTERNAL_TOKEN": token}
    )
    app = create_app(settings)
    with TestClient(app, headers={"X-Fanline-Internal-Token": token}) as client:
        created = client.post("/internal/tweets", json={"username": "alice", "body": "hi"})
        tweet_id = created.json()["tweet"]["id"]
        time.sleep(0.1)
        assert not app.state.activity.busy()
        background = {PRIORITY_HEADER: BACKGROUND}
        assert client.get(f"/internal/tweets/{tweet_id}", headers=background).json()["id"] == tweet_id
        assert not app.state.activity.busy()  # background
        assert client.get(f"/internal/tweets/{tweet_id}").status_code == 200
        assert app.state.activity.busy()  # user-facing
