"""Mastodon's streaming API over server-sent events: ``/api/v1/streaming/user``,
``/public``, ``/public/local`` (and the channels Fanline has nothing for —
notifications, remote, hashtags, lists, direct — which stay open with only
heartbeats). The WebSocket endpoint is ``websocket.py``.

Built on the live hub of ``/v1`` (``live.py``): any gateway replica serves
any stream, the per-user stream limit applies, and a reconnect with
``Last-Event-ID: <status id>`` replays what it missed. Mastodon's framing:
``event: update`` with the status JSON, ``event: delete`` with the bare
status id, a ``:thump`` comment as heartbeat, ``\\n`` line ends (Mastodon.py
splits on them). Each update's status is rendered once per event and base
URL, whatever the number of streams (``render``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from fanline_shared import metrics
from fanline_shared import scopes as scope_rules
from fanline_shared.errors import InvalidInput, Unauthorized, Unavailable

from ..gateway import Gateway
from ..stream_hub import CLOSE, HEARTBEAT, Hub, Item, Stream, tweet_item
from . import entities
from .context import base, gw

SEND_TIMEOUT_S = 30.0
THUMP = ServerSentEvent(comment="thump", sep="\n").encode()


def hub(request: Request) -> Hub:
    live: Hub | None = getattr(request.app.state, "hub", None)
    if live is None:
        raise Unavailable("live streams are turned off on this gateway (FANLINE_STREAMING)", code="unavailable")
    return live


async def render(gateway: Gateway, item: Item, url: str) -> str | None:
    """The Mastodon payload of an update (the status JSON) or a delete (the
    status id), memoised on the item: rendered once per event and base URL."""
    if item.event == "delete":
        return item.sid
    if item.tweet is None:
        return None
    memo = item.memo.get(url)
    if memo is None:
        memo = item.memo[url] = asyncio.ensure_future(_render_status(gateway, item.tweet, url))
    return await asyncio.shield(memo)  # type: ignore[no-any-return]


async def _render_status(gateway: Gateway, tweet: dict[str, Any], url: str) -> str | None:
    profile = await gateway.accounts.one(str(tweet["username"]))
    if profile is None:
        return None
    return orjson.dumps(entities.status(tweet, entities.account(profile, url), url)).decode()


async def stream_token(request: Request, *, header: str | None = None) -> str | None:
    """The ``Authorization`` header, else ``access_token`` (query), else
    ``header`` (the WebSocket subprotocol) as a bearer credential."""
    auth = request.headers.get("authorization")
    if auth:
        return auth
    token = request.query_params.get("access_token") or header
    return f"Bearer {token}" if token else None


def last_event_id(request: Request) -> str | None:
    raw = (request.headers.get("last-event-id") or request.query_params.get("last_event_id") or "").strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19:
        raise InvalidInput("Last-Event-ID must be a status id", code="invalid_last_event_id")
    return raw


async def open_user(gateway: Gateway, live: Hub, authorization: str | None) -> Stream:
    if authorization is None:
        raise Unauthorized("a token is required", code="unauthorized")
    who = await gateway.signed_in(authorization, scope_rules.READ_STATUSES)
    return await live.open_home(who.username)


async def check_public(gateway: Gateway, authorization: str | None) -> None:
    """Public streams: anyone; a token given must be valid and admit reading."""
    if authorization is not None:
        (await gateway.principal(authorization)).require(scope_rules.READ_STATUSES)


async def relay(
    gateway: Gateway, live: Hub, stream: Stream | None, url: str, backlog: list[dict[str, Any]]
) -> AsyncIterator[bytes]:
    """The stream's SSE bytes: the replay, then live items (updates already
    replayed skipped). ``stream`` None: heartbeats only."""
    replayed = {str(t["id"]) for t in backlog}
    try:
        for tweet in backlog:
            data = await render(gateway, tweet_item(tweet), url)
            if data is not None:
                yield ServerSentEvent(data=data, event="update", id=str(tweet["sid"]), sep="\n").encode()
        if stream is None:
            while True:
                await asyncio.sleep(live.settings.heartbeat_s)
                yield THUMP
        while True:
            item = await stream.next()
            if item is CLOSE:
                return
            if item is HEARTBEAT:
                yield THUMP
                continue
            if item.event == "update" and item.id in replayed:
                continue
            data = await render(gateway, item, url)
            if data is None:
                continue
            metrics.STREAM_EVENTS.labels(f"mastodon-{stream.kind}", item.event).inc()
            event_id = str(item.tweet["sid"]) if item.tweet is not None else None
            yield ServerSentEvent(data=data, event=item.event, id=event_id, sep="\n").encode()
    finally:
        if stream is not None:
            live.close(stream)


async def respond(request: Request, live: Hub, stream: Stream | None) -> Response:
    gateway, url = gw(request), base(request)
    try:
        last = last_event_id(request)
        backlog = await live.backlog(stream, last, sid=True) if last and stream is not None else []
    except BaseException:
        if stream is not None:
            live.close(stream)
        raise
    return EventSourceResponse(
        relay(gateway, live, stream, url, backlog),
        ping=0,  # the hub's heartbeat timer queues HEARTBEAT (live.py)
        sep="\n",
        headers={"Cache-Control": "no-store"},
        send_timeout=SEND_TIMEOUT_S,
        background=BackgroundTask(live.close, stream) if stream is not None else None,
    )


async def user_stream(request: Request) -> Response:
    live = hub(request)
    last_event_id(request)  # a malformed id is refused before a stream is counted
    stream = await open_user(gw(request), live, await stream_token(request))
    return await respond(request, live, stream)


async def public_stream(request: Request) -> Response:
    live = hub(request)
    last_event_id(request)
    await check_public(gw(request), await stream_token(request))
    return await respond(request, live, live.open_public())


def quiet(user: bool):  # type: ignore[no-untyped-def]
    """A channel Fanline has no events for: open, heartbeats only."""

    async def handler(request: Request) -> Response:
        live, gateway, token = hub(request), gw(request), await stream_token(request)
        if user:
            if token is None:
                raise Unauthorized("a token is required", code="unauthorized")
            await gateway.signed_in(token, scope_rules.READ_STATUSES)
        else:
            await check_public(gateway, token)
        return await respond(request, live, None)

    return handler


def routes(service: str, r: Callable[..., Any]) -> list[BaseRoute]:
    from .websocket import websocket_route

    return [
        r("/api/v1/streaming/user", user_stream, ["GET"]),
        r("/api/v1/streaming/public", public_stream, ["GET"]),
        r("/api/v1/streaming/public/local", public_stream, ["GET"]),
        r("/api/v1/streaming/user/notification", quiet(True), ["GET"]),
        r("/api/v1/streaming/direct", quiet(True), ["GET"]),
        r("/api/v1/streaming/list", quiet(True), ["GET"]),
        r("/api/v1/streaming/public/remote", quiet(False), ["GET"]),
        r("/api/v1/streaming/hashtag", quiet(False), ["GET"]),
        r("/api/v1/streaming/hashtag/local", quiet(False), ["GET"]),
        websocket_route(service),
    ]
