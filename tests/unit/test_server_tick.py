"""The services' uvicorn server ticks once a second, and a signal ends a tick at
once (fanline_shared.http_server.Server)."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import uvicorn

from fanline_shared.http_server import Server


async def app(scope: Any, receive: Any, send: Any) -> None:  # never called: no request is made
    raise AssertionError(scope)


def server(tick_s: float) -> Server:
    s = Server(uvicorn.Config(app, lifespan="off", date_header=True, log_level="warning"))
    s.TICK_S = tick_s
    return s


async def test_a_signal_ends_the_tick_at_once_and_the_loop_returns() -> None:
    s = server(tick_s=60.0)  # a tick far longer than the test: only the signal can end it
    loop = asyncio.create_task(s.main_loop())
    await asyncio.sleep(0.05)
    assert not loop.done()
    s.handle_exit(signal.SIGTERM, None)
    await asyncio.wait_for(loop, 10)  # long before the 60 s tick would have ended
    assert s.should_exit


async def test_should_exit_set_directly_is_noticed_on_the_next_tick() -> None:
    s = server(tick_s=0.05)
    loop = asyncio.create_task(s.main_loop())
    await asyncio.sleep(0.1)
    assert not loop.done()
    s.should_exit = True  # as uvicorn's own code does, without a signal
    await asyncio.wait_for(loop, 5)


async def test_every_tick_refreshes_the_date_header() -> None:
    s = server(tick_s=0.05)
    loop = asyncio.create_task(s.main_loop())
    await asyncio.sleep(0.02)
    first = dict(s.server_state.default_headers)[b"date"]
    s.server_state.default_headers = []  # as if stale: the next tick must write it again
    await asyncio.sleep(0.15)
    assert dict(s.server_state.default_headers)[b"date"][:5] == first[:5]  # "Wed, " etc.
    s.should_exit = True
    await asyncio.wait_for(loop, 5)


def test_wake_before_the_loop_runs_is_harmless() -> None:
    server(tick_s=1.0).wake()
