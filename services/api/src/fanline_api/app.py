"""The gateway's composition root and public HTTP routes (see api.md).

Clients (peers, Kafka producer, relay) are created in the lifespan and handed
to requests through ``app.state``; nothing connects at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from fanline_shared import metrics
from fanline_shared import scopes as scope_rules
from fanline_shared.admission import AdmissionMiddleware
from fanline_shared.clients.social_graph import SocialGraphClient
from fanline_shared.clients.tweet_store import TweetStoreClient
from fanline_shared.domain import validate_limit
from fanline_shared.errors import BadRequest, InvalidInput, Unavailable
from fanline_shared.http_routes import EXCEPTION_HANDLERS, Degraded, json_response, ops_routes, read_json_object, route
from fanline_shared.kafka import EventPublisher, ensure_topics
from fanline_shared.logs import RequestIdMiddleware
from fanline_shared.outbox import OutboxRelay
from fanline_shared.policies import STARTUP_CONNECT, retry

from . import __version__, stream_routes, webui
from .accounts import AccountCache
from .config import Settings
from .cursors import CursorCodec
from .deadline import bounded
from .edge import StripInternalHeaders
from .gateway import Gateway
from .mastodon.cors import ApiCorsMiddleware
from .mastodon.routes import routes as mastodon_routes
from .openapi import openapi_document
from .ratelimit import ADDRESS_STATE, Limiter, LoginGuard, RateLimitMiddleware
from .sessions import SessionCache
from .stream_events import EventTap
from .stream_hub import Hub
from .v1 import v1_page, v1_tweet, v1_user

SERVICE = "api"
# The services this composition root constructs peer clients for: its call
# paths. deploy/k8s/base/networkpolicy.yaml admits exactly these, and
# tests/ops/test_k8s.py derives the policies' callers from this list (and
# checks it against the clients this package constructs).
PEERS: tuple[str, ...] = ("social-graph", "tweet-store")
# Retry-After of a 206 while a returning user's home timeline is regenerated.
REGENERATION_RETRY_AFTER_S = 1
# How long /readyz waits for Kafka: within the probes' 3 s timeout (deploy/k8s).
KAFKA_READY_WAIT_S = 2.0
log = logging.getLogger(__name__)


def gw(request: Request) -> Gateway:
    return request.app.state.gateway  # type: ignore[no-any-return]


# --- query parameters -------------------------------------------------------------


def query(request: Request, name: str) -> str | None:
    """One query parameter; given twice it is ambiguous, so refused (422 for
    ``limit`` and the lists, 400 for a cursor) instead of taking either."""
    values = request.query_params.getlist(name)
    if len(values) > 1:
        if name == "cursor":
            raise BadRequest("cursor given more than once", code="invalid_cursor")
        raise InvalidInput(f"{name} given more than once", code=f"invalid_{name}")
    return values[0] if values else None


def limit_param(request: Request) -> int:
    raw = query(request, "limit")
    if raw is not None and raw == "":
        raise InvalidInput("limit must be an integer 1-100", code="invalid_limit")
    return validate_limit(raw)


# --- users and sessions ---------------------------------------------------------


async def create_user(request: Request) -> Response:
    return json_response(v1_user(await gw(request).sign_up(await read_json_object(request))), 201)


async def get_user(request: Request) -> Response:
    return json_response(v1_user(await gw(request).user(request.path_params["username"])))


async def list_users(request: Request) -> Response:
    limit = limit_param(request)  # checked even where unused: 1-100 or 422
    prefix, usernames = query(request, "prefix"), query(request, "usernames")
    if prefix is not None:
        return json_response({"items": [v1_user(u) for u in await gw(request).search(prefix, limit)]})
    return json_response({"items": [v1_user(u) for u in await gw(request).users(usernames)]})


def client_address(request: Request) -> str:
    """The client's address as the rate limiter decided it (trusted proxies)."""
    return str(getattr(request.state, ADDRESS_STATE, None) or "unknown")


async def create_session(request: Request) -> Response:
    session = await gw(request).login(await read_json_object(request), client_address(request))
    return json_response({k: session[k] for k in ("token", "username", "expires_at")})


async def delete_session(request: Request) -> Response:
    await gw(request).logout(request.headers.get("authorization"))
    return Response(status_code=204)


# --- social graph ------------------------------------------------------------------


def edges(direction: str):  # type: ignore[no-untyped-def]
    async def handler(request: Request) -> Response:
        limit = limit_param(request)
        page = await gw(request).edges(request.path_params["username"], direction, limit, query(request, "cursor"))
        return json_response(page)

    return handler


