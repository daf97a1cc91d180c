"""social-graph composition root and internal HTTP API.

Only the gateway and the fan-out worker call this API; it is not public. The
storage adapters are created in the lifespan, never at import time.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from argon2 import PasswordHasher
from argon2.profiles import RFC_9106_LOW_MEMORY
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from fanline_shared.domain import MAX_USERNAMES_PER_LOOKUP, to_rfc3339
from fanline_shared.errors import BadRequest, InvalidInput
from fanline_shared.http_routes import json_response, read_json_object, route
from fanline_shared.logs import get_logger
from fanline_shared.outbox.wire import event_to_json
from fanline_shared.storage_service.app import storage_app

from . import __version__
from .adapters import SocialGraphStorage, build_storage
from .config import Settings
from .hashing import Argon2Budget, slots_for
from .oauth import OAuth
from .oauth_routes import oauth_routes
from .service import SocialGraph, edges_json

SERVICE = Settings.SERVICE
# The services this composition root constructs peer clients for: its call
# paths. deploy/k8s/base/networkpolicy.yaml admits exactly these, and
# tests/ops/test_k8s.py derives the policies' callers from this list (and
# checks it against the clients this package constructs).
PEERS: tuple[str, ...] = ()
log = get_logger(__name__)
INTERNAL_PAGE_MAX = 10_000  # the fan-out worker pages followers in big pages


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _int_param(request: Request, name: str, default: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{name} must be an integer", code=f"invalid_{name}") from None
    if not 1 <= value <= maximum:
        raise InvalidInput(f"{name} must be 1-{maximum}", code=f"invalid_{name}")
    return value


def open_storage(settings: Settings) -> SocialGraphStorage:
    """The storage these settings describe (not yet started)."""
    return build_storage(settings.storage)


def create_app(settings: Settings, storage: SocialGraphStorage | None = None) -> Starlette:
    """Build the app; ``storage`` may be injected by tests."""

    def graph(request: Request) -> SocialGraph:
        return request.app.state.graph  # type: ignore[no-any-return]

    @contextlib.asynccontextmanager
    async def running(app: Starlette, store: SocialGraphStorage) -> AsyncIterator[None]:
        hasher = PasswordHasher(
            time_cost=settings.argon2_time_cost,
            memory_cost=settings.argon2_memory_kib,
            parallelism=settings.argon2_parallelism,
            hash_len=RFC_9106_LOW_MEMORY.hash_len,
            salt_len=RFC_9106_LOW_MEMORY.salt_len,
        )
        budget = Argon2Budget(
            slots_for(settings.argon2_memory_budget_mib, settings.argon2_memory_kib), settings.argon2_queue_wait_s
        )
        app.state.graph = SocialGraph(
            store, hasher, settings.session_ttl_s, budget, settings.inactive_after_s, settings.oauth_token_ttl_s
        )
        app.state.oauth = OAuth(store, app.state.graph)
        try:
            yield
        finally:
            await app.state.graph.activity.close()
            budget.close()

    async def create_user(request: Request) -> Response:
        body = await read_json_object(request)
        user = await graph(request).sign_up(body.get("username"), body.get("password"), body.get("email"))
        profile = (await graph(request).profiles([user.username]))[0]
        return json_response(profile, 201)

    async def get_user(request: Request) -> Response:
        return json_response(await graph(request).profile(request.path_params["username"]))

    async def list_users(request: Request) -> Response:
        if "email" in request.query_params:
            # Who logs in with this email (the gateway counts failed log-ins per user).
            return json_response({"items": await graph(request).profiles_by_email(request.query_params["email"])})
        if "prefix" in request.query_params:
            limit = _int_param(request, "limit", 20, 100)
            return json_response({"items": await graph(request).search(request.query_params["prefix"], limit)})
        raw = request.query_params.get("usernames", "")
        names = [n.strip() for n in raw.split(",") if n.strip()]
        if len(names) > MAX_USERNAMES_PER_LOOKUP:
            raise InvalidInput(f"at most {MAX_USERNAMES_PER_LOOKUP} usernames", code="invalid_usernames")
        return json_response({"items": await graph(request).profiles(names)})

    async def login(request: Request) -> Response:
        body = await read_json_object(request)
        return json_response(await graph(request).login(body.get("username"), body.get("password")))

    async def current_session(request: Request) -> Response:
        s = await graph(request).session(_bearer(request))
        grant = s.grant
        return json_response(
            {
                "username": grant.username,
                "returned_at": to_rfc3339(s.returned_at) if s.returned_at else None,
                "scopes": grant.scopes,
                "client_id": grant.client_id,
                "kind": grant.kind,
                "expires_at": to_rfc3339(grant.expires_at) if grant.expires_at else None,
                "cache_s": s.cache_s,
            }
        )

    async def accounts(request: Request) -> Response:
        raw = request.query_params.get("ids", "")
        ids = [int(part) for part in raw.split(",") if part.isdigit() and len(part) <= 19]
        if len(ids) > MAX_USERNAMES_PER_LOOKUP:
            raise InvalidInput(f"at most {MAX_USERNAMES_PER_LOOKUP} ids", code="invalid_ids")
        return json_response({"items": await graph(request).profiles_by_id(ids)})

    async def relationships(request: Request) -> Response:
        body = await read_json_object(request)
        actor, targets = body.get("actor"), body.get("targets")
        if not isinstance(actor, str) or not isinstance(targets, list) or len(targets) > MAX_USERNAMES_PER_LOOKUP:
            raise InvalidInput("actor and targets (at most 100) are required", code="invalid_body")
        return json_response({"items": await graph(request).relationships(actor, [str(t) for t in targets])})

    async def logout(request: Request) -> Response:
        event = await graph(request).logout(_bearer(request))
        return json_response({"event": event_to_json(event)})

    async def follow(request: Request) -> Response:
        p = request.path_params
        created, event = await graph(request).follow(p["username"], p["target"])
        log.info("follow.stored", follower=p["username"], followee=p["target"], changed=created, event_id=str(event.id))
        return json_response({"changed": created, "event": event_to_json(event)})

    async def unfollow(request: Request) -> Response:
        p = request.path_params
        removed, event = await graph(request).unfollow(p["username"], p["target"])
        log.info("unfollow.stored", follower=p["username"], followee=p["target"], changed=removed, event_id=str(event.id))
        return json_response({"changed": removed, "event": event_to_json(event)})

    async def is_following(request: Request) -> Response:
        p = request.path_params
        return json_response({"following": await graph(request).is_following(p["username"], p["target"])})

    async def reconcile(request: Request) -> Response:
        p = request.path_params
        return json_response({"following": await graph(request).reconcile(p["username"], p["target"])})

    def edges_handler(direction: str):  # type: ignore[no-untyped-def]
        async def handler(request: Request) -> Response:
            limit = _int_param(request, "limit", 20, INTERNAL_PAGE_MAX)
            after = request.query_params.get("after") or None
            if after is not None and len(after) > 15:
                raise BadRequest("invalid cursor", code="invalid_cursor")
            username = request.path_params["username"]
            items, nxt = await graph(request).edges(username, direction, limit, after)
            if direction == "followers-active":
                # A fan-out's page of recipients (inactive followers are not in it).
                log.info("followers.page", author=username, followers=len(items), more=nxt is not None)
            body: dict[str, Any] = {"items": edges_json(items), "next": nxt}
            if request.query_params.get("counts") == "1":
                # The fan-out's first page carries the author's follower count
                # (large account? sliced?): one call instead of two.
                body["followers_count"], body["following_count"] = await graph(request).follow_counts(username)
            return json_response(body)

        return handler

    routes = [
        # Starlette tries routes in order: the hottest first (session checks, the
        # fan-out's follower pages and reconciles; a miss costs a regex match).
        route(SERVICE, "/internal/sessions/current", current_session, ["GET"]),
        route(SERVICE, "/internal/users/{username}/followers-active", edges_handler("followers-active"), ["GET"]),
        route(SERVICE, "/internal/users/{username}/following/{target}/reconcile", reconcile, ["POST"]),
        route(SERVICE, "/internal/users", create_user, ["POST"]),
        route(SERVICE, "/internal/users", list_users, ["GET"]),
        route(SERVICE, "/internal/users/{username}", get_user, ["GET"]),
        route(SERVICE, "/internal/users/{username}/following", edges_handler("following"), ["GET"]),
        route(SERVICE, "/internal/users/{username}/followers", edges_handler("followers"), ["GET"]),
        route(SERVICE, "/internal/users/{username}/following/{target}", follow, ["PUT"]),
        route(SERVICE, "/internal/users/{username}/following/{target}", unfollow, ["DELETE"]),
        route(SERVICE, "/internal/users/{username}/following/{target}", is_following, ["GET"]),
        route(SERVICE, "/internal/sessions", login, ["POST"]),
        route(SERVICE, "/internal/sessions/current", logout, ["DELETE"]),
        route(SERVICE, "/internal/accounts", accounts, ["GET"]),
        route(SERVICE, "/internal/relationships", relationships, ["POST"]),
        *oauth_routes(SERVICE),
    ]
    return storage_app(settings, __version__, routes, open_storage=lambda: storage or open_storage(settings), running=running)
