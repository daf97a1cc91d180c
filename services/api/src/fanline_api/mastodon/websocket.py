"""Mastodon's streaming API over one WebSocket: ``/api/v1/streaming``.

The token comes in the ``Authorization`` header, the ``access_token`` query
parameter or ``Sec-WebSocket-Protocol`` (then echoed as the accepted
subprotocol, as browsers require). ``?stream=user|public|public:local``
subscribes at once; afterwards the client sends ``{"type": "subscribe",
"stream": …}`` and ``{"type": "unsubscribe", "stream": …}``. Every event is
``{"stream": ["user"], "event": "update", "payload": "<status JSON as a
string>"}`` (a delete's payload is the bare status id); a subscription that
cannot be served answers ``{"error": …, "status": …}``.

Each subscription is a stream of the live hub (``live.py``): the per-user
stream limit counts them, and every update is rendered once per event
(``streaming.render``). Keep-alive is the WebSocket's own ping (uvicorn's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from fanline_shared import metrics
from fanline_shared import scopes as scope_rules
from fanline_shared.errors import DomainError, status_of

from ..gateway import Gateway
from ..principal import Principal
from ..stream_hub import CLOSE, HEARTBEAT, Hub, Stream
from .context import base
from .streaming import render

log = logging.getLogger(__name__)
USER = "user"
PUBLIC = {"public", "public:local"}
# Channels Fanline has no events for: the subscription is accepted and stays silent.
QUIET = {
    *("user:notification", "direct", "list", "hashtag", "hashtag:local"),
    *("public:remote", "public:media", "public:local:media", "public:remote:media"),
}
MAX_MESSAGE = 4096


class Connection:
    """One client's socket and its subscriptions (stream name -> relay task)."""

    def __init__(self, socket: WebSocket, gateway: Gateway, live: Hub, who: Principal | None, url: str) -> None:
        self.socket = socket
        self.gateway = gateway
        self.live = live
        self.who = who
        self.url = url
        self.relays: dict[str, asyncio.Task[None]] = {}
        self._send = asyncio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        async with self._send:
            await self.socket.send_text(orjson.dumps(message).decode())

    async def error(self, message: str, status: int, stream: str | None = None) -> None:
        body: dict[str, Any] = {"error": message, "status": status}
        if stream is not None:
            body["stream"] = [stream]
        await self.send(body)

    async def subscribe(self, name: str) -> None:
        if name in self.relays:
            return
        if name == USER or name in {"user:notification", "direct", "list"}:
            if self.who is None or self.who.kind != "user" or not self.who.allows(scope_rules.READ_STATUSES):
                await self.error("Access token does not have the required scopes", 401, name)
                return
        elif name not in PUBLIC and name not in QUIET:
            await self.error("Unknown stream type", 400, name)
            return
        stream: Stream | None = None
        try:
            if name == USER:
                assert self.who is not None
                stream = await self.live.open_home(self.who.username)
            elif name in PUBLIC:
                stream = self.live.open_public()
        except DomainError as exc:
            await self.error(exc.message, status_of(exc), name)
            return
        self.relays[name] = asyncio.create_task(self._relay(name, stream))

    async def unsubscribe(self, name: str) -> None:
        task = self.relays.pop(name, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _relay(self, name: str, stream: Stream | None) -> None:
        if stream is None:
            return  # a quiet channel: nothing ever comes
        try:
            while True:
                item = await stream.next()
                if item is HEARTBEAT:
                    continue
                if item is CLOSE:
                    # Too slow, or shutting down: end the socket, the client reconnects.
                    await self.socket.close(code=1001)
                    return
                payload = await render(self.gateway, item, self.url)
                if payload is None:
                    continue
                metrics.STREAM_EVENTS.labels(f"mastodon-ws-{stream.kind}", item.event).inc()
                await self.send({"stream": [name], "event": item.event, "payload": payload})
        except (WebSocketDisconnect, RuntimeError):
            return  # the socket went away; run() cleans up
        finally:
            self.live.close(stream)

    async def close_all(self) -> None:
        for name in list(self.relays):
            await self.unsubscribe(name)


def _subprotocol_token(socket: WebSocket) -> str | None:
    raw = socket.headers.get("sec-websocket-protocol")
    return raw.split(",")[0].strip() if raw else None


async def _principal(socket: WebSocket, gateway: Gateway) -> Principal | None:
    auth = socket.headers.get("authorization")
    token = socket.query_params.get("access_token") or _subprotocol_token(socket)
    if not auth and token:
        auth = f"Bearer {token}"
    if auth is None:
        return None
    return await gateway.principal(auth)


async def endpoint(socket: WebSocket) -> None:
    gateway: Gateway = socket.app.state.gateway
    live: Hub | None = getattr(socket.app.state, "hub", None)
    if live is None:
        await socket.close(code=1013)  # try again later: streaming is off here
        return
    try:
        who = await _principal(socket, gateway)
    except DomainError:
        await socket.close(code=4001)  # refused before the handshake completes: 403 to the client
        return
    subprotocol = _subprotocol_token(socket) if not socket.headers.get("authorization") else None
    await socket.accept(subprotocol=subprotocol)
    connection = Connection(socket, gateway, live, who, base(socket))
    try:
        first = socket.query_params.get("stream")
        if first:
            await connection.subscribe(first)
        while True:
            raw = await socket.receive_text()
            if len(raw) > MAX_MESSAGE:
                await connection.error("Message too large", 400)
                continue
            try:
                message = orjson.loads(raw)
            except orjson.JSONDecodeError:
                await connection.error("Invalid JSON", 400)
                continue
            if not isinstance(message, dict) or not isinstance(message.get("stream"), str):
                await connection.error("A message needs a type and a stream", 400)
                continue
            if message.get("type") == "subscribe":
                await connection.subscribe(message["stream"])
            elif message.get("type") == "unsubscribe":
                await connection.unsubscribe(message["stream"])
            else:
                await connection.error("Unknown message type", 400)
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        await connection.close_all()


def websocket_route(service: str) -> WebSocketRoute:
    return WebSocketRoute("/api/v1/streaming", endpoint)
