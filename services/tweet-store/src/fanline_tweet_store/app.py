"""tweet-store composition root and internal HTTP API.

Called by the gateway (tweets, timelines) and the fan-out worker (home-timeline
rows). Storage is created in the lifespan, never at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from fanline_shared import metrics
from fanline_shared.clients.social_graph import SocialGraphClient
from fanline_shared.domain import MAX_USERNAMES_PER_LOOKUP, is_valid_username, parse_rfc3339, parse_tweet_id
from fanline_shared.errors import BadRequest, DomainError, InvalidInput, NotFound, Overloaded
from fanline_shared.http_client import BULK, PRIORITY_HEADER, caller_budget_s
from fanline_shared.http_local import Direct
from fanline_shared.http_routes import Degraded, json_response, read_json_object, route
from fanline_shared.logs import get_logger
from fanline_shared.outbox.wire import event_to_json
from fanline_shared.policies import FANOUT_PAGE
from fanline_shared.storage_service.app import storage_app

from . import __version__
from .adapters import TweetStoreStorage, build_storage
from .cache import CachedTweets
from .config import Settings
from .home_cap import HomeCap
from .hybrid import HybridHome
from .priority import ForegroundActivity
from .regeneration import Regenerator
from .service import TweetStore, tweet_json
from .sids import SidGenerator, newer_than, older_than, parse_sid, to_sid, to_timeuuid
from .write_context import PageRefused, bulk_writes, page_budget

SERVICE = Settings.SERVICE
# The services this composition root constructs peer clients for: its call
# paths. deploy/k8s/base/networkpolicy.yaml admits exactly these, and
# tests/ops/test_k8s.py derives the policies' callers from this list (and
# checks it against the clients this package constructs).
PEERS: tuple[str, ...] = ("social-graph",)  # home reads: whom the reader follows
log = get_logger(__name__)
MAX_OWNERS_PER_CALL = 10_000


def _tweet_id(raw: str) -> uuid.UUID:
    value = parse_tweet_id(raw)
    if value is None:
        raise NotFound(f"no tweet {raw[:64]}", code="tweet_not_found")
    return value


def _limit(params: Mapping[str, str]) -> int:
    try:
        value = int(params.get("limit", "20"))
    except ValueError:
        raise InvalidInput("limit must be an integer", code="invalid_limit") from None
    if not 1 <= value <= 1000:
        raise InvalidInput("limit must be 1-1000", code="invalid_limit")
    return value


def _before(params: Mapping[str, str]) -> uuid.UUID | None:
    raw = params.get("before")
    if not raw:
        return None
    value = parse_tweet_id(raw)
    if value is None:
        raise BadRequest("malformed cursor", code="invalid_cursor")
    return value


def _since(params: Mapping[str, str]) -> uuid.UUID | None:
    raw = params.get("since")
    if raw is None:
        return None
    value = parse_tweet_id(raw)
    if value is None:
        raise InvalidInput("since must be a tweet id", code="invalid_since_id")
    return value


def _sid_bound(params: Mapping[str, str], name: str) -> int | None:
    """``max_sid``/``since_sid``/``min_sid``: a status id (any 64-bit number;
    sids.py turns it into a timeuuid bound), or ``422``."""
    raw = params.get(name)
    if raw is None:
        return None
    value = parse_sid(raw)
    if value is None:
        raise InvalidInput(f"{name} must be a status id", code=f"invalid_{name}")
    return value


def _status_id(raw: str) -> uuid.UUID:
    """The minted timeuuid of a status id, or 404 (also for a tweet written
    before status ids existed: not addressable by one, see sids.py)."""
    sid = parse_sid(raw)
    value = to_timeuuid(sid) if sid is not None else None
    if value is None:
        raise NotFound(f"no status {raw[:64]}", code="tweet_not_found")
    return value


def _owners(body: dict[str, Any]) -> list[str]:
    owners = body.get("owners")
    if (
        not isinstance(owners, list)
        or len(owners) > MAX_OWNERS_PER_CALL
        or not all(isinstance(o, str) and is_valid_username(o) for o in owners)
    ):
        raise InvalidInput("owners must be a list of usernames", code="invalid_owners")
    return owners


def open_storage(settings: Settings, activity: ForegroundActivity | None = None) -> TweetStoreStorage:
    """The storage these settings describe (not yet started), its tweets
    behind the hydration cache unless that is turned off. Fan-out writes run
    under an adaptive limit, stricter while ``activity`` says user-facing
    requests are served."""
    storage = build_storage(settings.storage, settings.home, activity.busy if activity is not None else lambda: False)
    if settings.tweet_cache.enabled:
        storage = dataclasses.replace(storage, tweets=CachedTweets(storage.tweets, settings.tweet_cache))
    return storage


def create_app(settings: Settings, storage: TweetStoreStorage | None = None) -> Starlette:
    activity = ForegroundActivity(settings.fanout_yield)
    fg = activity.foreground  # user-facing routes: the fan-out yields to them

    def store(request: Request) -> TweetStore:
        return request.app.state.store  # type: ignore[no-any-return]

    @contextlib.asynccontextmanager
    async def running(app: Starlette, s: TweetStoreStorage) -> AsyncIterator[None]:
        social = SocialGraphClient(
            SERVICE, settings.peers.social_graph_url, settings.peers.timeout_s, token=settings.peers.internal_token
        )
        cap = HomeCap(s.home, settings.home_max_rows)
        hybrid = HybridHome(
            s.home, s.tweets, s.large, social.following_all, retention_s=settings.home.retention_s, policy=settings.hybrid
        )
        ids = SidGenerator(s.slots, ttl_s=settings.id_slot_lease_s)
        await ids.start()
        regenerator = Regenerator(
            s.home,
            s.tweets,
            hybrid.following,
            retention_s=settings.home.retention_s,
            max_rows=settings.home_max_rows,
            on_done=lambda owner: cap.schedule([owner]),
        )
        app.state.social = social
        app.state.cap = cap
        app.state.store = TweetStore(
            s,
            retention_s=settings.home.retention_s,
            idempotency_ttl_s=settings.idempotency_ttl_s,
            merge_count=settings.follow_merge_count,
            hybrid=hybrid,
            cap=cap,
            regenerator=regenerator,
            ids=ids,
        )
        cap.start()
        try:
            yield
        finally:
            await regenerator.close()
            await ids.close()
            await cap.stop()
            await social.close()

    async def create_tweet(request: Request) -> Response:
        body = await read_json_object(request)
        key = body.get("idempotency_key")
        if key is not None and not isinstance(key, str):
            raise InvalidInput("idempotency_key must be a string", code="invalid_idempotency_key")
        username = body.get("username")
        if not isinstance(username, str):
            raise InvalidInput("username required", code="invalid_username")
        tweet, created, event = await store(request).post(username, body.get("body"), key)
        log.info("tweet.stored", tweet_id=str(tweet.id), author=tweet.username, created=created, event_id=str(event.id))
        return json_response(
            {"tweet": tweet_json(tweet), "created": created, "event": event_to_json(event)},
            201 if created else 200,
        )

    async def get_tweet(request: Request) -> Response:
        tweet = await store(request).get(_tweet_id(request.path_params["tweet_id"]))
        return json_response(tweet_json(tweet))

    async def get_status(request: Request) -> Response:
        tweet = await store(request).get(_status_id(request.path_params["sid"]))
        return json_response(tweet_json(tweet))

    async def delete_status(request: Request) -> Response:
        actor = request.query_params.get("actor", "")
        tweet_id = _status_id(request.path_params["sid"])
        event = await store(request).delete(tweet_id, actor)
        log.info("tweet.deleted", tweet_id=str(tweet_id), event_id=str(event.id))
        return json_response({"event": event_to_json(event)})

    async def delete_tweet(request: Request) -> Response:
        actor = request.query_params.get("actor", "")
        event = await store(request).delete(_tweet_id(request.path_params["tweet_id"]), actor)
        log.info("tweet.deleted", tweet_id=request.path_params["tweet_id"], event_id=str(event.id))
        return json_response({"event": event_to_json(event)})

    async def timeline_page(kind: str, owner: str | None, params: Mapping[str, str]) -> dict[str, Any]:
        """A page of a timeline, as its route answers it (decoded): the route's
        handler and the plain call offered to the gateway in this process."""
        before, since, after = _before(params), _since(params), None
        # Mastodon-style bounds by status id (the gateway's /api/v1 timelines).
        if (max_sid := _sid_bound(params, "max_sid")) is not None:
            before = older_than(max_sid)
        if (since_sid := _sid_bound(params, "since_sid")) is not None:
            since = newer_than(since_sid)
        if (min_sid := _sid_bound(params, "min_sid")) is not None:
            after = newer_than(min_sid)
        items, nxt = await app.state.store.page(kind, owner, _limit(params), before, since, after)
        body: dict[str, Any] = {"items": [tweet_json(t) for t in items], "next": nxt}
        if nxt is not None:
            body["next_sid"] = str(to_sid(uuid.UUID(nxt)))
        return body

    def timeline(kind: str):  # type: ignore[no-untyped-def]
        async def handler(request: Request) -> Response:
            return json_response(await timeline_page(kind, request.path_params.get("username"), request.query_params))

        return handler

    def timeline_call(kind: str) -> Callable[[str | None, Mapping[str, str]], Awaitable[dict[str, Any]]]:
        async def call(owner: str | None, params: Mapping[str, str]) -> dict[str, Any]:
            with activity.serving():  # user-facing, as the route's fg()
                return await timeline_page(kind, owner, params)

        return call

    async def counts(request: Request) -> Response:
        names = [n for n in request.query_params.get("usernames", "").split(",") if n]
        if len(names) > MAX_USERNAMES_PER_LOOKUP:
            raise InvalidInput("too many usernames", code="invalid_usernames")
        return json_response({"counts": await store(request).counts(names)})

    async def within_caller_budget(request: Request, work: Awaitable[None]) -> None:
        """``work`` (a fan-out page) within the caller's budget
        (``policies.FANOUT_PAGE``); past it, cancelled and ``Overloaded`` (the
        worker backs off and sends the page again: rows are upserts)."""
        budget = caller_budget_s(request.headers, default_s=FANOUT_PAGE.seconds)
        timer = asyncio.timeout(budget)
        try:
            with page_budget(budget):
                async with timer:
                    await work
        except PageRefused as refused:
            # Refused before any row was written: the writes queued here
            # would not let this page finish in time (limiter.write_all).
            metrics.FANOUT_PAGES_EXPIRED.labels(request.url.path, "refused").inc()
            raise Overloaded(
                f"fan-out page refused: {refused}; send it again later", retry_after=FANOUT_PAGE.retry_after_s, shed_by=SERVICE
            ) from None
        except TimeoutError:
            if not timer.expired():
                raise  # a timeout of the work itself, not our budget
            metrics.FANOUT_PAGES_EXPIRED.labels(request.url.path, "expired").inc()
            raise Overloaded(
                f"fan-out page not written within {budget:.3g} s (its caller's budget): writes are "
                "queued here; send it again later",
                retry_after=FANOUT_PAGE.retry_after_s,
                shed_by=SERVICE,
            ) from None

    async def home_add(request: Request) -> Response:
        body = await read_json_object(request, max_bytes=1024 * 1024)
        author = body.get("author")
        if not isinstance(author, str) or not is_valid_username(author):
            raise InvalidInput("author must be a username", code="invalid_author")
        tweet_id, owners = _tweet_id(str(body.get("tweet_id"))), _owners(body)
        check = body.get("check", False)
        if not isinstance(check, bool):
            raise InvalidInput("check must be true or false", code="invalid_check")
        # A slice of a large fan-out yields to every other fan-out write.
        is_bulk = request.headers.get(PRIORITY_HEADER) == BULK
        with bulk_writes() if is_bulk else contextlib.nullcontext():
            await within_caller_budget(request, store(request).home_add(tweet_id, author, owners, check=check))
        # One line per request (a page of up to FANLINE_FANOUT_PAGE_SIZE rows), never per row.
        log.info("home.rows_written", tweet_id=str(tweet_id), author=author, rows=len(owners), bulk=is_bulk)
        return Response(status_code=204)

    async def home_remove(request: Request) -> Response:
        body = await read_json_object(request, max_bytes=1024 * 1024)
        owners = _owners(body)
        await within_caller_budget(request, store(request).home_remove(_tweet_id(str(body.get("tweet_id"))), owners))
        log.info("home.rows_removed", tweet_id=str(body.get("tweet_id")), rows=len(owners))
        return Response(status_code=204)

    async def regeneration(request: Request) -> Response:
        body = await read_json_object(request)
        try:
            returned_at = parse_rfc3339(str(body.get("returned_at")))
        except ValueError:
            raise InvalidInput("returned_at must be an RFC 3339 time", code="invalid_returned_at") from None
        done = await store(request).regeneration_done(request.path_params["username"], returned_at)
        return json_response({"done": done})

    async def register_large(request: Request) -> Response:
        body = await read_json_object(request)
        author = body.get("author")
        if not isinstance(author, str) or not is_valid_username(author):
            raise InvalidInput("author must be a username", code="invalid_author")
        await store(request).register_large_account(author)
        return Response(status_code=204)

    async def home_merge(request: Request) -> Response:
        body = await read_json_object(request)
        author = str(body.get("author", ""))
        merged = await store(request).home_merge(request.path_params["username"], author)
        return json_response({"merged": merged})

    async def home_purge(request: Request) -> Response:
        body = await read_json_object(request)
        author = str(body.get("author", ""))
        removed = await store(request).home_purge(request.path_params["username"], author)
        return json_response({"removed": removed})

    reached = {"social-graph": False}

    async def check_social_graph() -> None:
        """Home reads need social-graph (large accounts merged at read time,
        reads past the stored rows, regeneration): a replica that has never
        reached it -- a NetworkPolicy or a URL that is wrong -- is not ready,
        so a rollout with that mistake stalls instead of serving home reads
        that fail. Once reached, an outage of social-graph only marks this
        replica degraded: tweets, userlines and the public timeline do not
        need it, and taking every tweet-store out of its Service would turn
        one service's outage into two (docs/operations/secure.md, "Readiness")."""
        try:
            await app.state.social.call("GET", "/healthz", operation="healthz", policy=None)
        except DomainError as exc:
            if reached["social-graph"]:
                raise Degraded(exc.message) from None
            raise
        reached["social-graph"] = True

    # Starlette tries routes in order: the hottest first (home reads are half
    # of the standard mix; a miss costs a regex match per route before it).
    routes = [
        route(SERVICE, "/internal/home/{username}", fg(timeline("home")), ["GET"]),
        route(SERVICE, "/internal/userline/{username}", fg(timeline("user")), ["GET"]),
        route(SERVICE, "/internal/tweets", fg(create_tweet), ["POST"]),
        route(SERVICE, "/internal/home/add", home_add, ["POST"]),
        route(SERVICE, "/internal/tweets/{tweet_id}", fg(get_tweet), ["GET"]),
        route(SERVICE, "/internal/tweets/{tweet_id}", fg(delete_tweet), ["DELETE"]),
        route(SERVICE, "/internal/statuses/{sid}", fg(get_status), ["GET"]),
        route(SERVICE, "/internal/statuses/{sid}", fg(delete_status), ["DELETE"]),
        route(SERVICE, "/internal/public", fg(timeline("public")), ["GET"]),
        route(SERVICE, "/internal/home/remove", home_remove, ["POST"]),
        route(SERVICE, "/internal/home/{username}/merge", home_merge, ["POST"]),
        route(SERVICE, "/internal/large-accounts", register_large, ["POST"]),
        route(SERVICE, "/internal/home/{username}/regeneration", fg(regeneration), ["POST"]),
        route(SERVICE, "/internal/home/{username}/purge", home_purge, ["POST"]),
        route(SERVICE, "/internal/counts", fg(counts), ["GET"]),
    ]
    app = storage_app(
        settings,
        __version__,
        routes,
        open_storage=lambda: storage or open_storage(settings, activity),
        running=running,
        checks={"social-graph": check_social_graph},
    )
    app.state.activity = activity  # read by tests: which routes count as user-facing
    # The timelines as plain calls for the gateway when it hosts this service
    # (http_local.Direct): the same answer without a request, a response or JSON.
    templates = {"home": "/internal/home/{username}", "user": "/internal/userline/{username}", "public": "/internal/public"}
    calls = {f"timeline_{k}": Direct(SERVICE, "GET", t, timeline_call(k)) for k, t in templates.items()}
    app.state.in_process = dataclasses.replace(app.state.in_process, calls=calls)
    return app
