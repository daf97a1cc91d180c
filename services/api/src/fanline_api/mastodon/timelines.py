"""Mastodon's timelines: ``/api/v1/timelines/home``, ``/public`` and
``/api/v1/accounts/:id/statuses``, over the same ``Gateway.timeline`` /
``home_timeline`` as ``/v1`` (same sources, same guarantees: no skip, no
repeat, large accounts merged, a ``206`` while a returning user's home
timeline is regenerated).

Paging is Mastodon's (``Api::BaseController``, ``Paginable``): ``limit``
20 by default, at most 40; ``max_id`` (older than), ``since_id`` (the newest
items newer than), ``min_id`` (the *oldest* items newer than: the page right
after, returned newest first; tweet-store reads every source oldest first
for it). A non-empty page has ``Link: <max_id=last>; rel="next",
<min_id=first>; rel="prev"``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fanline_shared import scopes as scope_rules
from fanline_shared.http_routes import json_response

from .context import authorization, gw, link, optional, statuses
from .params import Params, limit, path_id, read_params, status_id

# Retry-After of a 206 while a returning user's home timeline is regenerated.
REGENERATING_RETRY_AFTER_S = 1


def bounds(params: Params) -> dict[str, int]:
    """Mastodon's ``max_id``/``since_id``/``min_id`` as tweet-store's sid bounds."""
    out: dict[str, int] = {}
    for name, key in (("max_id", "max_sid"), ("since_id", "since_sid"), ("min_id", "min_sid")):
        value = status_id(params.get(name), name)
        if value is not None:
            out[key] = value
    return out


async def page_response(
    request: Request, page: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    items = await statuses(request, page["items"])
    if items:
        paging = link(request, items[-1]["id"], items[0]["id"])
    else:
        # Every tweet of a full slice was deleted: older ones may still follow.
        paging = link(request, page.get("next_sid"), None) if page.get("next_sid") else {}
    return json_response(items, status, {**paging, **(headers or {})})


async def home(request: Request) -> Response:
    params = await read_params(request)
    page, regenerating = await gw(request).home_timeline(authorization(request), limit(params), None, None, sids=bounds(params))
    if regenerating:
        # Mastodon's 206 (HomeFeed#regenerating?): the page so far, complete soon.
        return await page_response(request, page, 206, {"Retry-After": str(REGENERATING_RETRY_AFTER_S)})
    return await page_response(request, page)


async def public(request: Request) -> Response:
    params = await read_params(request)
    await optional(request, scope_rules.READ_STATUSES)
    if params.flag("remote") or params.flag("only_media"):
        return json_response([])  # no remote statuses, no media on Fanline
    page = await gw(request).timeline("public", None, limit(params), None, sids=bounds(params))
    return await page_response(request, page)


async def account_statuses(request: Request) -> Response:
    params = await read_params(request)
    await optional(request, scope_rules.READ_STATUSES)
    g = gw(request)
    profile = await g.account_by_id(path_id(request))
    if params.flag("pinned") or params.flag("only_media") or params.get("tagged"):
        return json_response([])  # no pins, media or hashtags on Fanline
    page = await g.timeline("user", str(profile["username"]), limit(params), None, sids=bounds(params))
    return await page_response(request, page)


async def empty(request: Request) -> Response:
    """Hashtag and list timelines: Fanline has neither."""
    await optional(request, scope_rules.READ_STATUSES)
    return json_response([])