def change_follow(follow: bool):  # type: ignore[no-untyped-def]
    async def handler(request: Request) -> Response:
        g = gw(request)
        actor = await g.authenticate(request.headers.get("authorization"), scope_rules.WRITE_FOLLOWS)
        p = request.path_params
        await g.follow(actor, p["username"], p["target"], follow=follow)
        return Response(status_code=204)

    return handler


# --- tweets and timelines ----------------------------------------------------------


async def post_tweet(request: Request) -> Response:
    g = gw(request)
    actor = await g.authenticate(request.headers.get("authorization"), scope_rules.WRITE_STATUSES)
    body = await read_json_object(request)
    tweet, created = await g.post(actor, body, request.headers.get("idempotency-key"))
    return json_response(v1_tweet(tweet), 201 if created else 200, {"Location": f"/v1/tweets/{tweet['id']}"})


async def get_tweet(request: Request) -> Response:
    return json_response(v1_tweet(await gw(request).tweet(request.path_params["tweet_id"])))


async def delete_tweet(request: Request) -> Response:
    g = gw(request)
    actor = await g.authenticate(request.headers.get("authorization"), scope_rules.WRITE_STATUSES)
    await g.delete(actor, request.path_params["tweet_id"])
    return Response(status_code=204)


def timeline(kind: str):  # type: ignore[no-untyped-def]
    async def handler(request: Request) -> Response:
        g = gw(request)
        owner = request.path_params.get("username")
        limit = limit_param(request)
        cursor = query(request, "cursor")
        since_id = query(request, "since_id")
        if kind == "home":
            page, regenerating = await g.home_timeline(request.headers.get("authorization"), limit, cursor, since_id)
            if regenerating:
                # api.md: 206 with the body shape of 200 while it runs.
                return json_response(v1_page(page), 206, {"Retry-After": str(REGENERATION_RETRY_AFTER_S)})
            return json_response(v1_page(page))
        return json_response(v1_page(await g.timeline(kind, owner, limit, cursor, since_id)))

    return handler


async def openapi(_: Request) -> Response:
    return json_response(openapi_document(__version__))


# --- composition root -----------------------------------------------------------------


