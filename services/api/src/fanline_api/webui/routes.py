"""The Twissandra web pages, server-rendered on top of the gateway's use cases.

Every page calls ``Gateway`` (``request.app.state.gateway``) exactly as the
JSON API does — never HTTP to itself, never another service's tables — so the
pages get the same validation and the same error messages. Domain errors
become friendly HTML pages with the status the API would use; nothing here
answers 500 for anything a client can send.

Forms are POST/redirect/GET, protected by a signed double-submit CSRF token
(see ``security.py``). Pages work without JavaScript; ``static/fanline.js``
only adds the 280-character counter.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from fanline_shared.domain import LIMIT_DEFAULT, canonical, parse_rfc3339, validate_password, validate_username
from fanline_shared.errors import Conflict, InvalidInput, NotFound, Unauthorized, status_of

from ..config import Settings
from .page_kit import (
    HERE,
    PageHandler,
    Web,
    client_address,
    form,
    gw,
    more_url,
    page,
    paging,
    redirect,
    require_viewer,
    safe_next,
    user_path,
    viewer,
)
from .security import CSRF_COOKIE, SESSION_COOKIE, clear_cookie, set_cookie

FIND_LIMIT = 20

# --- timelines ---------------------------------------------------------------------


async def home(web: Web, request: Request) -> Response:
    me = viewer(request).username
    if me is None:
        return await public(web, request, welcome=True)
    return await home_page(web, request, me)


async def home_page(
    web: Web, request: Request, me: str, *, error: str | None = None, draft: str = "", status: int = 200
) -> Response:
    limit, cursor = paging(request) if request.method == "GET" else (LIMIT_DEFAULT, None)
    page_, regenerating = await asyncio.gather(
        gw(request).timeline("home", me, limit, cursor), gw(request).regenerating(me, viewer(request).returned_at)
    )
    items: list[dict[str, Any]] = page_["items"]
    # Right after posting, the author's own home row is still being written by
    # the fan-out worker: show the new tweet at once anyway.
    posted = request.query_params.get("posted") if request.method == "GET" else None
    if posted and cursor is None and all(t["id"] != posted for t in items):
        try:
            tweet = await gw(request).tweet(posted)
        except NotFound:
            tweet = None
        newest = items[0]["created_at"] if items else ""
        if tweet and canonical(tweet["username"]) == canonical(me) and tweet["created_at"] > newest:
            items = [tweet, *items]
    return web.render(
        request,
        "timeline.html",
        {
            "title": "Home",
            "kind": "home",
            "tweets": items,
            "cursor": cursor,
            "more": more_url("/", limit, page_["next_cursor"]),
            "newest": "/" if cursor else None,
            "error": error,
            "draft": draft,
            "idempotency_key": uuid.uuid4().hex,
            "regenerating": regenerating,
        },
        status,
    )


async def public(web: Web, request: Request, *, welcome: bool = False) -> Response:
    limit, cursor = paging(request)
    page_ = await gw(request).timeline("public", None, limit, cursor)
    # "More" always continues on /public: the cursor belongs to the public line,
    # whoever is signed in when the link is followed.
    return web.render(
        request,
        "timeline.html",
        {
            "title": "Public timeline",
            "kind": "public",
            "welcome": welcome,
            "tweets": page_["items"],
            "cursor": cursor,
            "more": more_url("/public", limit, page_["next_cursor"]),
            "newest": "/public" if cursor else None,
        },
    )


async def public_page(web: Web, request: Request) -> Response:
    return await public(web, request)


# --- tweets --------------------------------------------------------------------------


async def post_tweet(web: Web, request: Request) -> Response:
    me = require_viewer(request)
    fields = form(request)
    body = fields.get("body", "")
    try:
        tweet, _ = await gw(request).post(me, {"body": body}, fields.get("idempotency_key") or None)
    except InvalidInput as exc:
        return await home_page(web, request, me, error=exc.message, draft=body, status=422)
    return redirect("/?" + urlencode({"posted": tweet["id"]}))


async def delete_tweet(web: Web, request: Request) -> Response:
    me = require_viewer(request)
    try:
        await gw(request).delete(me, request.path_params["tweet_id"])
    except NotFound:
        pass  # already gone (a second click): the user's wish holds
    return redirect(safe_next(form(request).get("next")))


# --- sign in, sign up, sign out --------------------------------------------------------


def login_form(
    web: Web,
    request: Request,
    *,
    status: int = 200,
    signin_error: str | None = None,
    signup_error: str | None = None,
    signin_username: str = "",
    signup_username: str = "",
) -> Response:
    nxt = safe_next(form(request).get("next") or request.query_params.get("next"), "")
    return web.render(
        request,
        "login.html",
        {
            "title": "Sign in or sign up",
            "next": nxt,
            "signin_error": signin_error,
            "signup_error": signup_error,
            "signin_username": signin_username,
            "signup_username": signup_username,
        },
        status,
    )


def signed_in(web: Web, request: Request, session: dict[str, Any]) -> Response:
    response = redirect(safe_next(form(request).get("next")))
    try:
        expires = parse_rfc3339(str(session["expires_at"]))
        max_age: int | None = max(0, int((expires - datetime.now(UTC)).total_seconds()))
    except (KeyError, ValueError):
        max_age = None
    token = str(session["token"])
    set_cookie(request, response, SESSION_COOKIE, token, max_age)
    set_cookie(request, response, CSRF_COOKIE, web.csrf.mint(token))
    return response


async def login_page(web: Web, request: Request) -> Response:
    if viewer(request).username is not None:
        return redirect(safe_next(request.query_params.get("next")))
    return login_form(web, request)


async def sign_in(web: Web, request: Request) -> Response:
    fields = form(request)
    username = fields.get("username", "").strip()
    try:
        session = await gw(request).login({"username": username, "password": fields.get("password", "")}, client_address(request))
    except Unauthorized as exc:
        return login_form(web, request, status=401, signin_error=exc.message, signin_username=username)
    return signed_in(web, request, session)


async def sign_up(web: Web, request: Request) -> Response:
    fields = form(request)
    username = fields.get("username", "").strip()
    password = fields.get("password", "")
    try:
        validate_username(username)
        validate_password(password)
        if password != fields.get("password2", ""):
            raise InvalidInput("the two passwords do not match", code="password_mismatch")
        await gw(request).sign_up({"username": username, "password": password})
    except (InvalidInput, Conflict) as exc:
        return login_form(web, request, status=status_of(exc), signup_error=exc.message, signup_username=username)
    session = await gw(request).login({"username": username, "password": password}, client_address(request))
    return signed_in(web, request, session)


async def sign_out(web: Web, request: Request) -> Response:
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        try:
            await gw(request).logout(f"Bearer {token}")
        except Unauthorized:
            pass  # already expired or revoked
    response = redirect("/")
    clear_cookie(request, response, SESSION_COOKIE)
    clear_cookie(request, response, CSRF_COOKIE)
    return response


# --- people ------------------------------------------------------------------------------


async def follow_state(request: Request, username: str) -> bool | None:
    """None when there is no button to show (signed out, or one's own page)."""
    me = viewer(request).username
    if me is None or canonical(me) == canonical(username):
        return None
    return await gw(request).is_following(me, username)


async def find(web: Web, request: Request) -> Response:
    query = request.query_params.get("q", "").strip()
    exact: dict[str, Any] | None = None
    matches: list[dict[str, Any]] = []
    error = None
    following = None
    if query:
        try:
            validate_username(query)
        except InvalidInput as exc:
            error = exc.message
        else:
            found = await gw(request).users(query)
            exact = found[0] if found else None
            matches = [u for u in await gw(request).search(query, FIND_LIMIT) if canonical(u["username"]) != canonical(query)]
            if exact is not None:
                following = await follow_state(request, exact["username"])
    return web.render(
        request,
        "find.html",
        {
            "title": "Find friends",
            "query": query,
            "exact": exact,
            "matches": matches,
            "error": error,
            "following": following,
        },
        422 if error else 200,
    )


async def user_page(web: Web, request: Request) -> Response:
    name = request.path_params["username"]
    limit, cursor = paging(request)
    profile = await gw(request).user(name)  # 404 first
    page_ = await gw(request).timeline("user", name, limit, cursor)
    path = user_path(profile["username"])
    return web.render(
        request,
        "user.html",
        {
            "title": profile["username"],
            "profile": profile,
            "tab": "tweets",
            "tweets": page_["items"],
            "following": await follow_state(request, name),
            "cursor": cursor,
            "more": more_url(request.url.path, limit, page_["next_cursor"]),
            "newest": path if cursor else None,
        },
    )


def edges_page(direction: str) -> PageHandler:
    async def handler(web: Web, request: Request) -> Response:
        name = request.path_params["username"]
        limit, cursor = paging(request)
        profile = await gw(request).user(name)
        page_ = await gw(request).edges(name, direction, limit, cursor)
        path = f"{user_path(profile['username'])}/{direction}"
        return web.render(
            request,
            "user.html",
            {
                "title": f"{profile['username']} · {direction}",
                "profile": profile,
                "tab": direction,
                "edges": page_["items"],
                "following": await follow_state(request, name),
                "cursor": cursor,
                "more": more_url(request.url.path, limit, page_["next_cursor"]),
                "newest": path if cursor else None,
            },
        )

    return handler


def change_follow(follow: bool) -> PageHandler:
    async def handler(web: Web, request: Request) -> Response:
        me = require_viewer(request)
        target = request.path_params["username"]
        await gw(request).follow(me, me, target, follow=follow)
        return redirect(safe_next(form(request).get("next"), user_path(target)))

    return handler


# --- the routes ------------------------------------------------------------------------------


def routes(settings: Settings) -> list[BaseRoute]:
    """The web pages and their static files, to add to the gateway's routes."""
    from . import authorize

    web = Web(settings)
    return [
        page(web, "/", home),
        page(web, "/public", public_page),
        page(web, "/login", login_page),
        page(web, "/login", sign_in, ("POST",)),
        page(web, "/signup", sign_up, ("POST",)),
        page(web, "/logout", sign_out, ("POST",)),
        page(web, "/find", find),
        page(web, "/tweets", post_tweet, ("POST",)),
        page(web, "/tweets/{tweet_id}/delete", delete_tweet, ("POST",)),
        page(web, "/u/{username}", user_page),
        page(web, "/u/{username}/followers", edges_page("followers")),
        page(web, "/u/{username}/following", edges_page("following")),
        page(web, "/u/{username}/follow", change_follow(True), ("POST",)),
        page(web, "/u/{username}/unfollow", change_follow(False), ("POST",)),
        # The OAuth authorization page and Mastodon's account and status URLs.
        *authorize.routes(web),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
