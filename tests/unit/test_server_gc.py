"""The services' GC tuning runs once, after the app's start-up (http_server.py)."""

from __future__ import annotations

import gc
from typing import Any

from fanline_shared import http_server


async def test_the_hook_runs_when_startup_completes_and_not_before() -> None:
    calls: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        calls.append("startup")  # the app's own start-up: clients, statements
        await send({"type": "lifespan.startup.complete"})
        await receive()
        await send({"type": "lifespan.shutdown.complete"})

    inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[str] = []

    async def receive() -> Any:
        return inbox.pop(0)

    async def send(message: Any) -> None:
        sent.append(message["type"])

    await http_server.AfterStartup(app, lambda: calls.append("hook"))({"type": "lifespan"}, receive, send)
    assert calls == ["startup", "hook"]
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


async def test_requests_pass_through_untouched() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    await http_server.AfterStartup(app, lambda: seen.append("hook"))({"type": "http"}, None, None)
    assert seen == ["http"]


def test_tuning_freezes_what_exists() -> None:
    try:
        http_server.tune_gc_after_startup()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