def create_app(settings: Settings) -> Starlette:
    limiter = Limiter(settings.rate_limits)
    logins = LoginGuard(limiter) if settings.rate_limits.enabled else None

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        peers = settings.peers
        social = SocialGraphClient(SERVICE, peers.social_graph_url, peers.timeout_s, token=peers.internal_token)
        tweets = TweetStoreClient(SERVICE, peers.tweet_store_url, peers.timeout_s, token=peers.internal_token)
        publisher = EventPublisher(settings.kafka)
        relay = OutboxRelay(
            publisher,
            {"tweet-store": tweets, "social-graph": social},
            sweep_interval_s=settings.relay_interval_s,
            read_every_s=settings.relay_read_s,
            stale_after_ms=settings.relay_stale_after_ms,
            ack_when_applied=settings.kafka.ack_when_applied,
            # One relay per outbox across the replicas (the rest stand by).
            lease_ttl_s=settings.relay_lease_s,
        )
        sessions = SessionCache(social.grant, settings.session_cache_s)
        app.state.gateway = Gateway(
            social,
            tweets,
            publisher,
            relay,
            CursorCodec(settings.cursor_secret),
            logins,
            sessions,
            accounts=AccountCache(social, tweets, ttl_s=settings.account_cache_s),
            registrations=settings.registrations,
        )
        # Live streams (stream_hub.py) and revocations of cached sessions (sessions.py):
        # every replica taps the whole events topic (stream_events.py).
        hub = Hub(settings.live, social, tweets) if settings.live.enabled else None
        tap = EventTap(settings.kafka, hub, sessions if sessions.enabled else None)
        app.state.hub = hub
        if hub is not None:
            hub.start()
        if hub is not None or sessions.enabled:
            tap.start()
        metrics.set_build_info(SERVICE, __version__)
        topics_task = asyncio.create_task(_ensure_topics(settings)) if settings.ensure_topics else None
        relay.start()
        try:
            yield
        finally:
            if topics_task is not None:
                topics_task.cancel()
            await tap.stop()
            if hub is not None:
                await hub.close_all()
            await app.state.gateway.drain(settings.kafka.request_timeout_s)
            await relay.stop()
            await publisher.close()
            await social.close()
            await tweets.close()

    async def ready_peer(client: SocialGraphClient | TweetStoreClient) -> None:
        await client.call("GET", "/healthz", operation="healthz", policy=None)

    async def check_social() -> None:
        await ready_peer(app.state.gateway.social)

    async def check_tweets() -> None:
        await ready_peer(app.state.gateway.tweets)

    kafka_ping: list[asyncio.Task[None]] = []  # the one ping in flight, shared by concurrent probes

    async def check_kafka() -> None:
        """Kafka answers within ``KAFKA_READY_WAIT_S``. Unless the operator made
        it required (``FANLINE_READY_REQUIRES_KAFKA``), a failure only marks
        the gateway degraded: posts wait in the outbox meanwhile, so taking
        every replica out of its Service would turn a Kafka blip into an
        outage. The ping is never cancelled (a producer start cut short would
        leak), only waited for a while."""
        if not kafka_ping or kafka_ping[0].done():
            task = asyncio.create_task(app.state.gateway.publisher.ping())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no "never retrieved" log
            kafka_ping[:] = [task]
        try:
            await asyncio.wait_for(asyncio.shield(kafka_ping[0]), KAFKA_READY_WAIT_S)
        except Exception as exc:
            if settings.ready_requires_kafka:
                raise
            raise Degraded(str(exc) or "kafka did not answer in time") from None

    # Every public route answers within its deadline (503 + Retry-After past it).
    deadline, password_deadline = settings.request_deadline, settings.password_deadline
    # Starlette tries routes in order, a regular expression each: the reads
    # and writes of the standard mix come first (GET /v1/timeline was the
    # 14th, 14 matches per request). No two of these paths overlap, so the
    # order changes only how soon a request finds its route.
    routes: list[BaseRoute] = [
        route(SERVICE, "/v1/timeline", bounded(timeline("home"), deadline), ["GET"]),
        route(SERVICE, "/v1/tweets", bounded(post_tweet, deadline), ["POST"]),
        route(SERVICE, "/v1/users", bounded(create_user, password_deadline), ["POST"]),
        route(SERVICE, "/v1/users", bounded(list_users, deadline), ["GET"]),
        route(SERVICE, "/v1/users/{username}", bounded(get_user, deadline), ["GET"]),
        route(SERVICE, "/v1/users/{username}/following", bounded(edges("following"), deadline), ["GET"]),
        route(SERVICE, "/v1/users/{username}/followers", bounded(edges("followers"), deadline), ["GET"]),
        route(SERVICE, "/v1/users/{username}/following/{target}", bounded(change_follow(True), deadline), ["PUT"]),
        route(SERVICE, "/v1/users/{username}/following/{target}", bounded(change_follow(False), deadline), ["DELETE"]),
        route(SERVICE, "/v1/users/{username}/tweets", bounded(timeline("user"), deadline), ["GET"]),
        route(SERVICE, "/v1/sessions", bounded(create_session, password_deadline), ["POST"]),
        route(SERVICE, "/v1/sessions/current", bounded(delete_session, deadline), ["DELETE"]),
        route(SERVICE, "/v1/tweets/{tweet_id}", bounded(get_tweet, deadline), ["GET"]),
        route(SERVICE, "/v1/tweets/{tweet_id}", bounded(delete_tweet, deadline), ["DELETE"]),
        route(SERVICE, "/v1/public", bounded(timeline("public"), deadline), ["GET"]),
        *stream_routes.routes(SERVICE),
        # The Mastodon-compatible client API (mastodon/, docs/mastodon.md).
        *mastodon_routes(SERVICE, deadline, password_deadline),
        Route("/openapi.json", openapi, methods=["GET"]),
        *ops_routes(SERVICE, {"social-graph": check_social, "tweet-store": check_tweets, "kafka": check_kafka}, public=True),
    ]
    # --- web pages (webui/): server-rendered HTML on the same Gateway, plus /static ---
    routes += webui.routes(settings)
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=EXCEPTION_HANDLERS)
    app.state.public_url = settings.public_url
    # Always installed: with limits off it still records the client address.
    app.add_middleware(RateLimitMiddleware, limiter=limiter, session_cookie=webui.SESSION_COOKIE)
    # Browser-based Mastodon clients call the API paths from other origins.
    app.add_middleware(ApiCorsMiddleware)
    # Outermost (added last): past capacity a request is refused before any
    # work, the rate limiter's token lookup included.
    app.add_middleware(AdmissionMiddleware, policy=settings.admission, service=SERVICE)
    # The request id (a client's well-formed X-Request-Id, else a new one) is
    # bound before anything logs and returned on every answer.
    app.add_middleware(RequestIdMiddleware)
    # Outermost: no X-Fanline-* header from outside reaches anything (edge.py).
    app.add_middleware(StripInternalHeaders)
    return app


async def _ensure_topics(settings: Settings) -> None:
    """Create the topics once the broker answers (start-up does not wait)."""
    try:
        counts = await retry(STARTUP_CONNECT, lambda: ensure_topics(settings.kafka), retry_on=(Unavailable,))
        log.info("topics ready: %s", counts)
    except Unavailable as exc:
        log.warning("could not create topics yet: %s", exc)
    except asyncio.CancelledError:
        pass
