"""What apps call at start-up and Fanline has no notion of: answered with
empty results instead of ``404`` (several apps stop at a 404 there), as the
lightweight servers (GoToSocial, takahe) do. Each still checks the token
Mastodon would check: a bad token is a ``401`` here too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fanline_shared.http_routes import json_response

from .context import optional, user

PREFERENCES = {
    "posting:default:visibility": "public",
    "posting:default:sensitive": False,
    "posting:default:language": None,
    "posting:default:quote_policy": "public",
    "reading:expand:media": "default",
    "reading:expand:spoilers": False,
    "reading:autoplay:gifs": False,
}


def empty(value: Callable[[], Any], *, signed_in: bool = True):  # type: ignore[no-untyped-def]
    """A route answering ``value()`` to anyone with a user's token (or, when
    not ``signed_in``, to anyone at all)."""

    async def handler(request: Request) -> Response:
        if signed_in:
            await user(request, ("read", "write", "follow", "push", "profile", "read:accounts"))
        else:
            await optional(request, ())
        return json_response(value())

    return handler


LIST = empty(list)
OBJECT = empty(dict)
PUBLIC_LIST = empty(list, signed_in=False)
PUBLIC_OBJECT = empty(dict, signed_in=False)
PREFERENCES_ROUTE = empty(lambda: dict(PREFERENCES))
UNREAD = empty(lambda: {"count": 0})
FILTERS = LIST

# (path, methods, handler): every answer is empty.
STUBS: list[tuple[str, list[str], Any]] = [
    ("/api/v1/notifications", ["GET"], LIST),
    ("/api/v2/notifications", ["GET"], empty(lambda: {"accounts": [], "statuses": [], "notification_groups": []})),
    ("/api/v1/notifications/unread_count", ["GET"], UNREAD),
    ("/api/v2/notifications/unread_count", ["GET"], UNREAD),
    ("/api/v1/notifications/clear", ["POST"], OBJECT),
    (
        "/api/v1/notifications/policy",
        ["GET"],
        empty(
            lambda: {"for_not_following": "accept", "summary": {"pending_requests_count": 0, "pending_notifications_count": 0}}
        ),
    ),
    ("/api/v1/markers", ["GET", "POST"], OBJECT),
    ("/api/v1/preferences", ["GET"], PREFERENCES_ROUTE),
    ("/api/v1/lists", ["GET"], LIST),
    ("/api/v1/filters", ["GET"], FILTERS),
    ("/api/v2/filters", ["GET"], FILTERS),
    ("/api/v1/custom_emojis", ["GET"], PUBLIC_LIST),
    ("/api/v1/announcements", ["GET"], LIST),
    ("/api/v1/conversations", ["GET"], LIST),
    ("/api/v1/mutes", ["GET"], LIST),
    ("/api/v1/blocks", ["GET"], LIST),
    ("/api/v1/domain_blocks", ["GET"], LIST),
    ("/api/v1/follow_requests", ["GET"], LIST),
    ("/api/v1/bookmarks", ["GET"], LIST),
    ("/api/v1/favourites", ["GET"], LIST),
    ("/api/v1/endorsements", ["GET"], LIST),
    ("/api/v1/followed_tags", ["GET"], LIST),
    ("/api/v1/featured_tags", ["GET"], LIST),
    ("/api/v1/scheduled_statuses", ["GET"], LIST),
    ("/api/v1/suggestions", ["GET"], LIST),
    ("/api/v2/suggestions", ["GET"], LIST),
    ("/api/v1/trends", ["GET"], PUBLIC_LIST),
    ("/api/v1/trends/tags", ["GET"], PUBLIC_LIST),
    ("/api/v1/trends/statuses", ["GET"], PUBLIC_LIST),
    ("/api/v1/trends/links", ["GET"], PUBLIC_LIST),
    ("/api/v1/directory", ["GET"], PUBLIC_LIST),
    ("/api/v1/instance/peers", ["GET"], PUBLIC_LIST),
    ("/api/v1/instance/activity", ["GET"], PUBLIC_LIST),
    ("/api/v1/instance/rules", ["GET"], PUBLIC_LIST),
    ("/api/v1/instance/domain_blocks", ["GET"], PUBLIC_LIST),
    ("/api/v1/instance/translation_languages", ["GET"], PUBLIC_OBJECT),
    ("/api/v1/accounts/{id}/featured_tags", ["GET"], PUBLIC_LIST),
    ("/api/v1/accounts/{id}/lists", ["GET"], LIST),
    ("/api/v1/accounts/{id}/identity_proofs", ["GET"], PUBLIC_LIST),
]
