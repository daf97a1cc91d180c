"""Mastodon's statuses: post (with ``Idempotency-Key``, exactly ``/v1``'s
semantics), read, delete, context; what Fanline has no notion of —
visibility other than public, media, polls, replies, content warnings,
scheduling, quotes, favourites, boosts, bookmarks, pins — is refused with
``422`` and a message saying so, never silently changed. Harmless defaults
(``sensitive`` false, an empty ``spoiler_text``, a ``language``) pass.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from fanline_shared import scopes as scope_rules
from fanline_shared.domain import BODY_MAX
from fanline_shared.errors import Forbidden, InvalidInput, NotFound
from fanline_shared.http_routes import json_response

from .context import gw, optional, statuses, user
from .params import Params, read_params


def unsupported(what: str) -> InvalidInput:
    return InvalidInput(f"{what} is not supported by this server (Fanline)", code="unsupported")


def refuse_unsupported(params: Params) -> None:
    visibility = params.text("visibility")
    if visibility not in (None, "", "public"):
        raise InvalidInput(
            f"visibility {visibility[:20]!r} is not supported: every status on this server is public", code="unsupported"
        )
    if params.list("media_ids"):
        raise unsupported("media")
    if params.get("poll") is not None or params.list("poll[options]"):
        raise unsupported("a poll")
    if params.get("in_reply_to_id") not in (None, ""):
        raise unsupported("replying")
    if (params.text("spoiler_text") or "").strip():
        raise unsupported("a content warning (spoiler_text)")
    if params.flag("sensitive"):
        raise unsupported("marking a status sensitive")
    if params.get("scheduled_at") not in (None, ""):
        raise unsupported("scheduling a status")
    if params.get("quoted_status_id") not in (None, ""):
        raise unsupported("quoting")


async def create(request: Request) -> Response:
    who = await user(request, scope_rules.WRITE_STATUSES)
    params = await read_params(request)
    refuse_unsupported(params)
    text = params.text("status")
    try:
        tweet, _created = await gw(request).post(who.username, {"body": text}, request.headers.get("idempotency-key"))
    except InvalidInput as exc:
        if exc.code != "invalid_body":
            raise
        raise InvalidInput(f"Validation failed: status must be 1-{BODY_MAX} characters (after trimming)", code=exc.code) from None
    return json_response((await statuses(request, [tweet]))[0])


async def show(request: Request) -> Response:
    await optional(request, scope_rules.READ_STATUSES)
    tweet = await gw(request).status(request.path_params["id"])
    return json_response((await statuses(request, [tweet]))[0])


async def show_many(request: Request) -> Response:
    """``GET /api/v1/statuses?id[]=…``: those that exist, in the order asked."""
    await optional(request, scope_rules.READ_STATUSES)
    params = await read_params(request)
    found = []
    for sid in params.list("id")[:40]:
        try:
            found.append(await gw(request).status(str(sid)))
        except NotFound:
            continue
    return json_response(await statuses(request, found))


async def destroy(request: Request) -> Response:
    """The deleted status, with its ``text`` (Mastodon's "delete and
    redraft"); a later GET is 404. Someone else's status: 404, as Mastodon."""
    who = await user(request, scope_rules.WRITE_STATUSES)
    try:
        tweet = await gw(request).delete_status(who.username, request.path_params["id"])
    except Forbidden:
        raise NotFound("not your status", code="tweet_not_found") from None
    return json_response((await statuses(request, [tweet], source=True))[0])


async def context(request: Request) -> Response:
    """No replies on Fanline: the thread around a status is itself."""
    await optional(request, scope_rules.READ_STATUSES)
    await gw(request).status(request.path_params["id"])
    return json_response({"ancestors": [], "descendants": []})


async def nobody(request: Request) -> Response:
    """``favourited_by``/``reblogged_by``: nobody (no favourites, no boosts)."""
    await optional(request, scope_rules.READ_ACCOUNTS)
    await gw(request).status(request.path_params["id"])
    return json_response([])


def refused(action: str):  # type: ignore[no-untyped-def]
    """Favourite, boost, bookmark, pin, mute (and their undoing) → 422."""
    needs = scope_rules.WRITE_STATUSES

    async def handler(request: Request) -> Response:
        await user(request, needs)
        await gw(request).status(request.path_params["id"])
        raise unsupported(action)

    return handler


ACTIONS = {
    "favourite": "favouriting",
    "unfavourite": "favouriting",
    "reblog": "boosting (reblog)",
    "unreblog": "boosting (reblog)",
    "bookmark": "bookmarking",
    "unbookmark": "bookmarking",
    "pin": "pinning",
    "unpin": "pinning",
    "mute": "muting a conversation",
    "unmute": "muting a conversation",
}
