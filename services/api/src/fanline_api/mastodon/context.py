"""What every Mastodon route needs: the gateway, this server's public URL,
who is asking (and whether their token's scopes admit the route), the
rendering of statuses with their authors, and ``Link`` headers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlencode

from starlette.requests import HTTPConnection, Request

from fanline_shared.domain import canonical
from fanline_shared.errors import Unauthorized

from ..gateway import Gateway
from ..principal import NotAUser, Principal
from . import entities

PAGING = ("max_id", "since_id", "min_id")


def gw(request: Request) -> Gateway:
    return request.app.state.gateway  # type: ignore[no-any-return]


def base(request: HTTPConnection) -> str:
    """``FANLINE_PUBLIC_URL`` if set, else the scheme and host the request
    came to (a WebSocket's ``ws(s)`` as ``http(s)``)."""
    configured: str | None = getattr(request.app.state, "public_url", None)
    if configured:
        return configured
    url = str(request.base_url).rstrip("/")
    return "http" + url[2:] if url.startswith("ws") else url


def authorization(request: Request) -> str | None:
    """The bearer token from the header, else from ``access_token`` (query
    or form: Doorkeeper's ``from_access_token_param``)."""
    header = request.headers.get("authorization")
    if header:
        return header
    token = request.query_params.get("access_token")
    return f"Bearer {token}" if token else None


async def user(request: Request, need: tuple[str, ...]) -> Principal:
    """A user's token admitted by ``need``; 401 without one, 422 for an
    app's own token, 403 outside its scopes (Mastodon's answers)."""
    return await gw(request).signed_in(authorization(request), need)


async def optional(request: Request, need: tuple[str, ...]) -> Principal | None:
    """Public data: anyone may read it, but a token given must be valid and
    admit ``need`` (Mastodon's ``authorize_if_got_token!``)."""
    auth = authorization(request)
    if auth is None:
        return None
    who = await gw(request).principal(auth)
    who.require(need)
    return who


async def anyone(request: Request) -> Principal:
    """Any valid token, a user's or an app's."""
    auth = authorization(request)
    if auth is None:
        raise Unauthorized("a token is required", code="unauthorized")
    return await gw(request).principal(auth)


def require_user(who: Principal) -> Principal:
    if who.kind != "user":
        raise NotAUser("this needs a user's token", code="unauthorized")
    return who


async def accounts_of(request: Request, usernames: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Account entities by canonical name (from the gateway's account cache)."""
    url = base(request)
    profiles = await gw(request).accounts.many(usernames)
    return {name: entities.account(profile, url) for name, profile in profiles.items()}


async def statuses(request: Request, tweets: Sequence[dict[str, Any]], *, source: bool = False) -> list[dict[str, Any]]:
    """Tweets as Status entities, each with its author's account."""
    url = base(request)
    authors = await accounts_of(request, (str(t["username"]) for t in tweets))
    out = []
    for tweet in tweets:
        author = authors.get(canonical(str(tweet["username"])))
        if author is not None:
            out.append(entities.status(tweet, author, url, source=source))
    return out


def link(request: Request, next_max: str | None, prev_min: str | None) -> dict[str, str]:
    """``Link: <…max_id=…>; rel="next", <…min_id=…>; rel="prev"`` — next
    first (toot takes the first match), absolute URLs keeping the request's
    other parameters."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k not in PAGING and k != "access_token"]
    here = base(request) + request.url.path
    links = []
    if next_max is not None:
        links.append(f'<{here}?{urlencode([*kept, ("max_id", next_max)])}>; rel="next"')
    if prev_min is not None:
        links.append(f'<{here}?{urlencode([*kept, ("min_id", prev_min)])}>; rel="prev"')
    return {"Link": ", ".join(links)} if links else {}
