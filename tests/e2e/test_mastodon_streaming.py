"""Mastodon.py's streaming against the whole system: the user stream over
server-sent events and over the WebSocket, the public stream, updates and
deletes, and the per-user limit (both transports count)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from mastodon import StreamListener

from .client import eventually
from .masto import raw, signed_up

pytestmark = pytest.mark.e2e


class Listener(StreamListener):
    def __init__(self) -> None:
        super().__init__()
        self.updates: list[Any] = []
        self.deletes: list[int] = []
        self.events: list[tuple[str, Any]] = []

    def on_update(self, status: Any) -> None:
        self.updates.append(status)

    def on_delete(self, status_id: Any) -> None:
        self.deletes.append(int(status_id))

    def on_any_event(self, name: str, payload: Any, for_stream: Any = None) -> None:
        self.events.append((name, for_stream))

    def on_abort(self, err: Exception) -> None:  # the test closes streams itself
        pass

    def update_ids(self) -> list[int]:
        return [int(s.id) for s in self.updates]


def pair(url: str) -> tuple[Any, Any]:
    reader, _ = signed_up(url)
    author, author_name = signed_up(url)
    reader.account_follow(reader.account_lookup(author_name).id)
    return reader, author


def test_the_user_stream_over_server_sent_events(masto_system: Any) -> None:
    reader, author = pair(masto_system.url())
    listener = Listener()
    handle = reader.stream_user(listener, run_async=True)
    try:
        eventually(handle.is_receiving, what="the stream is open")
        status = author.status_post("live over SSE <i>escaped</i>")
        eventually(lambda: int(status.id) in listener.update_ids(), timeout=15, what="the update")
        got = next(s for s in listener.updates if int(s.id) == int(status.id))
        assert got.content == "<p>live over SSE &lt;i&gt;escaped&lt;/i&gt;</p>" and got.account.acct == author.me().acct
        author.status_delete(status.id)
        eventually(lambda: int(status.id) in listener.deletes, timeout=15, what="the delete")
    finally:
        handle.close()


def test_the_user_and_public_streams_over_one_websocket(masto_system: Any) -> None:
    reader, author = pair(masto_system.url())
    listener = Listener()
    socket = reader.stream_open_websocket(listener)
    try:
        socket.subscribe("user")
        socket.subscribe("public")
        time.sleep(1.0)  # the subscriptions are registered by the gateway meanwhile
        status = author.status_post("live over a WebSocket")
        eventually(lambda: listener.update_ids().count(int(status.id)) == 2, timeout=15, what="user and public updates")
        streams = {tuple(s) for name, s in listener.events if name == "update"}
        assert streams >= {("user",), ("public",)}
        socket.unsubscribe("public")
        time.sleep(0.5)
        author.status_delete(status.id)
        eventually(lambda: listener.deletes.count(int(status.id)) == 1, timeout=15, what="the delete, on the user stream only")
    finally:
        socket.close()


def test_raw_streams_frame_like_mastodon_and_count_against_the_limit(masto_system: Any) -> None:
    url = masto_system.url()
    reader, author = pair(url)
    token = reader.access_token
    with httpx.Client(base_url=url, timeout=httpx.Timeout(10, read=5)) as http:
        with http.stream("GET", f"/api/v1/streaming/public?access_token={token}") as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            status = author.status_post("raw framing")
            seen, deleted = "", False
            for chunk in response.iter_text():
                seen += chunk
                if f"event: delete\ndata: {status.id}\n" in seen and ": thump" in seen:
                    break  # the update, the delete and a heartbeat (every second in these tests)
                if f'"id":"{status.id}"' in seen and not deleted:
                    author.status_delete(status.id)
                    deleted = True
            assert "event: update\n" in seen and "\r" not in seen and ": thump" in seen
        # Four user streams per user and replica; the fifth is refused.
        with raw(url, token) as limited:
            opened = [limited.stream("GET", "/api/v1/streaming/user") for _ in range(4)]
            responses = [o.__enter__() for o in opened]
            try:
                assert all(r.status_code == 200 for r in responses)
                fifth = limited.get("/api/v1/streaming/user", timeout=5)
                assert fifth.status_code == 429 and "error" in fifth.json()
            finally:
                for o in opened:
                    o.__exit__(None, None, None)
    unauthorized = httpx.get(f"{url}/api/v1/streaming/user", timeout=5)
    assert unauthorized.status_code == 401
