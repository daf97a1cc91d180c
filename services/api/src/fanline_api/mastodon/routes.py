"""Every route of the Mastodon-compatible API, in the order Starlette
matches them (fixed paths before ``{id}``), each a thin handler run under
the request deadline with its errors in Mastodon's shape."""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from fanline_shared.errors import DomainError
from fanline_shared.http_routes import route
from fanline_shared.policies import RequestDeadline

from ..deadline import bounded
from . import accounts, images, instance, oauth, statuses, streaming, stubs, timelines
from .errors import Handler, mastodon, mastodon_error, not_found, oauth_error

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]


def routes(service: str, deadline: RequestDeadline, password_deadline: RequestDeadline) -> list[BaseRoute]:
    def r(
        path: str,
        handler: Handler,
        methods: list[str],
        limit: RequestDeadline = deadline,
        render: Callable[[DomainError], Response] = mastodon_error,
    ) -> Route:
        return route(service, path, mastodon(bounded(handler, limit), render=render), methods)

    out: list[BaseRoute] = [
        r("/.well-known/oauth-authorization-server", oauth.metadata, ["GET"]),
        r("/oauth/token", oauth.token, ["POST"], password_deadline, oauth_error),
        r("/oauth/revoke", oauth.revoke, ["POST"], deadline, oauth_error),
        r("/api/v1/apps", oauth.create_app, ["POST"]),
        r("/api/v1/apps/verify_credentials", oauth.verify_app, ["GET"]),
        r("/api/v1/instance", instance.v1, ["GET"]),
        r("/api/v2/instance", instance.v2, ["GET"]),
        r("/api/v1/instance/extended_description", instance.extended_description, ["GET"]),
        r("/api/v1/streaming/health", instance.streaming_health, ["GET"]),
        # accounts (fixed paths before {id})
        r("/api/v1/accounts", accounts.register, ["POST"], password_deadline),
        r("/api/v1/accounts", accounts.show_many, ["GET"]),
        r("/api/v1/accounts/verify_credentials", accounts.verify_credentials, ["GET"]),
        r("/api/v1/accounts/update_credentials", accounts.update_credentials, ["PATCH"]),
        r("/api/v1/accounts/lookup", accounts.lookup, ["GET"]),
        r("/api/v1/accounts/relationships", accounts.relationships, ["GET"]),
        r("/api/v1/accounts/search", accounts.search_v1, ["GET"]),
        r("/api/v1/accounts/familiar_followers", accounts.familiar_followers, ["GET"]),
        r("/api/v1/accounts/{id}", accounts.show, ["GET"]),
        r("/api/v1/accounts/{id}/statuses", timelines.account_statuses, ["GET"]),
        r("/api/v1/accounts/{id}/follow", accounts.change_follow(True), ["POST"]),
        r("/api/v1/accounts/{id}/unfollow", accounts.change_follow(False), ["POST"]),
        r("/api/v1/accounts/{id}/followers", accounts.edges("followers"), ["GET"]),
        r("/api/v1/accounts/{id}/following", accounts.edges("following"), ["GET"]),
        r("/api/v2/search", accounts.search_v2, ["GET"]),
        # statuses
        r("/api/v1/statuses", statuses.create, ["POST"]),
        r("/api/v1/statuses", statuses.show_many, ["GET"]),
        r("/api/v1/statuses/{id}", statuses.show, ["GET"]),
        r("/api/v1/statuses/{id}", statuses.destroy, ["DELETE"]),
        r("/api/v1/statuses/{id}", statuses.refused("editing a status"), ["PUT"]),
        r("/api/v1/statuses/{id}/context", statuses.context, ["GET"]),
        r("/api/v1/statuses/{id}/favourited_by", statuses.nobody, ["GET"]),
        r("/api/v1/statuses/{id}/reblogged_by", statuses.nobody, ["GET"]),
        *(r(f"/api/v1/statuses/{{id}}/{action}", statuses.refused(what), ["POST"]) for action, what in statuses.ACTIONS.items()),
        # timelines
        r("/api/v1/timelines/home", timelines.home, ["GET"]),
        r("/api/v1/timelines/public", timelines.public, ["GET"]),
        r("/api/v1/timelines/tag/{hashtag}", timelines.empty, ["GET"]),
        r("/api/v1/timelines/list/{id}", timelines.empty, ["GET"]),
        # live streams (server-sent events and one WebSocket)
        *streaming.routes(service, r),
        # what apps call at start-up, answered empty
        *(r(path, handler, methods) for path, methods, handler in stubs.STUBS),
        # avatars and headers (generated images)
        route(service, "/avatars/{id}.png", images.avatar, ["GET"]),
        route(service, "/headers/{id}.png", images.header, ["GET"]),
        # anything else under /api: Mastodon's 404 body
        Route("/api/{rest:path}", not_found, methods=ALL_METHODS),
    ]
    return out
