"""The stream routes: ``GET /v1/streaming/home`` and ``/v1/streaming/public``
(api.md "Live updates — server-sent events").

Framing, client disconnects and server shutdown are sse-starlette's; this
module authenticates, applies the per-user limit, replays what a reconnecting
client missed (``Last-Event-ID``, read with the timelines' ``since``
machinery) and then relays the stream's live items (``stream_hub.py``), skipping
updates already replayed. Heartbeats (comment lines) come through the same
queue from the hub's one heartbeat timer: sse-starlette's own ping (a task and
a timer per stream) is turned off, which measurably cut the memory of an idle
stream (docs/benchmarks.md, "Live streams").
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from fanline_shared import metrics
from fanline_shared import scopes as scope_rules
from fanline_shared.domain import parse_tweet_id
from fanline_shared.errors import InvalidInput, Unauthorized, Unavailable
from fanline_shared.http_routes import route

from .gateway import Gateway
from .stream_hub import CLOSE, HEARTBEAT, Hub, Stream, tweet_item
from .webui.security import SESSION_COOKIE

# A client that stops reading for this long is dropped (it resumes later).
SEND_TIMEOUT_S = 30.0
# The heartbeat comment, encoded once for every stream.
PING = ServerSentEvent(comment="ping").encode()


def hub(request: Request) -> Hub:
    live: Hub | None = getattr(request.app.state, "hub", None)
    if live is None:
        raise Unavailable("live streams are turned off on this gateway (FANLINE_STREAMING)", code="unavailable")
    return live


async def stream_user(request: Request) -> str:
    """The bearer token's user, else the web session cookie's; ``401`` otherwise."""
    gateway: Gateway = request.app.state.gateway
    authorization = request.headers.get("authorization")
    if authorization is None:
        token = request.cookies.get(SESSION_COOKIE)
        if not token:
            raise Unauthorized("a bearer token or a session cookie is required", code="unauthorized")
        authorization = f"Bearer {token}"
    return await gateway.authenticate(authorization, scope_rules.READ_STATUSES)


def last_event_id(request: Request) -> str | None:
    """``Last-Event-ID``, else the ``last_event_id`` query parameter: a browser's
    EventSource cannot set headers on its first request, and the web pages
    resume from the newest tweet they show (its reconnects send the header)."""
    raw = request.headers.get("last-event-id")
    if raw is None:
        raw = request.query_params.get("last_event_id")
    if raw is None or raw.strip() == "":
        return None
    raw = raw.strip()
    if parse_tweet_id(raw) is None:
        raise InvalidInput("Last-Event-ID must be a tweet id", code="invalid_last_event_id")
    return raw.lower()


async def open_stream(request: Request, live: Hub, stream: Stream) -> Response:
    """Replay (if resuming), then go live. The stream is registered before the
    replay is read, so nothing posted in between is missed; an update both
    replayed and queued is sent once."""
    try:
        last = last_event_id(request)
        backlog = await live.backlog(stream, last) if last else []
    except BaseException:
        live.close(stream)
        raise
    return EventSourceResponse(
        relay(live, stream, backlog, last),
        ping=0,  # no ping task per stream: the hub's heartbeat timer queues HEARTBEAT (stream_hub.py)
        headers={"Cache-Control": "no-store"},
        send_timeout=SEND_TIMEOUT_S,
        background=BackgroundTask(live.close, stream),  # also when the body never starts
    )


async def relay(
    live: Hub, stream: Stream, backlog: list[dict[str, Any]], resumed_from: str | None = None
) -> AsyncIterator[ServerSentEvent | bytes]:
    kind = stream.kind
    replayed: set[str] | None = set() if backlog else None  # an idle stream carries no empty set
    if resumed_from is not None:
        # The client has this one (it sent its id): its live update can still
        # be on the way when the client resumes right after it was posted
        # (seen in CI: the public stream resumed from a tweet sent it again).
        replayed = (replayed or set()) | {resumed_from}
    try:
        for tweet in backlog:
            item = tweet_item(tweet)
            assert replayed is not None
            replayed.add(str(item.id))
            metrics.STREAM_EVENTS.labels(kind, "update").inc()
            yield ServerSentEvent(data=item.data, event="update", id=item.id)
        while True:
            item = await stream.next()
            if item is CLOSE:
                return
            if item is HEARTBEAT:
                yield PING
                continue
            if replayed is not None and item.id is not None and item.id in replayed:
                continue
            if item.created_at is not None:
                metrics.STREAM_UPDATE_LATENCY.observe(max(0.0, time.time() - item.created_at))
            metrics.STREAM_EVENTS.labels(kind, item.event).inc()
            yield ServerSentEvent(data=item.data, event=item.event, id=item.id)
    finally:
        live.close(stream)


async def home_stream(request: Request) -> Response:
    live = hub(request)
    owner = await stream_user(request)
    last_event_id(request)  # a malformed id is refused before a stream is counted
    return await open_stream(request, live, await live.open_home(owner))


async def public_stream(request: Request) -> Response:
    live = hub(request)
    last_event_id(request)
    return await open_stream(request, live, live.open_public())


def routes(service: str) -> list[BaseRoute]:
    return [
        route(service, "/v1/streaming/home", home_stream, ["GET"]),
        route(service, "/v1/streaming/public", public_stream, ["GET"]),
    ]
